"""`greenadapt qa`: extractive question answering over whole documents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from greenadapt import api
from greenadapt.api import default_of
from greenadapt.artifacts.manifest import Manifest
from greenadapt.cli._common import (
    api_command,
    show_stage,
)


@api_command("qa", api.qa, show_stage(lambda outcome: _summary(outcome)))
def qa_command(
    model: str | None = typer.Option(
        None, "--model", "-m", help="QA model folder (plain or from `greenadapt expand`) or Hub id."
    ),
    data: Path = typer.Option(..., "--data", "-d", help="SQuAD v1/v2-style JSON file (e.g. Covid-QA)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for predictions.json, nbest.json, metrics.json."),
    pool: str | None = typer.Option(
        None,
        "--pool",
        help="mean (average word logits of both tokenizers), general (T_LM) or domain (T̂). "
        "Default: mean for an expanded model, general for a plain one.",
    ),
    max_length: int | None = typer.Option(None, "--max-length", help="Model input length. Default: the model's (512 for BERT)."),
    batch_size: int = typer.Option(default_of(api.qa, "batch_size"), "--batch-size", min=1, help="Windows per forward pass."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Only the first N questions (quick runs)."),
    n_best: int = typer.Option(default_of(api.qa, "n_best"), "--n-best", min=1, help="Answers kept per question in nbest.json."),
    max_answer_chars: int = typer.Option(default_of(api.qa, "max_answer_chars"), "--max-answer-chars", min=1, help="Longest answer in characters."),
    device: str = typer.Option(default_of(api.qa, "device"), "--device", help="auto, cpu, cuda or cuda:N."),
    general_model: str | None = typer.Option(
        None, "--general-model", help="G-MAP model: its general model, if not where training found it (weights are checked)."
    ),
) -> dict[str, Any] | None:
    """Answer each question over its whole document with sliding windows (one or two tokenizers)."""
    return None


def _summary(outcome: Any) -> str:
    stats = Manifest.of(outcome.manifest, outcome.path).stats
    state = "up to date" if outcome.skipped else f"{stats.get('questions_per_s') or 0:.2f} questions/s"
    scores = ""
    if stats.get("f1") is not None:
        scores = f"; EM {stats['exact_match']:.2f} F1 {stats['f1']:.2f} substring {stats['substring_match']:.2f}"
    warnings = "".join(f"\nwarning: {w}" for w in stats.get("warnings") or [])
    return f"qa: {stats.get('questions', '?')} questions, pool {stats.get('pool', '?')}{scores} ({state}) -> {outcome.path}{warnings}"
