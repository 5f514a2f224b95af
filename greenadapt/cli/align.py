"""`greenadapt align`: fit the map from word2vec space into the model's embedding space."""

from __future__ import annotations

from typing import Any

from greenadapt import api
from greenadapt.adaptation.settings import AlignSettings
from greenadapt.artifacts.manifest import Manifest
from greenadapt.cli._build import declared_command
from greenadapt.cli._common import emit


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


declared_command(AlignSettings, api.align, _show,
                 help="Fit the initialisation method on the words word2vec and the model share (the paper's least squares by default).")
