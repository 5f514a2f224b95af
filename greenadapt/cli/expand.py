"""`greenadapt expand`: write the domain-adapted model folder."""

from __future__ import annotations

from pathlib import Path

import typer

from greenadapt.defaults import DEFAULT_SEED
from greenadapt.methods import method_help
from greenadapt.cli import app
from greenadapt.manifest import Manifest
from greenadapt.cli._common import (
    ForceOption,
    JsonOption,
    QuietOption,
    VerboseOption,
    WaitOption,
    WorkdirOption,
    emit,
    progress_for,
    setup_logging,
)


@app.command("expand")
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
    min_count: int = typer.Option(1, "--min-count", min=1, help="Add only words seen at least this often."),
    seed: int = typer.Option(DEFAULT_SEED, "--seed", help="Seed of the random ablation's draws (align --method random)."),
    method: str | None = typer.Option(
        None, "--method", metavar="NAME",
        help="The initialisation method (chosen at align): with --corpus, use its align folder; with --align, check it. "
        + method_help(),
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output model folder (default: beside the align folder)."),
    workdir: Path | None = WorkdirOption,
    force: bool = ForceOption,
    wait: bool = WaitOption,
    as_json: bool = JsonOption,
    quiet: bool = QuietOption,
    verbose: bool = VerboseOption,
) -> None:
    """Add the aligned vectors of new words as embedding rows, with a domain tokenizer that keeps them whole."""
    setup_logging(quiet=quiet, verbose=verbose)
    from greenadapt.expand import run_expand

    with progress_for(quiet) as progress:
        outcome = run_expand(
            align=align,
            corpus=corpus or None,
            model=model,
            max_new=max_new,
            min_count=min_count,
            seed=seed,
            method=method,
            workdir=workdir,
            out=out,
            force=force,
            wait=wait,
            progress=progress,
        )
    stats = Manifest.of(outcome.manifest, outcome.path).stats
    state = "up to date" if outcome.skipped else "done"
    summary = (
        f"expand {state}: {stats.get('n_new', 0):,} new rows "
        f"(vocabulary {stats.get('vocab_size_before', 0):,} -> {stats.get('vocab_size_after', 0):,}) -> {outcome.path}"
    )
    emit(outcome.manifest, summary, as_json=as_json)
