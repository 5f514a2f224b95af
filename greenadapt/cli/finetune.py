"""`greenadapt finetune`: fine-tune on NER, text classification or SQuAD-style QA with both tokenizers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt import api
from greenadapt.artifacts.manifest import Manifest
from greenadapt.cli._build import declared_command
from greenadapt.cli._common import show_stage
from greenadapt.runners.finetune.settings import FinetuneSettings
from greenadapt.tasks import TASKS, tasks_epilog

if TYPE_CHECKING:
    from greenadapt.artifacts.stage import StageOutcome

def _summary(outcome: StageOutcome) -> str:
    manifest = Manifest.of(outcome.manifest, outcome.path)
    stats = manifest.stats
    if stats.get("task") in TASKS and TASKS[stats["task"]].answers_questions:
        return _qa_summary(outcome.path, stats, outcome.skipped)
    metric = manifest.section("config", "task").get("metric", "")
    parts = []
    for split, value in manifest.section("stats", "summary").items():
        text = f"{split} {metric} {100 * value['mean']:.2f}"
        if value.get("n", 1) > 1:
            text += f" ± {100 * value['std']:.2f} ({value['n']} seeds)"
        parts.append(text)
    state = "up to date" if outcome.skipped else "fine-tuned"
    scores = f": {', '.join(parts)} (pool {stats.get('pool')})" if parts else ""
    warnings = "".join(f"\nwarning: {w}" for w in stats.get("warnings") or [])
    return f"{state} {stats.get('task', '')} model in {outcome.path}{scores}{per_type_lines(stats.get('per_type'))}{warnings}"


def per_type_lines(per_type: Mapping[str, Any] | None) -> str:
    """Each split's F1 per entity type, one line a split (seqeval's per-type report, over seeds)."""
    from greenadapt.artifacts.info import per_type_cells

    return "".join(f"\n{split} f1 by entity type: {per_type_cells(kinds)}" for split, kinds in (per_type or {}).items())


def _qa_summary(path: Path, stats: Mapping[str, Any], skipped: bool) -> str:
    parts = [
        f"{split} EM {stats[split]['exact_match']:.2f} F1 {stats[split]['f1']:.2f}"
        for split in ("dev", "test")
        if isinstance(stats.get(split), dict) and stats[split].get("f1") is not None
    ]
    state = "up to date" if skipped else "fine-tuned"
    scores = f": {', '.join(parts)} (pool {stats.get('pool')})" if parts else ""
    warnings = "".join(f"\nwarning: {w}" for w in stats.get("warnings") or [])
    return f"{state} qa model in {path}{scores}{warnings}"


declared_command(FinetuneSettings, api.finetune, show_stage(_summary), epilog=tasks_epilog(),
                 help="Fine-tune on both tokenizers' views of each example (--no-both-views: a 50/50 mixture); evaluate mean-pooled.")
