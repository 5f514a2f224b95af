"""The ``multitask`` stage: training one shared encoder with PALs and a head per task.

A multitask run folder (kind ``multitask``, written through StageRun)::

    manifest.json          stats: parameter counts, per-task and average scores, training summary
    metrics.json           per task, split and pooling mode; averages of the primary metrics
    pals_config.json       adapter kind, size, heads; the tasks, their types and label counts
    base/                  the shared encoder (transformers folder) and its tokenizer(s)
        general-tokenizer/ T_LM, when the model has a domain tokenizer
    tasks/<name>/
        adapter.safetensors    the task's PALs and head
        greenadapt_task.json   labels, reader options, lengths (as `finetune` writes them)
        predictions/<split>.<ext>
    train_log.jsonl        one line per step (with its task), one per dev evaluation
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.artifacts import kinds
from greenadapt.artifacts.files import write_json
from greenadapt.artifacts.model_folder import TokenizerPair, check_vocab_fits
from greenadapt.artifacts.pretrained import slugify
from greenadapt.artifacts.stage import StageOutcome, resource_errors
from greenadapt.training.checkpoint import Checkpointing, StopSignal
from greenadapt.training.job import training_stage
from greenadapt.runners.setup import prepare_runner
from greenadapt.inference.labelling import pooling_mode
from greenadapt.training.runtime import TrainingHooks
from greenadapt.artifacts.workspace import workdir as resolve_workdir
from greenadapt.data.predictions import prediction_file_name, write_predictions
from greenadapt.data.task_files import TaskFile, check_known_labels, check_task_paths
from greenadapt.errors import DataError, UsageError
from greenadapt.machine.devices import pick_device
from greenadapt.modeling.pals.config import BASE_DIR, TASKS_DIR, PalsConfig
from greenadapt.modeling.units import Unit
from greenadapt.progress import Progress, said_scoring
from greenadapt.runners.multitask.spec import TaskSpec, check_unique
from greenadapt.runners.multitask.train import train_multitask
from greenadapt.tasks import TASK_FILE, LabellingTask, TaskSettings, get_labelling_task
from greenadapt.compute.distributed import DistContext
from greenadapt.training.finetuning import resolve_mix
from greenadapt.compute.health import prediction_warnings

if TYPE_CHECKING:
    from greenadapt.options import Run
    from greenadapt.runners.multitask.settings import MultitaskSettings

log = logging.getLogger(__name__)

KIND = kinds.MULTITASK


@dataclass
class _Prepared:
    spec: TaskSpec
    task: LabellingTask
    settings: TaskSettings
    files: dict[str, TaskFile]  # train, and dev/test when given


def run_multitask(settings: MultitaskSettings, run: Run) -> StageOutcome:
    """``greenadapt multitask``: train one shared encoder with a head (and PALs) per task, evaluate every task, write the run folder."""
    from greenadapt.runners.multitask.spec import collect_specs

    specs = collect_specs(list(settings.task), settings.tasks_file)
    check_unique(specs)
    files = [path for spec in specs for path in (spec.train, spec.dev, spec.test)]
    check_task_paths(*files)  # before the model's files are hashed or any file read
    setup = prepare_runner(settings, run, kind=KIND, data=files,
                           default_out=lambda ref: resolve_workdir(run.workdir) / "multitask" / slugify("-".join(s.name for s in specs))
                           / ref.slug)
    ref, folder, tokenizers = setup.ref, setup.folder, setup.tokenizers
    pool = pooling_mode(settings.pool, tokenizers, ref.path)
    max_length = folder.capped_length(settings.max_length)
    prepared = [_prepare(spec, tokenizers, max_length, settings.max_words) for spec in specs]

    training = settings.replaced(mix=resolve_mix(settings.mix, tokenizers.has_domain, ref.path))
    config, inputs = setup.record({
        "tasks": [{**p.spec.to_json(), "settings": p.settings.to_json()} for p in prepared],
        "pals": _pals(settings).to_json(),
        "train": training.recorded(),
        "sampling": settings.sampling,
        "steps_per_epoch": settings.steps_per_epoch,
        "freeze_base": settings.freeze_base,
        "pool": pool,
        "model": ref.name,
    }, [(f"{p.spec.name}:{role}", f.path) for p in prepared for role, f in p.files.items()])
    # the training stage every runner uses: checkpoints (--save-every, --save-minutes), SIGTERM, --resume
    with training_stage(KIND, setup.out, config, inputs, settings, run) as job:
        if job.up_to_date is not None:
            return job.up_to_date
        assert job.tmp is not None  # one process: multitask has no data-parallel path
        ctx = DistContext(device=pick_device(settings.device))
        stats = _train_and_save(prepared, ref.path, tokenizers, training, pool, ctx, job.tmp, run.progress, setup.gmap,
                                job.checkpointing(), job.stop)
        return job.commit(stats)


def _pals(settings: MultitaskSettings) -> PalsConfig:
    """The adapters the run adds, as pals_config.json keeps them."""
    return PalsConfig(adapter=settings.adapter, size=settings.pal_size, heads=settings.pal_heads)


def _prepare(spec: TaskSpec, tokenizers: TokenizerPair, max_length: int, max_words: int) -> _Prepared:
    task = get_labelling_task(spec.type)
    files = {"train": task.read(spec.train, spec.reader, require_labels=True)}
    for role in ("dev", "test"):
        path = getattr(spec, role)
        if path is not None:
            files[role] = task.read(path, spec.reader, require_labels=True)
    labels = task.order_labels(files["train"].labels())
    if len(labels) < 2:
        raise DataError(
            f"task {spec.name!r}: the training data has only {len(labels)} label(s) ({', '.join(labels)})", path=files["train"].path
        )
    for role in ("dev", "test"):
        if role in files:
            check_known_labels(files[role], labels, f"training ({spec.name})")
    positive = task.positive_label(labels, spec.positive_label)
    try:
        metric = task.check_metric(spec.metric, positive)
    except UsageError as exc:
        raise UsageError(f"task {spec.name!r}: {exc.message}", hint=exc.hint) from None
    settings = TaskSettings(
        task=task.name,
        labels=labels,
        max_length=max_length,
        max_words=max_words,
        metric=metric,
        positive_label=positive,
        reader=spec.reader.as_config(),
        has_domain_tokenizer=tokenizers.has_domain,
    )
    return _Prepared(spec, task, settings, files)


def _units(prepared: list[_Prepared], tokenizers: TokenizerPair, gmap: Any) -> tuple[dict[str, dict[str, list[Unit]]], dict[str, Any]]:
    """Every task's units per file role (train, dev, test), and the training files' preprocessing figures."""
    units: dict[str, dict[str, list[Unit]]] = {}
    preprocessing = {}
    for p in prepared:
        units[p.spec.name] = {}
        for role, task_file in p.files.items():
            task_units, stats = p.task.units(task_file, p.settings, tokenizers, training=role == "train")
            if gmap is not None:
                from greenadapt.modeling.gmap.wiring import attach_memory

                attach_memory(task_units, task_file.examples, gmap.tokenizer, gmap.max_length)
            units[p.spec.name][role] = task_units
            if role == "train":
                preprocessing[p.spec.name] = stats
    return units, preprocessing


def _build_model(prepared: list[_Prepared], model_path: Path, tokenizers: TokenizerPair, settings: MultitaskSettings, gmap: Any) -> Any:
    """The shared encoder with each task's adapter and head (and G-MAP's fusion)."""
    import torch
    from transformers import AutoModel

    from greenadapt.artifacts.pretrained import quiet_transformers
    from greenadapt.modeling.pals.model import MultiTaskModel

    with quiet_transformers():
        base = AutoModel.from_pretrained(str(model_path), dtype=torch.float32)
    check_vocab_fits(tokenizers, base.get_input_embeddings().weight.shape[0], model_path)
    model = MultiTaskModel(base, _pals(settings))
    for p in prepared:
        model.add_task(p.spec.name, p.spec.type, len(p.settings.labels))
    if gmap is not None:
        from greenadapt.modeling.gmap.wiring import build_model

        model.attach_fusion(build_model(model.base, gmap))
    return model


def _score_and_save(
    prepared: list[_Prepared], model: Any, scores: Any, tokenizers: TokenizerPair, pool: str, tmp: Path, gmap: Any
) -> dict[str, Any]:
    """Score dev and test under every pooling mode, write predictions, the model, tokenizers and metrics.json."""
    from greenadapt.artifacts.pretrained import quiet_transformers
    from greenadapt.compute.pooling import report_modes

    metrics: dict[str, Any] = {}
    modes = report_modes(tokenizers.has_domain)
    for p in prepared:
        task_dir = tmp / TASKS_DIR / p.spec.name
        metrics[p.spec.name] = {"metric": p.settings.metric}
        for role in ("dev", "test"):
            if role not in p.files:
                continue
            with said_scoring(log, f"{p.spec.name} {role}", f"{len(p.files[role].examples):,} examples"):
                split_scores, predictions = scores(p, role, modes)
            metrics[p.spec.name][role] = split_scores
            if p.files[role].labelled:
                warnings = prediction_warnings(f"{p.spec.name} {role}", p.files[role].gold(), predictions[pool])
                metrics[p.spec.name].setdefault("warnings", []).extend(warnings)
            write_predictions(p.files[role], predictions[pool], task_dir / "predictions" / prediction_file_name(p.files[role], role))
    with quiet_transformers():
        model.save(tmp, save_base=gmap is None)
    if gmap is not None:
        from greenadapt.modeling.gmap.wiring import save as save_fused

        save_fused(model.fusion, tmp / BASE_DIR, gmap)  # the encoder, gates and gmap_config.json
    tokenizers.save(tmp / BASE_DIR)
    for p in prepared:
        write_json(tmp / TASKS_DIR / p.spec.name / TASK_FILE, p.settings.to_json())
    write_json(tmp / "metrics.json", {"pool": pool, "tasks": metrics, "average": _averages(metrics, pool)})
    return metrics


def _train_and_save(
    prepared: list[_Prepared],
    model_path: Path,
    tokenizers: TokenizerPair,
    training: MultitaskSettings,
    pool: str,
    ctx: DistContext,
    tmp: Path,
    progress: Progress,
    gmap: Any = None,
    checkpoint: Checkpointing | None = None,
    stop: StopSignal | None = None,
) -> dict[str, Any]:
    from transformers import set_seed

    units, preprocessing = _units(prepared, tokenizers, gmap)
    set_seed(training.seed)
    model = _build_model(prepared, model_path, tokenizers, training, gmap)
    names = [p.spec.name for p in prepared]

    def scores(p: _Prepared, role: str, modes: Sequence[str]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
        return _score(model.task_view(p.spec.name), p, p.files[role], units[p.spec.name][role], tokenizers, ctx, training, modes)

    with_dev = [p for p in prepared if "dev" in p.files]

    def evaluate(_: Any) -> tuple[float, dict[str, Any]]:
        per_task = {p.spec.name: float(scores(p, "dev", (pool,))[0][pool][p.settings.metric]) for p in with_dev}
        return sum(per_task.values()) / len(per_task), {"tasks": per_task}

    result = train_multitask(
        model,
        names,
        [units[n]["train"] for n in names],
        training,
        ctx,
        pad_id=tokenizers.pad_id,
        hooks=TrainingHooks(evaluate=evaluate if with_dev else None, log_path=tmp / "train_log.jsonl", progress=progress,
                            checkpoint=checkpoint, stop=stop),
    )
    with resource_errors(tmp):
        metrics = _score_and_save(prepared, model, scores, tokenizers, pool, tmp, gmap)
    averages = _averages(metrics, pool)
    counts = model.parameter_counts()
    counts["formula_per_task"] = {n: model.expected_task_parameters(n) for n in names}
    counts["trainable"] = result.trainable_parameters
    headline = {
        n: {role: metrics[n][role][pool][metrics[n]["metric"]] for role in ("dev", "test") if role in metrics[n]} for n in names
    }
    return {
        "tasks": names,
        "adapter": training.adapter,
        "gmap": None if gmap is None else {"strategy": training.gmap, **gmap.describe()},
        "pool": pool,
        "mix": training.mix,
        "parameters": counts,
        "scores": headline,
        "average": averages,
        "warnings": [warning for n in names for warning in metrics[n].get("warnings", [])],  # for the summary, info, report
        "units": {n: {role: len(u) for role, u in units[n].items()} for n in names},
        "preprocessing": preprocessing,
        "training": {
            "steps": result.steps,
            "epochs": result.epochs_run,
            "steps_per_epoch": result.steps_per_epoch,
            "task_steps": result.task_steps,
            "best_epoch": result.best_epoch,
            "dev_history": result.dev_history,
            "train_seconds": round(result.seconds, 2),
            "domain_fraction": round(result.domain_fraction, 4),
        },
    }


def _score(
    view: Any,
    p: _Prepared,
    task_file: TaskFile,
    units: list[Unit],
    tokenizers: TokenizerPair,
    ctx: DistContext,
    training: MultitaskSettings,
    modes: Sequence[str],
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    from greenadapt.compute.pooling import pooled_logits

    logits = pooled_logits(
        view,
        units,
        ctx,
        has_domain=tokenizers.has_domain,
        pad_id=tokenizers.pad_id,
        batch_size=training.eval_batch_size,
        precision=training.precision,
        modes=modes,
    )
    return p.task.score_modes(task_file, logits, p.settings)


def _averages(metrics: dict[str, Any], pool: str) -> dict[str, float]:
    """Per split: the mean over tasks of each task's primary metric (only splits every task has)."""
    averages = {}
    for role in ("dev", "test"):
        values = [m[role][pool][m["metric"]] for m in metrics.values() if role in m]
        if values and len(values) == len(metrics):
            averages[role] = sum(values) / len(values)
    return averages


# --------------------------------------------------------------------------
__all__ = ["KIND", "run_multitask"]
