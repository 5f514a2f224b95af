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

:func:`run_finetune` hands the run to its task (:mod:`greenadapt.tasks`):
the labelling tasks come back to :func:`run_labelling`; ``qa`` trains in
:func:`greenadapt.runners.qa.train.finetune_qa` (SQuAD windows, start/end loss;
same folder kind, ``greenadapt_task.json`` says ``qa``). Options whose
default depends on the task are None here until the task fills them in.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.artifacts import kinds
from greenadapt.artifacts.files import write_json
from greenadapt.artifacts.model_card import CARD_FILE, CONFIG_KEY, finetuned_card
from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR, TokenizerPair, check_vocab_fits
from greenadapt.artifacts.pipeline_entry import write_pipeline_entry
from greenadapt.artifacts.pretrained import ModelRef, display_name, hub_id, quiet_transformers
from greenadapt.artifacts.stage import StageOutcome, resource_errors
from greenadapt.data.metrics import summarize_seeds
from greenadapt.data.predictions import prediction_file_name, write_predictions
from greenadapt.data.ner_labels import untyped_labels
from greenadapt.data.task_files import TaskFile, check_known_labels, check_task_paths
from greenadapt.errors import DataError, UsageError
from greenadapt.modeling.units import Unit
from greenadapt.progress import Progress, said_scoring
from greenadapt.tasks import TASK_FILE, LabellingTask, TaskSettings, get_task
from greenadapt.runners.finetune.settings import default_run_folder
from greenadapt.training.checkpoint import Checkpointing, StopSignal
from greenadapt.compute.distributed import DistContext, precision_used
from greenadapt.inference.labelling import ensemble_mode
from greenadapt.training.trackers import probe_trackers, report_scores, tracking
from greenadapt.training.finetuning import resolve_both_views, resolve_mix, train
from greenadapt.compute.health import learned_nothing_warning, prediction_warnings
from greenadapt.training.job import training_stage
from greenadapt.runners.setup import prepare_runner
from greenadapt.training.runtime import TrainingHooks
from greenadapt.redaction import scrub_secrets

if TYPE_CHECKING:
    from greenadapt.options import Run
    from greenadapt.runners.finetune.settings import FinetuneSettings
    from greenadapt.modeling.gmap.wiring import GmapSetup

log = logging.getLogger(__name__)

KIND = kinds.FINETUNE


# --------------------------------------------------------------------------
# finetune


def run_finetune(settings: FinetuneSettings, run: Run) -> StageOutcome:
    """``greenadapt finetune``: fine-tune ``settings.model`` on ``settings.task`` and write the run folder: a labelling task
    here, QA by its own loop."""
    from greenadapt.tasks.qa import QaTask

    task = get_task(settings.task)
    if isinstance(task, LabellingTask) and task.finetunes:
        return run_labelling(task, task.filled(settings), run)
    if isinstance(task, QaTask):
        from greenadapt.runners.qa.train import finetune_qa

        return finetune_qa(task.filled(settings), run)
    raise UsageError(f"{task.name} is not trained by `greenadapt finetune`")


def run_labelling(task: LabellingTask, settings: FinetuneSettings, run: Run) -> StageOutcome:
    """Fine-tune a labelling task (one run per seed), evaluate under every pooling mode, write the run folder.

    ``settings``: checked when made, the task's defaults filled in (:meth:`Task.filled`)."""
    probe_trackers(settings.report_to)  # a store that does not answer is a line now, not a hang after the data is read
    check_task_paths(settings.train, settings.dev, settings.test)  # before the model's files are hashed or any file read
    setup = prepare_runner(settings, run, kind=KIND, data=[settings.train, settings.dev, settings.test],
                           default_out=lambda ref: default_run_folder(settings, run, ref))
    ref, tokenizers, gmap = setup.ref, setup.tokenizers, setup.gmap
    train_file, dev_file, test_file, labels = _read_splits(task, settings)
    views = settings.replaced(both_views=resolve_both_views(settings.both_views, tokenizers.has_domain, mix=settings.mix,
                                                            agreement=settings.agreement))
    base = views.replaced(mix=resolve_mix(settings.mix, tokenizers.has_domain, ref.path, two_passes=views.two_passes))
    assert settings.pool is not None and settings.max_words is not None  # filled: the task's defaults
    pool = ensemble_mode(settings.pool, tokenizers.has_domain, ref.path)
    positive = task.positive_label(labels, settings.positive_label)
    metric = task.check_metric(settings.metric, positive)
    max_length = setup.folder.length_limit if settings.max_length is None else setup.folder.capped_length(settings.max_length)
    task_settings = TaskSettings(task=task.name, labels=labels, max_length=max_length, max_words=settings.max_words, metric=metric,
                                 positive_label=positive, reader=settings.reader.as_config(), has_domain_tokenizer=tokenizers.has_domain)
    config, inputs = setup.record({
        "task": task_settings.to_json(),
        "train": {k: v for k, v in base.recorded().items() if k != "seed"},
        "seeds": list(settings.seed_list),
        "train_on": settings.train_on,
        "pool": pool,
        "model": ref.name,
    }, [(role, f.path) for role, f in (("train", train_file), ("dev", dev_file), ("test", test_file)) if f is not None])
    with training_stage(KIND, setup.out, config, inputs, settings, run) as job:
        if job.up_to_date is not None:
            return job.up_to_date
        if job.stage is not None and task.finds_entities and untyped_labels(labels):  # said once training is sure to start
            log.warning(
                "%s: the labels %s name no entity type, so transformers' entity aggregation cannot group them into "
                "entities; pass --entity-type TYPE (e.g. Disease) to train B-TYPE/I-TYPE labels", train_file.path,
                ", ".join(untyped_labels(labels)),
            )
        checkpointing = job.checkpointing(save_final=settings.save_every is not None or len(settings.seed_list) > 1)
        runner = _Job(task, task_settings, tokenizers, ref, base, job.ctx, pool, run.progress, checkpointing, job.stop, gmap,
                      settings.report_to, setup.out, config, setup.identity)
        return job.commit(runner.run(train_file, dev_file, test_file, settings.seed_list, settings.train_on, job.tmp),
                          cost=_cost_figures(base))


