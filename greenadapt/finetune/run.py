"""The ``finetune`` stage and ``predict``: what the CLI calls.

A finetune run folder (kind ``finetune``, written through StageRun)::

    manifest.json
    metrics.json            per seed, split and pooling mode; mean ± std over seeds
    <model>/                the run folder itself for one seed, ``seed-<s>/`` for several:
        config.json, model.safetensors      transformers-loadable, with id2label/label2id
        tokenizer.json, ...                  T̂ (or the only tokenizer of a plain model)
        general-tokenizer/                   T_LM (when the model has both)
        greenadapt_task.json                 task, labels, reader options, lengths
        train_log.jsonl                      one line per optimizer step, one per dev evaluation
        predictions/<split>.<ext>            dev/test predictions in the input's format

Under torchrun every process trains; only rank 0 writes.

``--task qa`` is dispatched to :func:`greenadapt.qa.train.run_finetune_qa`
(SQuAD windows, start/end loss; same folder kind, ``greenadapt_task.json``
says ``qa``); the shared options map onto its ``QaTrainOptions``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.defaults import DEFAULT_SEED
from greenadapt.destination import check_run_destination
from greenadapt.errors import DataError, StageError, UsageError
from greenadapt.finetune import POOL_MODES
from greenadapt.finetune.data import (
    ReaderOptions,
    TaskFile,
    check_entity_type,
    check_known_labels,
    prediction_file_name,
    untyped_labels,
    write_predictions,
)
from greenadapt.finetune.embeddings import TRAIN_EMBEDDINGS
from greenadapt.finetune.metrics import summarize_seeds
from greenadapt.finetune.tasks import QA_TASK, TASK_FILE, Task, TaskSettings, argmax_labels, get_task, positive_label_for
from greenadapt.expanded_model import GENERAL_TOKENIZER_DIR, ExpandedModel, TokenizerPair, check_vocab_fits, load_tokenizers
from greenadapt.finetune.tokenize import Unit
from greenadapt.finetune.train import TrainConfig, train
from greenadapt.training.checkpoint import Checkpointing, StopSignal, latest_checkpoint
from greenadapt.training.distributed import DistContext, init_distributed
from greenadapt.gmap.options import GmapOptions
from greenadapt.model_card import CARD_FILE, CONFIG_KEY, finetuned_card
from greenadapt.models import ModelRef, quiet_transformers, resolve_model, slugify
from greenadapt.progress import NULL_PROGRESS, Progress
from greenadapt.stage import (
    StageOutcome,
    StageRun,
    file_identity,
    fingerprint,
    load_stage,
    manifest_identity,
    read_manifest,
    resource_errors,
    write_json,
)
from greenadapt.workspace import workdir as resolve_workdir

if TYPE_CHECKING:
    from greenadapt.finetune.gmap import GmapSetup
    from greenadapt.qa.train import QaTrainOptions

log = logging.getLogger(__name__)

KIND = "finetune"
TRAIN_ON = ("train", "train+dev")


@dataclass
class FinetuneOptions:
    task: str
    train: Path
    dev: Path | None = None
    test: Path | None = None
    model: str | None = None
    out: Path | None = None
    workdir: Path | None = None
    reader: ReaderOptions = field(default_factory=ReaderOptions)
    training: TrainConfig = field(default_factory=TrainConfig)  # its mix None: 0.5 with a domain tokenizer, else 0
    pool: str = "mean"
    seeds: list[int] = field(default_factory=lambda: [DEFAULT_SEED])
    train_on: str = "train"
    max_length: int = 128
    max_words: int = 30
    metric: str | None = None
    positive_label: str | None = None
    device: str = "auto"
    force: bool = False
    wait: bool = False
    save_every: int | None = None  # steps between resumable checkpoints (in checkpoint_folder(out))
    resume: bool = False  # continue from the checkpoint an interrupted run left
    doc_stride: int | None = None  # --task qa only; None: 128, or a third of the window when that is smaller
    # The command-line options the user set, e.g. {"--lr", "--max-words"} (the CLI fills it in).
    # None: every option whose value differs from its default counts as set. Only --task qa
    # looks at it: options left unset take the QA defaults, and set ones QA has no use for are refused.
    given: frozenset[str] | None = None
    gmap: GmapOptions = field(default_factory=GmapOptions)  # G-MAP fusion of a frozen general model (strategy "none": off)


# Options of ner/classify that mean nothing for --task qa (nor checkpoints: the QA loop has none yet).
NOT_FOR_QA = (
    "--max-words", "--metric", "--positive-label", "--train-on",
    "--text-field", "--pair-field", "--label-field", "--format", "--header", "--entity-type",
    "--save-every", "--resume",
)


# --------------------------------------------------------------------------
# finetune


def run_finetune(options: FinetuneOptions, progress: Progress = NULL_PROGRESS) -> StageOutcome:
    """Fine-tune (one run per seed), evaluate under every pooling mode, write the run folder."""
    if options.task == QA_TASK:
        return _run_finetune_qa(options, progress)
    task = get_task(options.task)
    if options.doc_stride is not None:
        raise UsageError(f"--doc-stride applies to --task qa only, not {options.task}")
    _check_options(options)
    ref = resolve_model(options.model)
    out = options.out or default_run_folder(options, ref)
    check_run_destination(out, kind=KIND, force=options.force, model=ref.path, data=[options.train, options.dev, options.test], workdir=options.workdir)
    model_identity = identity_of_model(ref)

    train_file = task.read(options.train, options.reader, require_labels=True)
    dev_file = task.read(options.dev, options.reader, require_labels=True) if options.dev else None
    test_file = task.read(options.test, options.reader, require_labels=True) if options.test else None
    if options.train_on == "train+dev" and dev_file is None:
        raise UsageError("--train-on train+dev needs --dev")
    training_files = [train_file] + ([dev_file] if options.train_on == "train+dev" and dev_file else [])
    labels = task.order_labels([label for f in training_files for label in f.labels()])
    if len(labels) < 2:
        raise DataError(f"the training data has only {len(labels)} label(s) ({', '.join(labels)})", path=train_file.path)
    for other in (dev_file, test_file):
        if other is not None:
            check_known_labels(other, labels)

    tokenizers = load_tokenizers(ref.path)
    gmap = _prepare_gmap(options, ref, tokenizers.general)
    requested_mix = options.training.mix
    mix = requested_mix if requested_mix is not None else (0.5 if tokenizers.has_domain else 0.0)
    if mix > 0 and not tokenizers.has_domain:
        raise UsageError(
            f"--mix {mix:g} needs a domain tokenizer, but {ref.path} has only one tokenizer (no {GENERAL_TOKENIZER_DIR}/)",
            hint="pass a model folder written by `greenadapt expand`, or --mix 0",
        )
    if options.pool == "domain" and not tokenizers.has_domain:
        raise UsageError("--pool domain needs a model with a domain tokenizer", hint="use --pool general")
    pool = options.pool if tokenizers.has_domain else "general"
    positive = positive_label_for(labels, options.positive_label) if task.name == "classify" else None
    metric = task.check_metric(options.metric, positive)
    settings = TaskSettings(
        task=task.name,
        labels=labels,
        max_length=ExpandedModel(ref, tokenizers).capped_length(options.max_length),
        max_words=options.max_words,
        metric=metric,
        positive_label=positive,
        reader=options.reader.as_config(),
        has_domain_tokenizer=tokenizers.has_domain,
    )
    base = replace(options.training, mix=mix)
    config = {
        "task": settings.to_json(),
        "train": {k: v for k, v in asdict(base).items() if k not in ("seed", "eval_batch_size")},
        "seeds": list(options.seeds),
        "train_on": options.train_on,
        "pool": pool,
        "model": ref.name,
    }
    inputs = [model_identity] + [
        {"role": role, **file_identity(f.path)}
        for role, f in (("train", train_file), ("dev", dev_file), ("test", test_file))
        if f is not None
    ]
    if gmap is not None:
        # Only G-MAP runs record it, so the fingerprints of runs without it do not change.
        config["gmap"] = options.gmap.to_config(gmap.general)
        inputs.append({"role": "general", **identity_of_model(gmap.general)})
    checkpoints = checkpoint_folder(out)

    ctx = init_distributed(options.device)
    try:
        with contextlib.ExitStack() as stack:
            stop = stack.enter_context(StopSignal(checkpoints))
            stage: StageRun | None = None
            if ctx.is_main:
                libraries = ("torch", "transformers", "tokenizers")
                stage = stack.enter_context(
                    StageRun(KIND, out, config, inputs, force=options.force, wait=options.wait, libraries=libraries)
                )
            skipped = ctx.broadcast_int(int(stage.skipped) if stage is not None else 0)
            if skipped:
                if stage is None:
                    return StageOutcome(Path(out), {}, True)
                _drop_finished_checkpoints(checkpoints, stage.fingerprint)
                return StageOutcome(stage.out, stage.manifest or {}, True, stage.skip_reason)
            run_fingerprint = fingerprint(KIND, config, inputs)
            if stage is not None:
                _check_checkpoints(checkpoints, run_fingerprint, resume=options.resume)
                if task.name == "ner" and untyped_labels(labels):  # said once training is sure to start
                    log.warning(
                        "%s: the labels %s name no entity type, so transformers' entity aggregation cannot group them "
                        "into entities; pass --entity-type TYPE (e.g. Disease) to train B-TYPE/I-TYPE labels",
                        train_file.path, ", ".join(untyped_labels(labels)),
                    )
            checkpointing = Checkpointing(
                checkpoints,
                run_fingerprint,
                save_every=options.save_every,
                resume=options.resume,
                save_final=options.save_every is not None or len(options.seeds) > 1,
                writer=ctx.is_main,
            )
            job = _Job(task, settings, tokenizers, ref, base, ctx, pool, progress, checkpointing, stop, gmap)
            result = job.run(train_file, dev_file, test_file, options.seeds, options.train_on, stage.tmp if stage else None)
            if stage is None:
                return StageOutcome(Path(out), {}, False)
            manifest = stage.commit(stats=result)
            shutil.rmtree(checkpoints, ignore_errors=True)
            if stop.received:
                log.warning("SIGTERM arrived after the last training step; the run was finished and saved first")
            return StageOutcome(stage.out, manifest, False)
    finally:
        ctx.close()


def _prepare_gmap(options: FinetuneOptions, ref: ModelRef, t_lm: Any) -> GmapSetup | None:
    """Resolve and check ``--gmap`` and its general model before any data is tokenized."""
    if not options.gmap.enabled:
        options.gmap.check()  # refuses --gmap-* options without --gmap
        return None
    from greenadapt.finetune.gmap import prepare

    options.gmap.check()
    return prepare(options.gmap, ref, t_lm, cache_root=resolve_workdir(options.workdir) / "cache")


def checkpoint_folder(out: str | os.PathLike[str]) -> Path:
    """Where a run writing ``out`` keeps its checkpoints: a sibling, so they outlive the run's temporary folder."""
    path = Path(out).absolute()
    return path.parent / f"{path.name}.checkpoint"


