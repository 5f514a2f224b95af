"""`greenadapt qa`: extractive question answering over whole documents."""

from __future__ import annotations

from typing import Any

from greenadapt import api
from greenadapt.artifacts.manifest import Manifest
from greenadapt.cli._build import declared_command
from greenadapt.cli._common import show_stage
from greenadapt.inference.qa.settings import QaSettings


def _summary(outcome: Any) -> str:
    stats = Manifest.of(outcome.manifest, outcome.path).stats
    state = "up to date" if outcome.skipped else f"{stats.get('questions_per_s') or 0:.2f} questions/s"
    scores = ""
    if stats.get("f1") is not None:
        scores = f"; EM {stats['exact_match']:.2f} F1 {stats['f1']:.2f} substring {stats['substring_match']:.2f}"
    warnings = "".join(f"\nwarning: {w}" for w in stats.get("warnings") or [])
    return f"qa: {stats.get('questions', '?')} questions, pool {stats.get('pool', '?')}{scores} ({state}) -> {outcome.path}{warnings}"


declared_command(QaSettings, api.qa, show_stage(_summary),
                 help="Answer each question over its whole document with sliding windows (one or two tokenizers).")