def _cost_figures(base: FinetuneSettings) -> dict[str, Any]:
    """What the cost block says beside the measured figures: the passes an example cost, and the threads a CPU run's
    sums were split over (the same seed gives the same scores at the same count: docs/cluster.md)."""
    import torch

    return {**(base.cost_figures() or {}), "torch_threads": torch.get_num_threads()}


def _read_splits(task: LabellingTask, settings: FinetuneSettings) -> tuple[TaskFile, TaskFile | None, TaskFile | None, list[str]]:
    """The train, dev and test files, read and checked, and the labels of the training data (in the task's order)."""
    reader = settings.reader
    train_file = task.read(settings.train, reader, require_labels=True)
    dev_file = task.read(settings.dev, reader, require_labels=True) if settings.dev else None
    test_file = task.read(settings.test, reader, require_labels=True) if settings.test else None
    training_files = [train_file] + ([dev_file] if settings.train_on == "train+dev" and dev_file else [])
    labels = task.order_labels([label for f in training_files for label in f.labels()])
    if len(labels) < 2:
        raise DataError(f"the training data has only {len(labels)} label(s) ({', '.join(labels)})", path=train_file.path)
    for other in (dev_file, test_file):
        if other is not None:
            check_known_labels(other, labels)
    return train_file, dev_file, test_file, labels