def _check_checkpoints(folder: Path, run_fingerprint: str, *, resume: bool) -> None:
    """Never discard an interrupted run's checkpoints unasked, nor resume from another run's."""
    if not folder.is_dir():
        return
    found = [c for c in (latest_checkpoint(seed) for seed in sorted(folder.glob("seed-*"))) if c is not None]
    if not found:
        log.info("removing %s: it holds no complete checkpoint", folder)
        shutil.rmtree(folder, ignore_errors=True)
        return
    if not resume:
        steps = ", ".join(str(manifest.get("step")) for _, manifest in found)
        raise StageError(
            f"an interrupted run left checkpoints here (step {steps})",
            path=folder,
            hint="pass --resume to continue from them, or delete this folder to start over",
        )
    for path, manifest in found:
        if manifest.get("fingerprint") != run_fingerprint:
            raise StageError(
                "this checkpoint was made with other inputs or options",
                path=path,
                hint=f"rerun with the options of the interrupted run, or delete {folder} to start over",
            )


def _drop_finished_checkpoints(folder: Path, run_fingerprint: str) -> None:
    # A run killed between its commit and removing its checkpoints leaves them behind; the output supersedes them.
    found = [c for c in (latest_checkpoint(seed) for seed in sorted(folder.glob("seed-*"))) if c is not None]
    if folder.is_dir() and all(manifest.get("fingerprint") == run_fingerprint for _, manifest in found):
        shutil.rmtree(folder, ignore_errors=True)


