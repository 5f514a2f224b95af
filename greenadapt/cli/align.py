"""`greenadapt align`: fit the map from word2vec space into the model's embedding space."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from greenadapt import api
from greenadapt.api import default_of
from greenadapt.artifacts.manifest import Manifest
from greenadapt.cli._common import (
    METHOD_OPTIONS,
    api_command,
    emit,
)


@api_command("align", api.align, lambda outcome, as_json: _show(outcome, as_json), groups=(METHOD_OPTIONS,))
def align_command(
    w2v: Path | None = typer.Option(None, "--w2v", help="Folder written by `greenadapt w2v`."),
    corpus: list[str] | None = typer.Option(
        None, "--corpus", "-c", help="Find the w2v output of this corpus in the workspace (repeatable)."
    ),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Model folder or Hub id (default: the model the w2v output was made with)."
    ),
    seed: int = typer.Option(default_of(api.align, "seed"), "--seed", help="Seed of the held-out split (and of the random ablation)."),
    probe: list[str] | None = typer.Option(
        None, "--probe", help="Also show the neighbours of this word (repeatable)."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output folder (default: beside the w2v folder)."),
) -> dict[str, Any] | None:
    """Fit the initialisation method on the words word2vec and the model share (the paper's least squares by default)."""
    return None



def _print_neighbours(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="nearest neighbours (cf. Poerner et al. 2020, Table 2)", title_justify="left")
    table.add_column("word")
    table.add_column("count", justify="right")
    table.add_column("within word2vec space")
    table.add_column("cross-space: wordpieces nearest to W·v")
    for row in rows:
        if not row.get("in_w2v"):
            within, cross = "(not in the word2vec vocabulary)", ""
        else:
            within = ", ".join(word for word, _ in row.get("within", []))
            cross = ", ".join(token for token, _ in row.get("cross", [])) or "—"
        count = row.get("count")
        table.add_row(row["word"], "" if count is None else f"{count:,}", within, cross)
    Console(soft_wrap=False).print(table)


def _show(outcome: Any, as_json: bool) -> None:
    from greenadapt.adaptation.align import neighbours_of

    stats = Manifest.of(outcome.manifest, outcome.path).stats
    state = "up to date" if outcome.skipped else "done"
    held = stats.get("heldout_cosine")
    summary = (
        f"align {state}: {stats.get('n_shared', 0):,} shared words, {stats.get('n_new', 0):,} new; "
        f"held-out cosine {'n/a' if held is None else f'{held:.3f}'} ({stats.get('method')}) -> {outcome.path}"
    )
    emit(outcome.manifest, summary, as_json=as_json)
    if not as_json:
        _print_neighbours(neighbours_of(outcome.path))
