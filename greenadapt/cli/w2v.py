"""`greenadapt w2v`: CBOW word2vec on a domain corpus, in the model's own words."""

from __future__ import annotations

from pathlib import Path

import typer

from greenadapt.defaults import DEFAULT_SEED
from greenadapt.cli import app
from greenadapt.cli._common import (
    ContextCapOption,
    ContextLayerOption,
    ContextMaxTokensOption,
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


@app.command("w2v")
def w2v_command(
    corpus: list[str] = typer.Option(
        ...,
        "--corpus",
        "-c",
        help="Registered corpus name, file, folder, glob or URL (.txt, .gz, .bz2, .xz, JSON lines, CSV). Repeatable.",
    ),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Model folder or Hub id whose tokenizer defines the words (default: the bundled MiniLM)."
    ),
    text_field: list[str] | None = typer.Option(
        None, "--text-field", help="Field(s) holding the text in JSON lines/CSV sources (default: text). Repeatable."
    ),
    dim: int | None = typer.Option(None, "--dim", min=1, help="Vector size (default: the model's hidden size)."),
    epochs: int = typer.Option(5, "--epochs", min=1, help="Passes over the corpus."),
    min_count: int = typer.Option(5, "--min-count", min=1, help="Ignore words seen fewer times."),
    max_vocab: int | None = typer.Option(
        None, "--max-vocab", min=1, metavar="N",
        help="Keep at most N words, the most frequent (gensim's max_final_vocab: min-count is raised as needed); bounds a huge corpus's vocabulary.",
    ),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="Processes/threads (default: the cores this process may use: affinity mask and cgroup quota, or $GREENADAPT_WORKERS); with 1, runs are reproducible."
    ),
    seed: int = typer.Option(DEFAULT_SEED, "--seed", help="Random seed."),
    source: str = typer.Option(
        "word2vec", "--source", metavar="NAME",
        help="word2vec (CBOW, the paper) or context (the base model's own contextual vectors, for align --method context-mean).",
    ),
    context_layer: int = ContextLayerOption,
    context_cap: int = ContextCapOption,
    context_max_tokens: int | None = ContextMaxTokensOption,
    no_vectors: bool = typer.Option(
        False, "--no-vectors", help="Only count the corpus words (--min-count applies); train no vectors (for align --method subword-mean or random)."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Output folder (default: WORKDIR/CORPUS/MODEL/w2v)."
    ),
    workdir: Path | None = WorkdirOption,
    force: bool = ForceOption,
    wait: bool = WaitOption,
    as_json: bool = JsonOption,
    quiet: bool = QuietOption,
    verbose: bool = VerboseOption,
) -> None:
    """Pre-tokenize the corpus with the model's normalizer (cached) and train CBOW word2vec on it."""
    setup_logging(quiet=quiet, verbose=verbose)
    from greenadapt.w2v import W2VOptions, run_w2v, summary_line

    from greenadapt.context_vectors import ContextOptions

    options = W2VOptions(
        dim=dim, epochs=epochs, min_count=min_count, max_vocab=max_vocab, workers=workers, seed=seed, vectors=not no_vectors, source=source,
        context=ContextOptions(layer=context_layer, cap=context_cap, max_tokens=context_max_tokens),
    )
    with progress_for(quiet) as progress:
        outcome = run_w2v(
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
    emit(outcome.manifest, summary_line(outcome), as_json=as_json)