def _run_finetune_qa(options: FinetuneOptions, progress: Progress) -> StageOutcome:
    from greenadapt.qa.train import run_finetune_qa

    qa_options = qa_train_options(options)
    out = options.out or default_run_folder(options, resolve_model(options.model))
    return run_finetune_qa(
        options.model,
        options.train,
        out,
        dev=options.dev,
        test=options.test,
        options=qa_options,
        force=options.force,
        wait=options.wait,
        progress=progress,
    )


def qa_train_options(options: FinetuneOptions) -> QaTrainOptions:
    """``QaTrainOptions`` from the shared options: the set ones as given, the rest at the QA defaults."""
    from greenadapt.qa.train import QA_TRAINING, QaTrainOptions

    given = options_set(options)
    refused = [flag for flag in NOT_FOR_QA if flag in given]
    if refused:
        raise UsageError(
            f"{', '.join(refused)} {'does' if len(refused) == 1 else 'do'} not apply to --task qa",
            hint=f"leave {'it' if len(refused) == 1 else 'them'} out; qa takes the training, --max-length, --doc-stride and --pool options",
        )
    if len(options.seeds) > 1:
        raise UsageError("--task qa trains one model, not one per seed", hint="use --seed")
    shared = {f.name: getattr(options.training, f.name) for f in fields(TrainConfig) if _flag(f.name) in given}
    return QaTrainOptions(
        training=replace(QA_TRAINING, **{**shared, "seed": options.seeds[0]}),
        max_length=options.max_length if "--max-length" in given else None,
        doc_stride=options.doc_stride,
        pool=options.pool if "--pool" in given else None,
        device=options.device,
        gmap=options.gmap,
        workdir=options.workdir,
    )


