"""The Python API: every command the notebooks and services need, as typed functions.

``greenadapt.adapt``, ``finetune``, ``qa``, ``load`` and ``pipeline`` are
re-exported from the package. The command line calls these functions and
takes its option defaults from their signatures (:func:`default_of`), so a
script and a shell pipeline given the same arguments name the same outputs
and reuse each other's finished stages.

This module stays import-light (torch, transformers and gensim are imported
inside the functions) because the command line imports it for its defaults.

Example::

    import greenadapt

    adapted = greenadapt.adapt(["notes/*.txt"], out="runs/clinical-minilm")
    run = greenadapt.finetune("ner", "train.tsv", test="test.tsv", model=adapted.expand.path)
    model = greenadapt.load(run.path)
    model.predict("BRCA1 mutations cause breast cancer.")
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.defaults import DEFAULT_SEED
from greenadapt.methods import DEFAULT_METHOD

if TYPE_CHECKING:
    from greenadapt.adapt import AdaptOutcome
    from greenadapt.predictor import ClassifierModel, NerModel, QaModel
    from greenadapt.progress import Progress
    from greenadapt.stage import StageOutcome

PathLike = str | os.PathLike[str]


def default_of(function: Callable[..., Any], name: str) -> Any:
    """The default of ``function``'s parameter ``name``: what a CLI option of the same meaning defaults to."""
    default = inspect.signature(function).parameters[name].default
    if default is inspect.Parameter.empty:
        raise KeyError(f"{function.__name__}() has no default for {name!r}")
    return default


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
    context_layer: int = -1,
    context_cap: int = 20,
    context_max_tokens: int | None = None,
    max_new: int | None = None,
    min_count_new: int = 1,
    seed: int = DEFAULT_SEED,
    force: bool = False,
    wait: bool = False,
    progress: Progress | bool | None = None,
) -> AdaptOutcome:
    """Adapt ``model`` (default: the bundled all-MiniLM-L6-v2) to ``corpus``: word2vec, align, expand.

    ``corpus``: registered corpus names, files, folders, globs or URLs. The
    adapted model is written to ``out`` (default: the workspace's expand
    folder); ``.expand.path`` of the result is the folder to fine-tune.
    Finished stages are reused unless ``force``.
    """
    from greenadapt.adapt import AdaptOptions, run_adapt
    from greenadapt.context_vectors import ContextOptions
    from greenadapt.methods import MethodOptions
    from greenadapt.progress import as_progress
    from greenadapt.w2v import W2VOptions

    options = AdaptOptions(
        w2v=W2VOptions(
            dim=dim, epochs=epochs, min_count=min_count, max_vocab=max_vocab, workers=workers, seed=seed,
            context=ContextOptions(layer=context_layer, cap=context_cap, max_tokens=context_max_tokens),
        ),
        align_method=method,
        method_options=MethodOptions(focus_k=focus_k, focus_temperature=focus_temperature, hybrid_weight=hybrid_weight, match_norm=match_norm),
        max_new=max_new,
        min_count_new=min_count_new,
        seed=seed,
    )
    return run_adapt(
        [corpus] if isinstance(corpus, str) else list(corpus),
        model=model,
        options=options,
        text_fields=list(text_fields) if text_fields else None,
        workdir=_path(workdir),
        out=_path(out),
        force=force,
        wait=wait,
        progress=as_progress(progress),
    )