@dataclass
class _Job:
    """One fine-tuning job: the shared pieces, run once per seed."""

    task: LabellingTask
    settings: TaskSettings
    tokenizers: TokenizerPair
    ref: ModelRef
    base: FinetuneSettings  # the run's settings, the mixture resolved; each seed's are base.replaced(seed=seed)
    ctx: DistContext
    pool: str
    progress: Progress
    checkpoint: Checkpointing | None = None  # its folder holds one subfolder per seed
    stop: StopSignal | None = None
    gmap: GmapSetup | None = None
    report_to: tuple[str, ...] = ()  # trackers, each seed's run its own (greenadapt.training.trackers)
    out: Path | None = None  # where the run folder will be (the trackers' files go beside it)
    tracked: dict[str, Any] = field(default_factory=dict)  # the run's recorded options, the trackers' parameters
    model_identity: dict[str, Any] = field(default_factory=dict)  # what the stage records of the model: its files, tokenizers too

    def run(
        self,
        train_file: TaskFile,
        dev_file: TaskFile | None,
        test_file: TaskFile | None,
        seeds: Sequence[int],
        train_on: str,
        tmp: Path | None,
    ) -> dict[str, Any]:
        train_units, train_stats = self._units(train_file, training=True)
        dev_units = self._units(dev_file)[0] if dev_file else None
        test_units = self._units(test_file)[0] if test_file else None
        if self.gmap is not None:
            from greenadapt.modeling.gmap.wiring import attach_memory

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
            # Every seed's warnings in one list, as info and the report read them from any stage; the run's budget first.
            "warnings": [*self._budget_warnings(len(train_file.examples)
                                                + (len(dev_file.examples) if train_on == "train+dev" and dev_file else 0)),
                         *(f"seed {seed}: {w}" for seed, summary in trained.items() for w in summary["warnings"])],
        }
        if self.gmap is not None:
            result["gmap"] = {**trained[str(seeds[0])].pop("gmap", {}), **self.gmap.describe()}
            for summary in trained.values():
                summary.pop("gmap", None)
        if tmp is not None:
            result["summary"], per_type = self._write_metrics_and_card(tmp, seeds, per_seed)
            if per_type:
                result["per_type"] = per_type
        return result

    def _write_metrics_and_card(self, tmp: Path, seeds: Sequence[int], per_seed: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """metrics.json (every seed, and their mean and sd) and the model card; the headline figures and per-type F1."""
        metrics_doc: dict[str, Any] = {
            "seeds": list(seeds),
            "primary_metric": self.settings.metric,
            "pool": self.pool,
            "summary": summarize_seeds(per_seed),
            "per_seed": per_seed,
        }
        card = finetuned_card(
            base_model=display_name(self.ref), base_model_hub_id=hub_id(self.ref), task=self.task.name, pipeline_tag=self.task.pipeline_tag,
            labels=list(self.settings.labels), metric=self.settings.metric or "",
            summary=metrics_doc["summary"], seeds=list(seeds), mix=self.base.mix or 0.0, pool=self.pool,
            two_tokenizers=self.tokenizers.has_domain, general_tokenizer=GENERAL_TOKENIZER_DIR,
            adaptation=self.ref.config().get(CONFIG_KEY), untyped_labels=untyped_labels(self.settings.labels)
            if self.task.finds_entities else [],
        )
        with resource_errors(tmp):
            write_json(tmp / "metrics.json", metrics_doc)
            (tmp / CARD_FILE).write_text(scrub_secrets(card), encoding="utf-8")
        return _headline(metrics_doc, self.settings.metric or "", self.pool), per_type_headline(metrics_doc, self.pool)

    def _model(self) -> tuple[Any, int]:
        """The model with its new head (G-MAP's fusion around it), and how many of its rows the general vocabulary has."""
        with quiet_transformers():
            model = self.task.load_model(self.ref.path, self.settings.labels)
        if self.gmap is not None:
            from greenadapt.modeling.gmap.wiring import build_model

            model = build_model(model, self.gmap)
        vocab_rows = model.get_input_embeddings().weight.shape[0]
        check_vocab_fits(self.tokenizers, vocab_rows, self.ref.path)
        return model, self.tokenizers.general_vocab_size if self.tokenizers.has_domain else vocab_rows

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
        model, n_base = self._model()
        config = self.base.replaced(seed=seed)
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)

        metric = self.settings.metric or self.task.default_metric
        dev_file, dev_units = dev

        def evaluate(m: Any) -> tuple[float, dict[str, Any]]:
            scores = self._scores(m, dev_file, dev_units, (self.pool,))[0][self.pool]  # type: ignore[arg-type]
            return float(scores[metric]), {metric: scores[metric]}

        with tracking(self.report_to if self.ctx.is_main else (), self.out, seed, self.tracked) as trackers:
            result = train(
                model, train_units, config, self.ctx, pad_id=self.tokenizers.pad_id, n_base_rows=n_base,
                has_domain=self.tokenizers.has_domain, hooks=TrainingHooks(
                    evaluate=evaluate if dev_file is not None and dev_units is not None else None,
                    log_path=folder / "train_log.jsonl" if folder is not None else None, progress=self.progress,
                    checkpoint=replace(self.checkpoint, folder=self.checkpoint.folder / f"seed-{seed}") if self.checkpoint else None,
                    stop=self.stop, trackers=trackers))
            metrics = self._score_splits(model, (("dev", dev), ("test", test)), result.warnings, folder)
            report_scores(trackers, metrics, result.steps)
        if folder is not None:
            with resource_errors(folder):
                self._save(model, folder)
        summary = {
            "steps": result.steps,
            "epochs": result.epochs_run,
            "best_epoch": result.best_epoch,
            **({"best_step": result.best_step, "stopped_early": result.stopped_early}
               if self.base.eval_every or self.base.early_stopping else {}),
            "dev_history": result.dev_history,
            "train_seconds": round(result.seconds, 2),
            "precision_used": precision_used(self.base.precision, self.ctx.device),
            "domain_fraction": round(result.domain_fraction, 4),
            **({"agreement": config.agreement} if config.agreement else {}),
            **({"both_views": True} if config.both_views else {}),
            **({"forward_passes_per_example": config.views_per_example} if config.two_passes else {}),
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

    def _budget_warnings(self, examples: int) -> list[str]:
        """A run trained on under a quarter of its task's recipe is barely trained (compute/health.py), said once."""
        from greenadapt.compute.health import barely_trained_warning, training_budget

        budget = training_budget(self.task.name, examples, recipe_epochs=self.task.defaults.epochs, epochs=self.base.epochs,
                                 max_steps=self.base.max_steps, batch=self.base.batch_size or self.task.defaults.batch_size)
        warning = barely_trained_warning(budget)
        if warning:
            log.warning("%s", warning)
        return [warning] if warning else []

    def _units(self, task_file: TaskFile, *, training: bool = False) -> tuple[list[Unit], dict[str, int]]:
        """The file's units, tokenized once per process for the same examples, settings and tokenizers."""
        from greenadapt.runners.finetune.units_cache import cached_units, units_key

        def make() -> tuple[list[Unit], dict[str, int]]:
            return self.task.units(task_file, self.settings, self.tokenizers, training=training)

        if self.gmap is not None:  # G-MAP attaches the general model's input to the units: never shared
            return make()
        key = units_key(self.task.name, task_file.examples, self.settings.to_json(), self.model_identity, training)
        return cached_units(key, make)

    def _score_splits(
        self, model: Any, splits: Sequence[tuple[str, tuple[TaskFile | None, list[Unit] | None]]], warnings: list[str], folder: Path | None
    ) -> dict[str, Any]:
        """Every split's scores under each reported pooling mode; its predictions written, its health warnings added."""
        metrics: dict[str, Any] = {}
        for split, (task_file, units) in splits:
            if task_file is None or units is None:
                continue
            views = " under both views" if self.tokenizers.has_domain else ""
            with said_scoring(log, split, f"{len(task_file.examples):,} examples, {len(units):,} sequences{views}"):
                scores, predictions = self._scores(model, task_file, units, _report_modes(self.tokenizers))
            metrics[split] = scores
            if task_file.labelled:
                said = prediction_warnings(split, task_file.gold(), predictions[self.pool])
                floor = learned_nothing_warning(self.task.name, split, task_file.gold(), predictions[self.pool]) if not said else None
                if floor:
                    log.warning("%s", floor)
                warnings.extend([*said, *([floor] if floor else [])])
            if folder is not None:
                with resource_errors(folder):
                    write_predictions(task_file, predictions[self.pool], folder / "predictions" / prediction_file_name(task_file, split))
                    write_json(folder / kinds.PREDICTIONS_DIR / kinds.by_pool_file_name(split),
                               self._by_pool(task_file, predictions), scrub=False)
        return metrics

    def _scores(
        self, model: Any, task_file: TaskFile, units: list[Unit], modes: Sequence[str]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]]]:
        from greenadapt.compute.pooling import pooled_logits

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
        return self.task.score_modes(task_file, logits, self.settings)

    def _by_pool(self, task_file: TaskFile, predictions: dict[str, list[Any]]) -> dict[str, Any]:
        """Gold and every pooling mode's predictions, example by example: what ``compare``'s paired bootstrap reads."""
        return {
            "task": self.task.name, "metric": self.settings.metric or self.task.default_metric,
            "positive_label": self.settings.positive_label, "gold": task_file.gold(),
            "pools": {mode: [list(p) if isinstance(p, tuple | list) else p for p in values] for mode, values in predictions.items()},
        }

    def _save(self, model: Any, folder: Path) -> None:
        if self.gmap is not None:
            from greenadapt.modeling.gmap import wiring as gmap

            gmap.save(model, folder, self.gmap)
        else:
            with quiet_transformers():
                model.save_pretrained(str(folder))
        self.tokenizers.save(folder)
        write_json(folder / TASK_FILE, self.settings.to_json())
        write_pipeline_entry(folder, pipeline_tag=self.task.pipeline_tag, auto_model=self.task.auto_model,
                             two_tokenizers=self.tokenizers.domain is not None)


def _report_modes(tokenizers: TokenizerPair) -> tuple[str, ...]:
    from greenadapt.compute.pooling import report_modes

    return report_modes(tokenizers.has_domain)


def _headline(metrics_doc: dict[str, Any], metric: str, pool: str) -> dict[str, Any]:
    """The one number per split a summary line shows: the primary metric under the chosen pooling."""
    headline = {}
    for split, pools in metrics_doc["summary"].items():
        value = pools.get(pool, {}).get(metric)
        if value is not None:
            headline[split] = value
    return headline


def per_type_headline(metrics_doc: dict[str, Any], pool: str) -> dict[str, Any]:
    """Each split's entity-type F1 under the chosen pooling (NER with typed labels; empty otherwise)."""
    return {
        split: {kind: {"f1": scores["f1"], "gold": scores["gold"]} for kind, scores in pools[pool]["per_type"].items()}
        for split, pools in metrics_doc["summary"].items()
        if "per_type" in pools.get(pool, {})
    }

