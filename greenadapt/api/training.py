"""The training commands as functions: ``finetune``, ``qa``, ``multitask``, ``pretrain`` and ``compare``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.api.adapting import adapt
from greenadapt.api.common import PathLike, as_path
from greenadapt.defaults import DEFAULT_MAX_LENGTH, DEFAULT_SEED

if TYPE_CHECKING:
    from greenadapt.artifacts.stage import StageOutcome
    from greenadapt.progress import Progress

__all__ = ["compare", "finetune", "multitask", "pretrain", "qa"]


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
    pad_to_multiple: int = 1,
    cuda_graphs: bool = False,
    eval_every: int | None = None,
    early_stopping: int | None = None,
    report_to: Sequence[str] | str = (),
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
    from greenadapt.data.task_files import ReaderOptions
    from greenadapt.modeling.gmap.options import GmapOptions
    from greenadapt.progress import as_progress
    from greenadapt.runners.finetune.run import FinetuneOptions, run_finetune
    from greenadapt.tasks import get_task

    options = FinetuneOptions(
        task=task,
        train=Path(train),
        dev=as_path(dev),
        test=as_path(test),
        model=model,
        out=as_path(out),
        workdir=as_path(workdir),
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
            pad_to_multiple=pad_to_multiple,
            cuda_graphs=cuda_graphs,
            eval_every=eval_every,
            early_stopping=early_stopping,
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
        report_to=(report_to,) if isinstance(report_to, str) else tuple(report_to),
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
    from greenadapt.runners.qa.run import QaOptions, run_qa

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
    ensembles: Mapping[str, int] | Sequence[tuple[str, int]] | None = None,
    entity_type: str | None = None,
    max_steps: int | None = None,
    precision: str = "auto",
    pad_to_multiple: int = 1,
    cuda_graphs: bool = False,
    report_to: Sequence[str] | str = (),
    progress: Progress | bool | None = None,
) -> Any:
    """Fine-tune every model of ``models`` (name → folder or Hub id) on ``task`` with one recipe and the same ``seeds``,
    and compare each with ``against`` (default: the first), paired by seed and by test example.

    Returns a :class:`~greenadapt.comparison.run.CompareResult`: ``.pairs[i].verdict()`` is the one-line answer,
    e.g. ``green vs base: +0.98 F1 [-0.01, +1.54] over 3 seeds; not significant at 95%``; ``out/compare.json``
    holds everything. A rerun skips finished fine-tunings and resumes interrupted ones.
    ``adapt_methods`` with ``corpus``: the first model is adapted to ``corpus`` once per method (into
    ``out/adapted/<method>``) and each result joins the comparison under its method's name.
    ``ensembles`` (name → N): that model is N fine-tunings per seed (member j with seed + j × 100,000), scored on the
    mean of their probabilities; its cost counts every member. ``{"base-x2": 2}`` with ``models["base-x2"]`` the
    base model is the compute-matched control for a two-view model. ``entity_type``, ``max_steps``, ``precision``,
    ``pad_to_multiple``, ``cuda_graphs`` and ``report_to`` are finetune's, for every run.
    """
    from greenadapt.comparison.run import CompareOptions, run_compare
    from greenadapt.progress import as_progress
    from greenadapt.tasks import get_task

    pairs = tuple(models.items()) if isinstance(models, dict) else tuple((str(n), str(m)) for n, m in models)
    options = CompareOptions(
        task=get_task(task).name, train=Path(train), test=Path(test), models=pairs, out=Path(out), dev=Path(dev) if dev else None,
        seeds=tuple(seeds), against=against, comparator=comparator, epochs=epochs, batch_size=batch_size, lr=lr,
        max_length=max_length, device=device, parallel=parallel, replicates=bootstrap, bootstrap_seed=bootstrap_seed,
        save_every=save_every, force=force, corpus=(corpus,) if isinstance(corpus, str) else tuple(corpus or ()),
        adapt_methods=tuple(adapt_methods), workdir=Path(workdir) if workdir else None,
        ensembles=tuple((str(n), int(k)) for n, k in (ensembles.items() if isinstance(ensembles, Mapping) else ensembles or ())),
        entity_type=entity_type, max_steps=max_steps, precision=precision, pad_to_multiple=pad_to_multiple, cuda_graphs=cuda_graphs,
        report_to=(report_to,) if isinstance(report_to, str) else tuple(report_to),
    )
    return run_compare(options, finetune, as_progress(progress), adapt=adapt)


def multitask(
    task: Sequence[str] = (),
    *,
    tasks_file: PathLike | None = None,
    model: str | None = None,
    out: PathLike | None = None,
    workdir: PathLike | None = None,
    adapter: str = "pals",
    pal_size: int = 204,
    pal_heads: int = 12,
    sampling: str = "annealed",
    steps_per_epoch: int | None = None,
    freeze_base: bool = False,
    epochs: int = 3,
    max_steps: int | None = None,
    batch_size: int = 32,
    lr: float = 5e-5,
    warmup: float = 0.1,
    weight_decay: float = 0.01,
    seed: int = DEFAULT_SEED,
    mix: float | None = None,
    pool: str = "mean",
    max_length: int = DEFAULT_MAX_LENGTH,
    max_words: int = 30,
    device: str = "auto",
    precision: str = "auto",
    compile: bool = False,
    eval_batch_size: int = 64,
    gmap: str = "none",
    gmap_layers: str | None = None,
    general_model: str | None = None,
    gmap_unfrozen: bool = False,
    gmap_cache: bool = False,
    force: bool = False,
    wait: bool = False,
    progress: Progress | bool | None = None,
) -> StageOutcome:
    """Multi-task fine-tuning with PALs: one shared encoder, a projected-attention adapter and a head per task.

    ``task``: each task as comma-separated key=value pairs (``name=ncbi,type=ner,train=train.tsv,dev=dev.tsv``),
    or ``tasks_file``, a TOML file of ``[[task]]`` tables with the same keys. Per-task scores, their average
    and the parameter count are in the result's manifest.
    """
    from greenadapt.modeling.gmap.options import GmapOptions
    from greenadapt.modeling.pals.config import PalsConfig
    from greenadapt.progress import as_progress
    from greenadapt.runners.multitask.run import MultitaskOptions, run_multitask
    from greenadapt.runners.multitask.spec import collect_specs
    from greenadapt.training.finetuning import TrainConfig

    options = MultitaskOptions(
        tasks=collect_specs(list(task), as_path(tasks_file)),
        model=model,
        out=as_path(out),
        workdir=as_path(workdir),
        pals=PalsConfig(adapter=adapter, size=pal_size, heads=pal_heads),
        training=TrainConfig(
            mix=mix, batch_size=batch_size, lr=lr, epochs=epochs, max_steps=max_steps, warmup=warmup, weight_decay=weight_decay,
            seed=seed, precision=precision, compile=compile, eval_batch_size=eval_batch_size,
        ),
        sampling=sampling,
        steps_per_epoch=steps_per_epoch,
        freeze_base=freeze_base,
        pool=pool,
        max_length=max_length,
        max_words=max_words,
        device=device,
        force=force,
        wait=wait,
        gmap=GmapOptions.from_cli(gmap, gmap_layers, general_model, gmap_unfrozen, gmap_cache),
    )
    return run_multitask(options, as_progress(progress))


def pretrain(
    corpus: Sequence[str] | str,
    *,
    model: str | None = None,
    out: PathLike | None = None,
    workdir: PathLike | None = None,
    eval_only: bool = False,
    general_corpus: Sequence[str] | None = None,
    text_fields: Sequence[str] | None = None,
    max_length: int = DEFAULT_MAX_LENGTH,
    heldout: int = 256,
    whole_word_masking: bool = False,
    mask_probability: float = 0.15,
    tokenizer: str = "auto",
    mix: float | None = None,
    epochs: int = 1,
    max_steps: int | None = None,
    batch_size: int = 32,
    grad_accum: int = 1,
    lr: float = 5e-5,
    warmup: float = 0.1,
    weight_decay: float = 0.01,
    seed: int = DEFAULT_SEED,
    train_embeddings: str = "all",
    train: str = "all",
    head_warmup_steps: int = 0,
    eval_every: int | None = None,
    eval_batch_size: int = 32,
    gmap: str | None = None,
    gmap_layers: str | None = None,
    general_model: str | None = None,
    device: str = "auto",
    precision: str = "auto",
    compile: bool = False,
    workers: int | None = None,
    save_every: int | None = None,
    resume: bool = False,
    force: bool = False,
    wait: bool = False,
    progress: Progress | bool | None = None,
) -> Any:
    """Continue masked-LM training of ``model`` on ``corpus`` (the DAPT comparator); the output loads in
    ``finetune``, ``qa``, ``expand`` and transformers.

    ``eval_only``: train nothing; return each corpus's held-out masked-LM loss and perplexity (a dict,
    ``{"results": {corpus: {"loss", "perplexity", "targets"}}, ...}``) instead of a stage outcome.
    """
    from greenadapt.modeling.gmap.config import parse_layers
    from greenadapt.progress import as_progress
    from greenadapt.runners.pretrain.run import EvalOptions, PretrainOptions, run_eval_only, run_pretrain
    from greenadapt.runners.pretrain.train import PretrainConfig

    corpora = [corpus] if isinstance(corpus, str) else list(corpus)
    fields = list(text_fields) if text_fields else None
    if eval_only:
        from greenadapt.errors import UsageError

        training_only = {"--out": out, "--gmap": gmap, "--general-corpus": general_corpus, "--max-steps": max_steps, "--save-every": save_every}
        given = [flag for flag, value in training_only.items() if value] + (["--resume"] if resume else [])
        if given:
            raise UsageError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --eval-only", hint="pass each corpus to score as --corpus")
        evaluation = EvalOptions(
            corpora=corpora, model=model, workdir=as_path(workdir), text_fields=fields, max_length=max_length, heldout=heldout,
            whole_word_masking=whole_word_masking, mask_probability=mask_probability, tokenizer=tokenizer, general_model=general_model,
            device=device, batch_size=eval_batch_size, precision=precision, workers=workers,
        )
        return run_eval_only(evaluation, as_progress(progress))
    training = PretrainConfig(
        batch_size=batch_size, grad_accum=grad_accum, lr=lr, epochs=epochs, max_steps=max_steps, warmup=warmup, weight_decay=weight_decay,
        seed=seed, train_embeddings=train_embeddings, precision=precision, compile=compile, eval_batch_size=eval_batch_size,
        eval_every=eval_every, head_warmup_steps=head_warmup_steps, train=train,
    )
    options = PretrainOptions(
        corpus=corpora, model=model, out=as_path(out), workdir=as_path(workdir), text_fields=fields, training=training,
        max_length=max_length, heldout=heldout, whole_word_masking=whole_word_masking, mask_probability=mask_probability,
        tokenizer=tokenizer, mix=mix, general_corpus=list(general_corpus) if general_corpus else None, gmap=gmap,
        gmap_layers=parse_layers(gmap_layers) if gmap_layers is not None else None, general_model=general_model,
        device=device, workers=workers, force=force, wait=wait, save_every=save_every, resume=resume,
    )
    return run_pretrain(options, as_progress(progress))
