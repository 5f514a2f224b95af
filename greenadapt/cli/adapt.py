"""`greenadapt adapt`: w2v -> align -> expand in one command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from greenadapt import api
from greenadapt.api import default_of
from greenadapt.artifacts.manifest import Manifest
from greenadapt.cli._common import (
    METHOD_OPTIONS,
    CONTEXT_OPTIONS,
    api_command,
    emit,
    neighbours_lines,
    what_changed,
)


@api_command("adapt", api.adapt, lambda outcome, as_json: _show(outcome, as_json), renames={"text_field": "text_fields"}, groups=(METHOD_OPTIONS, CONTEXT_OPTIONS))
def adapt_command(
    corpus: list[str] = typer.Option(
        ..., "--corpus", "-c", help="Registered corpus name, file, directory, glob or URL (repeatable)."
    ),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Model folder or Hub id (default: bundled all-MiniLM-L6-v2)."
    ),
    text_field: list[str] | None = typer.Option(None, "--text-field", help="JSON/CSV field(s) holding text."),
    dim: int | None = typer.Option(None, "--dim", help="word2vec dimension (default: the model's hidden size)."),
    epochs: int = typer.Option(default_of(api.adapt, "epochs"), "--epochs", min=1, help="word2vec epochs."),
    min_count: int = typer.Option(default_of(api.adapt, "min_count"), "--min-count", min=1, help="word2vec minimum word count."),
    max_vocab: int | None = typer.Option(
        None, "--max-vocab", min=1, metavar="N",
        help="Keep at most N words, the most frequent (gensim's max_final_vocab: min-count is raised as needed); bounds a huge corpus's vocabulary.",
    ),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Threads/processes (default: the cores this process may use: affinity mask and cgroup quota, or $GREENADAPT_WORKERS)."),
    max_new: int | None = typer.Option(None, "--max-new", min=0, help="At most this many new words (most frequent first)."),
    min_count_new: int = typer.Option(default_of(api.adapt, "min_count_new"), "--min-count-new", min=1, help="Add only words the corpus has at least this often (1: every word2vec word, the paper's setting)."),
    w2v_draws: int = typer.Option(default_of(api.adapt, "w2v_draws"), "--w2v-draws", min=1, metavar="K",
                                  help="Train word2vec K times (seeds --seed, --seed+1, ...) and average each new word's aligned rows: "
                                       "a gain that depends less on one draw's luck (K times the word2vec cost)."),
    seed: int = typer.Option(default_of(api.adapt, "seed"), "--seed", help="Random seed for every stage."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Folder for the adapted model (default: in the workspace)."),
) -> dict[str, Any] | None:
    """Adapt a model to a domain corpus: train word2vec, align it, expand the vocabulary."""
    return None


def _show(outcome: Any, as_json: bool) -> None:
    lines = []
    for name, stage in outcome.stages:
        cost = Manifest.of(stage.manifest, stage.path).cost
        state = "up to date" if stage.skipped else f"done in {cost.get('wall_seconds', 0):.1f} s"
        lines.append(f"{name:<6} {state:<20} {stage.path}")
    report = Manifest.of(outcome.align.manifest, outcome.align.path).stats
    new_rows = Manifest.of(outcome.expand.manifest, outcome.expand.path).stats.get("n_new")
    lines.append(
        f"adapted model: {outcome.expand.path} "
        f"({new_rows if new_rows is not None else '?'} new words, {report.get('method', '?')}; "
        + ("no word2vec trained)" if not report.get("word2vec_trained", True) else
           f"held-out cosine {'n/a' if report.get('heldout_cosine') is None else format(report['heldout_cosine'], '.3f')})")
    )
    emit(
        {"stages": {name: stage.manifest for name, stage in outcome.stages}, "model": str(outcome.expand.path)},
        "\n".join(lines) + what_changed(Manifest.of(outcome.expand.manifest, outcome.expand.path).stats) + _neighbours(outcome.align.path),
        as_json=as_json,
    )


def _neighbours(align_dir: Path) -> str:
    from greenadapt.adaptation.align import neighbours_of

    return neighbours_lines(neighbours_of(align_dir))
