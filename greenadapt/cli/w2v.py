"""`greenadapt w2v`: CBOW word2vec on a domain corpus, in the model's own words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from greenadapt import api
from greenadapt.api import default_of
from greenadapt.cli._common import (
    CONTEXT_OPTIONS,
    api_command,
    show_stage,
)


@api_command("w2v", api.w2v, show_stage(lambda outcome: _summary(outcome)), renames={"text_field": "text_fields"}, groups=(CONTEXT_OPTIONS,))
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
    epochs: int = typer.Option(default_of(api.w2v, "epochs"), "--epochs", min=1, help="Passes over the corpus."),
    min_count: int = typer.Option(default_of(api.w2v, "min_count"), "--min-count", min=1, help="Ignore words seen fewer times."),
    max_vocab: int | None = typer.Option(
        None, "--max-vocab", min=1, metavar="N",
        help="Keep at most N words, the most frequent (gensim's max_final_vocab: min-count is raised as needed); bounds a huge corpus's vocabulary.",
    ),
    workers: int | None = typer.Option(
        None, "--workers", min=1, help="Processes/threads (default: the cores this process may use: affinity mask and cgroup quota, or $GREENADAPT_WORKERS); with 1, runs are reproducible."
    ),
    seed: int = typer.Option(default_of(api.w2v, "seed"), "--seed", help="Random seed."),
    source: str = typer.Option(
        default_of(api.w2v, "source"), "--source", metavar="NAME",
        help="word2vec (CBOW, the paper) or context (the base model's own contextual vectors, for align --method context-mean).",
    ),
    no_vectors: bool = typer.Option(
        default_of(api.w2v, "no_vectors"), "--no-vectors", help="Only count the corpus words (--min-count applies); train no vectors (for align --method subword-mean or random)."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Output folder (default: WORKDIR/CORPUS/MODEL/w2v)."
    ),
) -> dict[str, Any] | None:
    """Pre-tokenize the corpus with the model's normalizer (cached) and train CBOW word2vec on it."""
    return None


def _summary(outcome: Any) -> str:
    from greenadapt.adaptation.w2v import summary_line

    return summary_line(outcome)
