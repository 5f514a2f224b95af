"""`greenadapt expand`: write the domain-adapted model folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from greenadapt import api
from greenadapt.adaptation.methods import method_help
from greenadapt.api import default_of
from greenadapt.artifacts.manifest import Manifest
from greenadapt.cli._common import (
    api_command,
    show_stage,
    what_changed,
)


@api_command("expand", api.expand, show_stage(lambda outcome: _summary(outcome)))
def expand_command(
    align: Path | None = typer.Option(None, "--align", help="Folder written by `greenadapt align`."),
    corpus: list[str] | None = typer.Option(
        None, "--corpus", "-c", help="Find the align output of this corpus in the workspace (repeatable)."
    ),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Model folder or Hub id (default: the model align was fitted on)."
    ),
    max_new: int | None = typer.Option(
        None, "--max-new", min=0, help="Add at most this many new words, most frequent first."
    ),
    min_count: int = typer.Option(default_of(api.expand, "min_count"), "--min-count", min=1, help="Add only words the corpus has at least this often (1: every word2vec word, the paper's setting)."),
    seed: int = typer.Option(default_of(api.expand, "seed"), "--seed", help="Seed of the random ablation's draws (align --method random)."),
    method: str | None = typer.Option(
        None, "--method", metavar="NAME",
        help="The initialisation method (chosen at align): with --corpus, use its align folder; with --align, check it. "
        + method_help(),
    ),
    also_align: list[Path] = typer.Option([], "--also-align", metavar="DIR",
                                          help="The align folder of another word2vec draw (repeat): each new row is the mean of the draws' rows."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output model folder (default: beside the align folder)."),
) -> dict[str, Any] | None:
    """Add the aligned vectors of new words as embedding rows, with a domain tokenizer that keeps them whole."""
    return None


def _summary(outcome: Any) -> str:
    stats = Manifest.of(outcome.manifest, outcome.path).stats
    state = "up to date" if outcome.skipped else "done"
    return (
        f"expand {state}: {stats.get('n_new', 0):,} new rows "
        f"(vocabulary {stats.get('vocab_size_before', 0):,} -> {stats.get('vocab_size_after', 0):,}) -> {outcome.path}"
    ) + what_changed(stats)