def finetune(
    task: str,
    train: PathLike,
    *,
    dev: PathLike | None = None,
    test: PathLike | None = None,
    model: str | None = None,
    out: PathLike | None = None,
    workdir: PathLike | None = None,
    mix: float | None = None,
    pool: str | None = None,
    epochs: int | None = None,
    max_steps: int | None = None,
    batch_size: int | None = None,
    grad_accum: int = 1,
    lr: float | None = None,
    warmup: float = 0.1,
    weight_decay: float = 0.01,
    seed: int = DEFAULT_SEED,
    seeds: Sequence[int] | None = None,
    train_on: str = "train",
    train_embeddings: str = "all",
    max_length: int | None = None,
    doc_stride: int | None = None,
    max_words: int | None = None,
    metric: str | None = None,
    positive_label: str | None = None,
    text_field: str | None = None,
    pair_field: str | None = None,
    label_field: str | None = None,
    file_format: str = "auto",
    header: str = "auto",
    entity_type: str | None = None,
    device: str = "auto",
    precision: str = "auto",
    compile: bool = False,
    eval_batch_size: int = 64,
    save_every: int | None = None,
    resume: bool = False,
    gmap: str = "none",
    gmap_layers: str | None = None,
    general_model: str | None = None,
    gmap_unfrozen: bool = False,
    gmap_cache: bool = False,
    gmap_indexing: str = "reference",
    force: bool = False,
    wait: bool = False,
    progress: Progress | bool | None = None,
) -> StageOutcome:
    """Fine-tune ``model`` on ``task`` (``ner``, ``classify`` or ``qa``) with both tokenizers; evaluate mean-pooled.

    ``seeds`` trains one model per seed (mean ± std reported); otherwise one
    model with ``seed``. ``epochs``, ``batch_size``, ``lr``, ``max_length`` and
    ``max_words`` left at None take the task's defaults (``greenadapt.tasks``:
    ner and classify 3 epochs, batch 32, lr 5e-5, 128 wordpieces; qa 2, 16,
    3e-5 and the model's length); ``pool`` None: mean with two tokenizers.
    The result's ``.path`` is the run folder to :func:`load`.
    """
    from greenadapt.finetune.data import ReaderOptions
    from greenadapt.finetune.run import FinetuneOptions, run_finetune
    from greenadapt.gmap.options import GmapOptions
    from greenadapt.progress import as_progress
    from greenadapt.tasks import get_task

    options = FinetuneOptions(
        task=task,
        train=Path(train),
        dev=_path(dev),
        test=_path(test),
        model=model,
        out=_path(out),
        workdir=_path(workdir),
        reader=ReaderOptions(file_format, text_field, pair_field, label_field, header, entity_type),  # type: ignore[arg-type]
        training=get_task(task).training_config(
            mix=mix,
            batch_size=batch_size,
            grad_accum=grad_accum,
            lr=lr,
            epochs=epochs,
            max_steps=max_steps,
            warmup=warmup,
            weight_decay=weight_decay,
            train_embeddings=train_embeddings,
            precision=precision,
            compile=compile,
            eval_batch_size=eval_batch_size,
        ),
        pool=pool,
        seeds=list(seeds) if seeds else [seed],
        train_on=train_on,
        max_length=max_length,
        max_words=max_words,
        metric=metric,
        positive_label=positive_label,
        device=device,
        force=force,
        wait=wait,
        save_every=save_every,
        resume=resume,
        doc_stride=doc_stride,
        gmap=GmapOptions.from_cli(gmap, gmap_layers, general_model, gmap_unfrozen, gmap_cache, gmap_indexing),
    )
    return run_finetune(options, as_progress(progress))


def qa(
    data: PathLike,
    out: PathLike,
    *,
    model: str | None = None,
    pool: str | None = None,
    max_length: int | None = None,
    batch_size: int = 16,
    limit: int | None = None,
    n_best: int = 20,
    max_answer_chars: int = 500,
    device: str = "auto",
    general_model: str | None = None,
    force: bool = False,
    wait: bool = False,
    progress: Progress | bool | None = None,
) -> StageOutcome:
    """Answer every question of a SQuAD-style file over its whole document; predictions and metrics go to ``out``.

    ``pool`` ``None``: mean of both tokenizers for an expanded model, the
    one tokenizer of a plain model. To answer questions from code, use
    ``load(path).answer(question, context)``.
    """
    from greenadapt.progress import as_progress
    from greenadapt.qa.run import QaOptions, run_qa

    options = QaOptions(
        pool=pool,
        max_length=max_length,
        batch_size=batch_size,
        limit=limit,
        n_best=n_best,
        max_answer_chars=max_answer_chars,
        device=device,
        general_model=general_model,
    )
    return run_qa(model, data, out, options=options, force=force, wait=wait, progress=as_progress(progress))


def load(
    path: PathLike,
    *,
    device: str = "auto",
    pool: str = "mean",
    batch_size: int = 64,
    precision: str = "auto",
    general_model: str | None = None,
    max_length: int | None = None,
) -> NerModel | ClassifierModel | QaModel:
    """A fine-tuned model folder as an object: ``.predict(texts)`` (NER, classification) or ``.answer(q, context)`` (QA).

    Predictions are mean-pooled over both tokenizers, as greenadapt reports
    them; NER entities carry character offsets into the given text.
    ``max_length``: question answering's window (default: the model's).
    """
    from greenadapt.finetune.predict import find_model_folder
    from greenadapt.predictor import open_model

    folder, settings = find_model_folder(path)
    return open_model(
        folder, settings, device=device, pool=pool, batch_size=batch_size, precision=precision, general_model=general_model, max_length=max_length
    )


