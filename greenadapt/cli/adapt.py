"""`greenadapt adapt`: w2v -> align -> expand in one command."""

from __future__ import annotations

from pathlib import Path

import typer

from greenadapt.defaults import DEFAULT_SEED
from greenadapt.cli import app
from greenadapt.cli._common import (
    ContextCapOption,
    ContextLayerOption,
    ContextMaxTokensOption,
    FocusKOption,
    FocusTemperatureOption,
    ForceOption,
    HybridWeightOption,
    MatchNormOption,
    MethodOption,
    JsonOption,
    QuietOption,
    VerboseOption,
    WaitOption,
    WorkdirOption,
    emit,
    progress_for,
    setup_logging,
)


@app.command("adapt")
def adapt_command(
    corpus: list[str] = typer.Option(
        ..., "--corpus", "-c", help="Registered corpus name, file, directory, glob or URL (repeatable)."
    ),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Model folder or Hub id (default: bundled all-MiniLM-L6-v2)."
    ),
    text_field: list[str] | None = typer.Option(None, "--text-field", help="JSON/CSV field(s) holding text."),
    dim: int | None = typer.Option(None, "--dim", help="word2vec dimension (default: the model's hidden size)."),
    epochs: int = typer.Option(5, "--epochs", min=1, help="word2vec epochs."),
    min_count: int = typer.Option(5, "--min-count", min=1, help="word2vec minimum word count."),
    workers: int | None = typer.Option(None, "--workers", min=1, help="Threads/processes (default: all cores)."),
    method: str = MethodOption,
    focus_k: int = FocusKOption,
    focus_temperature: float = FocusTemperatureOption,
    hybrid_weight: float = HybridWeightOption,
    match_norm: bool = MatchNormOption,
    context_layer: int = ContextLayerOption,
    context_cap: int = ContextCapOption,
    context_max_tokens: int | None = ContextMaxTokensOption,
    max_new: int | None = typer.Option(None, "--max-new", min=0, help="At most this many new words (most frequent first)."),
    min_count_new: int = typer.Option(1, "--min-count-new", min=1, help="Minimum corpus count of a new word."),
    seed: int = typer.Option(DEFAULT_SEED, "--seed", help="Random seed for every stage."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Folder for the adapted model (default: in the workspace)."),
    workdir: Path | None = WorkdirOption,
    force: bool = ForceOption,
    wait: bool = WaitOption,
    as_json: bool = JsonOption,
    quiet: bool = QuietOption,
    verbose: bool = VerboseOption,
) -> None:
    """Adapt a model to a domain corpus: train word2vec, align it, expand the vocabulary."""
    setup_logging(quiet=quiet, verbose=verbose)
    from greenadapt.adapt import AdaptOptions, run_adapt
    from greenadapt.context_vectors import ContextOptions
    from greenadapt.methods import MethodOptions
    from greenadapt.w2v import W2VOptions

    options = AdaptOptions(
        w2v=W2VOptions(
            dim=dim, epochs=epochs, min_count=min_count, workers=workers, seed=seed,
            context=ContextOptions(layer=context_layer, cap=context_cap, max_tokens=context_max_tokens),
        ),
        align_method=method,
        method_options=MethodOptions(focus_k=focus_k, focus_temperature=focus_temperature, hybrid_weight=hybrid_weight, match_norm=match_norm),
        max_new=max_new,
        min_count_new=min_count_new,
        seed=seed,
    )
    with progress_for(quiet) as progress:
        outcome = run_adapt(
            corpus,
            model=model,
            options=options,
            text_fields=text_field or None,
            workdir=workdir,
            out=out,
            force=force,
            wait=wait,
            progress=progress,
        )
    lines = []
    for name, stage in outcome.stages:
        cost = stage.manifest.get("cost", {})
        state = "up to date" if stage.skipped else f"done in {cost.get('wall_seconds', 0):.1f} s"
        lines.append(f"{name:<6} {state:<20} {stage.path}")
    report = outcome.align.manifest.get("stats", {})
    new_rows = outcome.expand.manifest.get("stats", {}).get("n_new")
    lines.append(
        f"adapted model: {outcome.expand.path} "
        f"({new_rows if new_rows is not None else '?'} new words, {report.get('method', '?')}; "
        + ("no word2vec trained)" if not report.get("word2vec_trained", True) else
           f"held-out cosine {'n/a' if report.get('heldout_cosine') is None else format(report['heldout_cosine'], '.3f')})")
    )
    emit(
        {"stages": {name: stage.manifest for name, stage in outcome.stages}, "model": str(outcome.expand.path)},
        "\n".join(lines),
        as_json=as_json,
    )
