"""`greenadapt multitask`: one shared encoder, a head and PALs per task (NER and classification)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from greenadapt import api
from greenadapt.artifacts.manifest import Manifest, multitask_tasks
from greenadapt.cli._build import declared_command
from greenadapt.cli._common import show_stage
from greenadapt.runners.multitask.settings import MultitaskSettings


def summary(document: Mapping[str, Any], path: Path, skipped: bool) -> str:
    """One line: each task's primary score (test, else dev), the average, and the parameter count."""
    manifest = Manifest.of(document, path)
    stats = manifest.stats
    tasks = multitask_tasks(manifest.config)
    parts = []
    for name, splits in manifest.section("stats", "scores").items():
        split = "test" if "test" in splits else "dev" if "dev" in splits else None
        if split is not None:
            parts.append(f"{name} {split} {tasks.get(name, {}).get('metric', '')} {100 * splits[split]:.2f}")
    average = manifest.section("stats", "average")
    split = "test" if "test" in average else "dev" if "dev" in average else None
    if split is not None:
        parts.append(f"average {split} {100 * average[split]:.2f}")
    counts = manifest.section("stats", "parameters")
    size = ""
    if counts.get("relative_to_base"):
        per_task = [t["total"] for t in manifest.section("stats", "parameters", "per_task").values()]
        size = (f"; parameters {counts['total']:,} = {counts['relative_to_base']:.3f}x the base ({counts['base']:,}), "
                f"{max(per_task, default=0):,} per task at most")
    state = "up to date" if skipped else "trained"
    listed = f": {', '.join(parts)}" if parts else ""
    warnings = "".join(f"\nwarning: {w}" for w in stats.get("warnings") or [])
    return f"{state} {len(stats.get('tasks', []))}-task {stats.get('adapter', '')} model in {path}{listed}{size}{warnings}"


declared_command(MultitaskSettings, api.multitask, show_stage(lambda outcome: summary(outcome.manifest, outcome.path, outcome.skipped)),
                 help="Multi-task fine-tuning with PALs: per-task scores, their average and the parameter count.")