def pipeline(task: str, model: PathLike, **options: Any) -> Any:
    """A ``transformers.Pipeline`` over a fine-tuned greenadapt folder, with greenadapt's dual-tokenizer inference.

    ``task``: ``token-classification`` (alias ``ner``), ``text-classification``
    (``classify``) or ``question-answering`` (``qa``); it must match the
    folder's task. No ``trust_remote_code`` is involved: the pipeline class
    is greenadapt's own. ``options`` are :func:`load`'s (device, pool, batch_size, ...) and the
    call options of transformers' pipeline of the task (``aggregation_strategy``, ``ignore_labels``,
    ``is_split_into_words``; ``top_k``; ``function_to_apply``), which every call then uses; any other is
    refused here in one line.
    """
    import inspect

    from greenadapt.errors import UsageError
    from greenadapt.hf_pipeline import HF_TASK, PIPELINES, TASK_ALIASES

    if task not in TASK_ALIASES:
        raise UsageError(f"unknown pipeline task {task!r}", hint=f"choose from {', '.join(HF_TASK.values())}")
    from greenadapt.finetune.predict import find_model_folder
    from greenadapt.predictor import open_model

    wanted = TASK_ALIASES[task]
    folder, settings = find_model_folder(model)
    if settings.task != wanted:  # refused before any weights are loaded
        raise UsageError(
            f"{model} is a {settings.task} model, not {HF_TASK[wanted]}",
            hint=f"use greenadapt.pipeline({HF_TASK[settings.task]!r}, model=...)",
        )
    load_names = set(inspect.signature(open_model).parameters) - {"folder", "settings"}
    load_options = {k: v for k, v in options.items() if k in load_names}
    call_defaults = {k: v for k, v in options.items() if k not in load_names}
    return PIPELINES[wanted](open_model(folder, settings, **load_options), call_defaults, task=HF_TASK[wanted])


def _path(value: PathLike | None) -> Path | None:
    return None if value is None else Path(value)


def compare(
    task: str,
    train: PathLike,
    test: PathLike,
    models: Sequence[tuple[str, str]] | dict[str, str],
    *,
    out: PathLike,
    dev: PathLike | None = None,
    seeds: Sequence[int] = (1, 2, 3),
    against: str | None = None,
    comparator: str | None = None,
    epochs: int | None = None,
    batch_size: int | None = None,
    lr: float | None = None,
    max_length: int | None = None,
    device: str = "auto",
    parallel: int = 1,
    bootstrap: int = 1000,
    bootstrap_seed: int = 0,
    save_every: int | None = 100,
    force: bool = False,
    corpus: Sequence[str] | str | None = None,
    adapt_methods: Sequence[str] = (),
    workdir: PathLike | None = None,
    progress: Progress | bool | None = None,
) -> Any:
    """Fine-tune every model of ``models`` (name → folder or Hub id) on ``task`` with one recipe and the same ``seeds``,
    and compare each with ``against`` (default: the first), paired by seed and by test example.

    Returns a :class:`~greenadapt.comparison.run.CompareResult`: ``.pairs[i].verdict()`` is the one-line answer,
    e.g. ``green vs base: +0.98 F1 [-0.01, +1.54] over 3 seeds; not significant at 95%``; ``out/compare.json``
    holds everything. A rerun skips finished fine-tunings and resumes interrupted ones.
    ``adapt_methods`` with ``corpus``: the first model is adapted to ``corpus`` once per method (into
    ``out/adapted/<method>``) and each result joins the comparison under its method's name.
    """
    from greenadapt.comparison.run import CompareOptions, run_compare
    from greenadapt.progress import as_progress

    pairs = tuple(models.items()) if isinstance(models, dict) else tuple((str(n), str(m)) for n, m in models)
    options = CompareOptions(
        task=task, train=Path(train), test=Path(test), models=pairs, out=Path(out), dev=Path(dev) if dev else None,
        seeds=tuple(seeds), against=against, comparator=comparator, epochs=epochs, batch_size=batch_size, lr=lr,
        max_length=max_length, device=device, parallel=parallel, replicates=bootstrap, bootstrap_seed=bootstrap_seed,
        save_every=save_every, force=force, corpus=(corpus,) if isinstance(corpus, str) else tuple(corpus or ()),
        adapt_methods=tuple(adapt_methods), workdir=Path(workdir) if workdir else None,
    )
    return run_compare(options, finetune, as_progress(progress), adapt=adapt)