def options_set(options: FinetuneOptions) -> frozenset[str]:
    """``options.given``, or the flags of the options whose values differ from their defaults."""
    if options.given is not None:
        return options.given
    pairs = [
        (options, FinetuneOptions(task=options.task, train=options.train)),
        (options.training, TrainConfig()),
        (options.reader, ReaderOptions()),
    ]
    return frozenset(
        _flag(f.name)
        for value, default in pairs
        for f in fields(value)
        if not is_dataclass(getattr(value, f.name)) and getattr(value, f.name) != getattr(default, f.name)
    )


def _flag(name: str) -> str:
    # Every option's flag is its field name in kebab case (--batch-size, --format, --seeds).
    return "--" + name.replace("_", "-")


def _check_options(options: FinetuneOptions) -> None:
    training = options.training
    check_entity_type(options.reader.entity_type)
    if options.reader.entity_type is not None and options.task != "ner":
        raise UsageError(f"--entity-type applies to --task ner only, not {options.task}")
    if training.mix is not None and not 0.0 <= training.mix <= 1.0:
        raise UsageError(f"--mix {training.mix} is not a probability", hint="use a value from 0 to 1")
    if options.pool not in POOL_MODES:
        raise UsageError(f"unknown --pool {options.pool!r}", hint=f"choose from {', '.join(POOL_MODES)}")
    if options.train_on not in TRAIN_ON:
        raise UsageError(f"unknown --train-on {options.train_on!r}", hint="train or train+dev")
    if training.train_embeddings not in TRAIN_EMBEDDINGS:
        raise UsageError(f"unknown --train-embeddings {training.train_embeddings!r}", hint="all, new or none")
    if not options.seeds or len(set(options.seeds)) != len(options.seeds):
        raise UsageError("--seeds needs distinct integers, e.g. 1,2,3")
    for source, name in [(training, n) for n in ("batch_size", "grad_accum", "epochs", "eval_batch_size")] + [
        (options, n) for n in ("max_length", "max_words")
    ]:
        if getattr(source, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if training.max_steps is not None and training.max_steps < 1:
        raise UsageError("--max-steps must be at least 1")
    if options.save_every is not None and options.save_every < 1:
        raise UsageError("--save-every must be at least 1")
    if training.lr <= 0 or not 0 <= training.warmup < 1:
        raise UsageError("--lr must be positive and --warmup a fraction below 1")


def identity_of_model(ref: ModelRef) -> dict[str, Any]:
    from greenadapt.vectors import check_weights_load_safely

    check_weights_load_safely(ref.path)
    manifest = read_manifest(ref.path)
    if manifest is not None and manifest.get("kind") == "expand":
        manifest = load_stage(ref.path, "expand")
        return manifest_identity(ref.path, manifest)
    return ref.identity()


def default_run_folder(options: FinetuneOptions, ref: ModelRef) -> Path:
    """``<workdir>/finetune/<data>-<task>/<model>``: each model (and each method's expanded model) gets its own folder.

    A workspace expand folder ``<workdir>/<corpus>/<model>/expand[-<method>]`` is named
    ``<model>-green[-<method>]-<corpus>``; any other folder by its own name.
    """
    data = slugify(f"{options.train.resolve().parent.name}-{options.task}")
    manifest = read_manifest(ref.path)
    if manifest is not None and manifest.get("kind") == "expand" and ref.path.name.startswith("expand"):
        method = ref.path.name.removeprefix("expand")
        model_key = slugify(f"{ref.path.parent.name}-green{method}-{ref.path.parent.parent.name}")
    else:
        model_key = ref.slug
    if options.gmap.enabled:
        model_key += f"-gmap-{options.gmap.strategy}"
    return resolve_workdir(options.workdir) / "finetune" / data / model_key


@dataclass
class _Job:
    """One fine-tuning job: the shared pieces, run once per seed."""

    task: Task
    settings: TaskSettings
    tokenizers: TokenizerPair
    ref: ModelRef
    base: TrainConfig
    ctx: DistContext
    pool: str
    progress: Progress
    checkpoint: Checkpointing | None = None  # its folder holds one subfolder per seed
    stop: StopSignal | None = None
    gmap: GmapSetup | None = None

    def run(
        self,
        train_file: TaskFile,
        dev_file: TaskFile | None,
        test_file: TaskFile | None,
        seeds: Sequence[int],
        train_on: str,
        tmp: Path | None,
    ) -> dict[str, Any]:
        train_units, train_stats = self.task.units(train_file, self.settings, self.tokenizers, training=True)
        dev_units = self.task.units(dev_file, self.settings, self.tokenizers)[0] if dev_file else None
        test_units = self.task.units(test_file, self.settings, self.tokenizers)[0] if test_file else None
        if self.gmap is not None:
            from greenadapt.finetune.gmap import attach_memory

            # Before train+dev joins the lists: a unit's example index refers to its own file.
            for task_file, units in ((train_file, train_units), (dev_file, dev_units), (test_file, test_units)):
                if task_file is not None and units is not None:
                    attach_memory(units, task_file.examples, self.gmap.tokenizer, self.gmap.max_length)
        if train_on == "train+dev" and dev_file is not None and dev_units is not None:
            train_units = train_units + dev_units
        select_on_dev = dev_file is not None and train_on == "train"
        per_seed: dict[str, Any] = {}
        trained: dict[str, Any] = {}
        for seed in seeds:
            folder = None if tmp is None else (tmp if len(seeds) == 1 else tmp / f"seed-{seed}")
            metrics, summary = self._one_seed(
                seed,
                train_units,
                (dev_file, dev_units) if select_on_dev else (None, None),
                (test_file, test_units),
                folder,
            )
            per_seed[str(seed)] = metrics
            trained[str(seed)] = summary
        result = {
            "task": self.task.name,
            "labels": self.settings.labels,
            "mix": self.base.mix,
            "pool": self.pool,
            "units": {"train": len(train_units), "dev": len(dev_units or []), "test": len(test_units or [])},
            "preprocessing": train_stats,
            "models": {str(s): "." if len(seeds) == 1 else f"seed-{s}" for s in seeds},
            "training": trained,
        }
        if self.gmap is not None:
            result["gmap"] = {**trained[str(seeds[0])].pop("gmap", {}), **self.gmap.describe()}
            for summary in trained.values():
                summary.pop("gmap", None)
        if tmp is not None:
            metrics_doc = {
                "seeds": list(seeds),
                "primary_metric": self.settings.metric,
                "pool": self.pool,
                "summary": summarize_seeds(per_seed),
                "per_seed": per_seed,
            }
            card = finetuned_card(
                base_model=self.ref.name, task=self.task.name, labels=list(self.settings.labels), metric=self.settings.metric or "",
                summary=metrics_doc["summary"], seeds=list(seeds), mix=self.base.mix or 0.0, pool=self.pool,
                two_tokenizers=self.tokenizers.has_domain, general_tokenizer=GENERAL_TOKENIZER_DIR,
                adaptation=self.ref.config().get(CONFIG_KEY),
            )
            with resource_errors(tmp):
                write_json(tmp / "metrics.json", metrics_doc)
                (tmp / CARD_FILE).write_text(card, encoding="utf-8")
            result["summary"] = _headline(metrics_doc, self.settings.metric or "", self.pool)
        return result

    def _one_seed(
        self,
        seed: int,
        train_units: list[Unit],
        dev: tuple[TaskFile | None, list[Unit] | None],
        test: tuple[TaskFile | None, list[Unit] | None],
        folder: Path | None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Train one model and evaluate it; ``dev`` (when given) selects the best epoch."""
        import torch
        from transformers import set_seed

        set_seed(seed)  # python, numpy, torch: the new head's initialisation and dropout
        with quiet_transformers():
            model = self.task.load_model(self.ref.path, self.settings.labels)
        if self.gmap is not None:
            from greenadapt.finetune.gmap import build_model

            model = build_model(model, self.gmap)
        vocab_rows = model.get_input_embeddings().weight.shape[0]
        check_vocab_fits(self.tokenizers, vocab_rows, self.ref.path)
        n_base = self.tokenizers.general_vocab_size if self.tokenizers.has_domain else vocab_rows
        config = replace(self.base, seed=seed)
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)

        metric = self.settings.metric or self.task.default_metric
        dev_file, dev_units = dev

        def evaluate(m: Any) -> tuple[float, dict[str, Any]]:
            scores = self._scores(m, dev_file, dev_units, (self.pool,))[0][self.pool]  # type: ignore[arg-type]
            return float(scores[metric]), {metric: scores[metric]}

        result = train(
            model,
            train_units,
            config,
            self.ctx,
            pad_id=self.tokenizers.pad_id,
            n_base_rows=n_base,
            has_domain=self.tokenizers.has_domain,
            evaluate=evaluate if dev_file is not None and dev_units is not None else None,
            log_path=folder / "train_log.jsonl" if folder is not None else None,
            progress=self.progress,
            checkpoint=replace(self.checkpoint, folder=self.checkpoint.folder / f"seed-{seed}") if self.checkpoint else None,
            stop=self.stop,
        )
        metrics: dict[str, Any] = {}
        for split, (task_file, units) in (("dev", dev), ("test", test)):
            if task_file is None or units is None:
                continue
            scores, predictions = self._scores(model, task_file, units, _report_modes(self.tokenizers))
            metrics[split] = scores
            if folder is not None:
                with resource_errors(folder):
                    write_predictions(task_file, predictions[self.pool], folder / "predictions" / prediction_file_name(task_file, split))
        if folder is not None:
            with resource_errors(folder):
                self._save(model, folder)
        summary = {
            "steps": result.steps,
            "epochs": result.epochs_run,
            "best_epoch": result.best_epoch,
            "dev_history": result.dev_history,
            "train_seconds": round(result.seconds, 2),
            "domain_fraction": round(result.domain_fraction, 4),
            "warnings": result.warnings,
        }
        if self.gmap is not None:
            summary["gmap"] = model.describe()
            if model.memory_cache is not None:
                summary["gmap_cache"] = model.memory_cache.stats()
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return metrics, summary

    def _scores(
        self, model: Any, task_file: TaskFile, units: list[Unit], modes: Sequence[str]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]]]:
        from greenadapt.finetune.infer import pooled_logits

        logits = pooled_logits(
            model,
            units,
            self.ctx,
            has_domain=self.tokenizers.has_domain,
            pad_id=self.tokenizers.pad_id,
            batch_size=self.base.eval_batch_size,
            precision=self.base.precision,
            modes=modes,
        )
        scores, predictions = {}, {}
        for mode, values in logits.items():
            predictions[mode] = self.task.decode(task_file, argmax_labels(values, self.settings.labels))
            scores[mode] = self.task.score(task_file, predictions[mode], self.settings)
        return scores, predictions

    def _save(self, model: Any, folder: Path) -> None:
        if self.gmap is not None:
            from greenadapt.finetune import gmap

            gmap.save(model, folder, self.gmap)
        else:
            with quiet_transformers():
                model.save_pretrained(str(folder))
        if self.tokenizers.domain is not None:
            self.tokenizers.domain.save_pretrained(str(folder))
            self.tokenizers.general.save_pretrained(str(folder / GENERAL_TOKENIZER_DIR))
        else:
            self.tokenizers.general.save_pretrained(str(folder))
        write_json(folder / TASK_FILE, self.settings.to_json())


def _report_modes(tokenizers: TokenizerPair) -> tuple[str, ...]:
    from greenadapt.finetune.infer import report_modes

    return report_modes(tokenizers.has_domain)


def _headline(metrics_doc: dict[str, Any], metric: str, pool: str) -> dict[str, Any]:
    """The one number per split a summary line shows: the primary metric under the chosen pooling."""
    headline = {}
    for split, pools in metrics_doc["summary"].items():
        value = pools.get(pool, {}).get(metric)
        if value is not None:
            headline[split] = value
    return headline
