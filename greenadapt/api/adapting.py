"""The adaptation commands as functions: ``w2v``, ``align``, ``expand`` and ``adapt`` (all three)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from greenadapt.adaptation.methods import DEFAULT_METHOD
from greenadapt.api.common import PathLike, as_path
from greenadapt.defaults import DEFAULT_MIN_COUNT_NEW, DEFAULT_SEED

if TYPE_CHECKING:
    from greenadapt.adaptation.pipeline import AdaptOutcome
    from greenadapt.artifacts.stage import StageOutcome
    from greenadapt.progress import Progress

__all__ = ["adapt", "align", "expand", "w2v"]


def adapt(
    corpus: Sequence[str] | str,
    *,
    model: str | None = None,
    out: PathLike | None = None,
    workdir: PathLike | None = None,
    text_fields: Sequence[str] | None = None,
    dim: int | None = None,
    epochs: int = 5,
    min_count: int = 5,
    max_vocab: int | None = None,
    workers: int | None = None,
    method: str = DEFAULT_METHOD,
    focus_k: int = 10,
    focus_temperature: float = 0.1,
    hybrid_weight: float = 0.5,
    match_norm: bool = False,
    distill_per_word: int = 4,
    distill_sentences: int = 16_000,
    distill_epochs: int = 1,
    context_layer: int = -1,
    context_cap: int = 20,
    context_max_tokens: int | None = None,
    max_new: int | None = None,
    min_count_new: int = DEFAULT_MIN_COUNT_NEW,
    seed: int = DEFAULT_SEED,
    w2v_draws: int = 1,
    force: bool = False,
    wait: bool = False,
    progress: Progress | bool | None = None,
) -> AdaptOutcome:
    """Adapt ``model`` (default: the bundled all-MiniLM-L6-v2) to ``corpus``: word2vec, align, expand.

    ``corpus``: registered corpus names, files, folders, globs or URLs. The
    adapted model is written to ``out`` (default: the workspace's expand
    folder); ``.expand.path`` of the result is the folder to fine-tune.
    Finished stages are reused unless ``force``. ``w2v_draws`` > 1: word2vec is trained that many times (seeds
    ``seed``, ``seed + 1``, ...), each draw aligned, and each new row is the mean of the draws' rows.
    """
    from greenadapt.adaptation.context_vectors import ContextOptions
    from greenadapt.adaptation.methods import MethodOptions
    from greenadapt.adaptation.pipeline import AdaptOptions, run_adapt
    from greenadapt.adaptation.w2v import W2VOptions
    from greenadapt.progress import as_progress

    options = AdaptOptions(
        w2v=W2VOptions(
            dim=dim, epochs=epochs, min_count=min_count, max_vocab=max_vocab, workers=workers, seed=seed,
            context=ContextOptions(layer=context_layer, cap=context_cap, max_tokens=context_max_tokens),
        ),
        align_method=method,
        method_options=MethodOptions(
            focus_k=focus_k, focus_temperature=focus_temperature, hybrid_weight=hybrid_weight, match_norm=match_norm,
            distill_per_word=distill_per_word, distill_sentences=distill_sentences, distill_epochs=distill_epochs,
        ),
        max_new=max_new,
        min_count_new=min_count_new,
        seed=seed,
        w2v_draws=w2v_draws,
    )
    return run_adapt(
        [corpus] if isinstance(corpus, str) else list(corpus),
        model=model,
        options=options,
        text_fields=list(text_fields) if text_fields else None,
        workdir=as_path(workdir),
        out=as_path(out),
        force=force,
        wait=wait,
        progress=as_progress(progress),
    )


def w2v(
    corpus: Sequence[str] | str,
    *,
    model: str | None = None,
    out: PathLike | None = None,
    workdir: PathLike | None = None,
    text_fields: Sequence[str] | None = None,
    dim: int | None = None,
    epochs: int = 5,
    min_count: int = 5,
    max_vocab: int | None = None,
    workers: int | None = None,
    seed: int = DEFAULT_SEED,
    source: str = "word2vec",
    context_layer: int = -1,
    context_cap: int = 20,
    context_max_tokens: int | None = None,
    no_vectors: bool = False,
    force: bool = False,
    wait: bool = False,
    progress: Progress | bool | None = None,
) -> StageOutcome:
    """CBOW word2vec on ``corpus`` over ``model``'s own words (pre-tokenized with its normalizer, cached).

    ``source="context"``: the base model's contextual vectors instead (for ``align(method="context-mean")``);
    ``no_vectors``: only count the words (for ``subword-mean`` and ``random``).
    """
    from greenadapt.adaptation.context_vectors import ContextOptions
    from greenadapt.adaptation.w2v import W2VOptions, run_w2v
    from greenadapt.progress import as_progress

    options = W2VOptions(
        dim=dim, epochs=epochs, min_count=min_count, max_vocab=max_vocab, workers=workers, seed=seed, vectors=not no_vectors, source=source,
        context=ContextOptions(layer=context_layer, cap=context_cap, max_tokens=context_max_tokens),
    )
    return run_w2v(
        [corpus] if isinstance(corpus, str) else list(corpus), model=model, options=options, text_fields=list(text_fields) if text_fields else None,
        workdir=as_path(workdir), out=as_path(out), force=force, wait=wait, progress=as_progress(progress),
    )


def align(
    *,
    w2v: PathLike | None = None,
    corpus: Sequence[str] | str | None = None,
    model: str | None = None,
    method: str = DEFAULT_METHOD,
    focus_k: int = 10,
    focus_temperature: float = 0.1,
    hybrid_weight: float = 0.5,
    match_norm: bool = False,
    distill_per_word: int = 4,
    distill_sentences: int = 16_000,
    distill_epochs: int = 1,
    seed: int = DEFAULT_SEED,
    probe: Sequence[str] = (),
    out: PathLike | None = None,
    workdir: PathLike | None = None,
    force: bool = False,
    wait: bool = False,
    progress: Progress | bool | None = None,
) -> StageOutcome:
    """Fit ``method`` on the words word2vec (folder ``w2v``, or the workspace's for ``corpus``) and the model share.

    ``probe``: words whose nearest neighbours the align report lists.
    """
    from greenadapt.adaptation.align import run_align
    from greenadapt.adaptation.methods import MethodOptions
    from greenadapt.progress import as_progress

    return run_align(
        w2v=as_path(w2v), corpus=[corpus] if isinstance(corpus, str) else (list(corpus) if corpus else None), model=model, method=method,
        method_options=MethodOptions(
            focus_k=focus_k, focus_temperature=focus_temperature, hybrid_weight=hybrid_weight, match_norm=match_norm,
            distill_per_word=distill_per_word, distill_sentences=distill_sentences, distill_epochs=distill_epochs,
        ),
        seed=seed, probes=tuple(probe or ()), workdir=as_path(workdir), out=as_path(out), force=force, wait=wait, progress=as_progress(progress),
    )


def expand(
    *,
    align: PathLike | None = None,
    corpus: Sequence[str] | str | None = None,
    model: str | None = None,
    max_new: int | None = None,
    min_count: int = DEFAULT_MIN_COUNT_NEW,
    seed: int = DEFAULT_SEED,
    method: str | None = None,
    also_align: Sequence[PathLike] = (),
    out: PathLike | None = None,
    workdir: PathLike | None = None,
    force: bool = False,
    wait: bool = False,
    progress: Progress | bool | None = None,
) -> StageOutcome:
    """Add the aligned vectors of new words (folder ``align``, or the workspace's for ``corpus``) as embedding rows,
    with a domain tokenizer that keeps them whole; ``.path`` of the result is a folder transformers loads.
    ``also_align``: other word2vec draws' align folders; each new row is then the mean of the draws' rows."""
    from greenadapt.adaptation.expand import run_expand
    from greenadapt.progress import as_progress

    return run_expand(
        align=as_path(align), corpus=[corpus] if isinstance(corpus, str) else (list(corpus) if corpus else None), model=model,
        max_new=max_new, min_count=min_count, seed=seed, method=method, workdir=as_path(workdir), out=as_path(out),
        force=force, wait=wait, progress=as_progress(progress), also_align=[Path(str(p)) for p in also_align],
    )
