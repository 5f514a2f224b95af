"""``predict``: a fine-tuned labelling model opened for inference, and files labelled with it.

:func:`open_finetuned` is the one place that opens a ``greenadapt finetune``
model folder for inference (its task settings, both tokenizers, the weights,
a G-MAP model's general model) — ``greenadapt predict``, the Python API's
``greenadapt.load`` and ``greenadapt.pipeline`` all go through it, so they
give the same logits for the same input.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from greenadapt.artifacts import kinds
from greenadapt.artifacts.destination import check_prediction_output
from greenadapt.artifacts.manifest import MANIFEST, load_stage, read_manifest
from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR, TokenizerPair, load_tokenizers
from greenadapt.artifacts.pretrained import quiet_transformers
from greenadapt.artifacts.stage import resource_errors
from greenadapt.data.predictions import write_predictions
from greenadapt.data.task_files import TaskFile, check_known_labels
from greenadapt.errors import DataError, StageError, UsageError
from greenadapt.machine.devices import pick_device
from greenadapt.modeling.units import Unit
from greenadapt.tasks import TASK_FILE, LabellingTask, TaskSettings, argmax_labels, get_labelling_task, get_task
from greenadapt.compute.distributed import DistContext
from greenadapt.compute.health import prediction_warnings
from greenadapt.inference.settings import DEFAULT_LOAD, LoadSettings, ModelRunSettings
from greenadapt.compute.pooling import check_pool, report_modes


@dataclass
class FinetunedModel:
    """A fine-tuned NER or classification model on a device, ready to score units under its tokenizers."""

    folder: Path
    settings: TaskSettings
    tokenizers: TokenizerPair
    model: Any
    ctx: DistContext
    memory: tuple[Any, int] | None = None  # G-MAP: the general model's tokenizer and input length
    run: ModelRunSettings = DEFAULT_LOAD  # how its forward passes run (batch size, precision): the options it was opened with

    @property
    def task(self) -> LabellingTask:
        return get_labelling_task(self.settings.task)

    def logits(self, units: Sequence[Unit], examples: Sequence[Any], mode: str) -> np.ndarray:
        """``[rows, labels]`` logits of ``units`` (built from ``examples``) under pooling ``mode``."""
        return self.logits_by_mode(units, examples, (mode,))[mode]

    def logits_by_mode(self, units: Sequence[Unit], examples: Sequence[Any], modes: Sequence[str]) -> dict[str, np.ndarray]:
        """The logits under each pooling mode of ``modes``, from one pass per tokenizer."""
        from greenadapt.compute.pooling import pooled_logits

        if self.memory is not None:
            from greenadapt.modeling.gmap import wiring as gmap

            gmap.attach_memory(units, examples, *self.memory)
        return pooled_logits(
            self.model,
            units,
            self.ctx,
            has_domain=self.tokenizers.has_domain,
            pad_id=self.tokenizers.pad_id,
            batch_size=self.run.batch_size,
            precision=self.run.precision,
            modes=modes,
        )


def pooling_mode(pool: str, tokenizers: TokenizerPair, folder: Path) -> str:
    """The pooling mode ``--pool`` means for a model: one with a single tokenizer has only ``general``."""
    return ensemble_mode(pool, tokenizers.has_domain, folder)


def open_finetuned(folder: Path, settings: TaskSettings, run: ModelRunSettings = DEFAULT_LOAD) -> FinetunedModel:
    """Open a fine-tuned NER or classification model folder (as :func:`find_model_folder` found it) for inference.

    A G-MAP model (``gmap_config.json``) is reloaded with its general model:
    the one recorded at training, or ``run.general_model`` (checked by weights). ``run.runtime`` ``onnx`` (or ``auto``, where
    :mod:`~greenadapt.inference.default_runtime` picks it): the same
    model run by ONNX Runtime (:mod:`greenadapt.inference.onnx_runtime`; ``run.quantize == "int8"`` its int8 form).
    ``run`` stays with the model: its batch size and precision are those of every later forward pass.
    """

    from greenadapt.modeling.gmap import wiring as gmap

    task = get_labelling_task(settings.task)
    tokenizers = load_tokenizers(folder, inference=True)
    memory = None
    from greenadapt.inference.default_runtime import chosen_runtime

    fused = gmap.is_gmap_folder(folder)
    if chosen_runtime(run.runtime, run.quantize, run.device, precision=run.precision, exportable=not fused) == "onnx":
        return _open_onnx(folder, settings, tokenizers, task, run)
    if fused:
        loaded, memory_tokenizer, memory_length = gmap.load_fused(folder, general_model=run.general_model)
        memory = (memory_tokenizer, memory_length)
    else:
        if run.general_model is not None:
            raise UsageError("--general-model is for G-MAP models; this one has no gmap_config.json", path=folder, hint="leave it out")
        loaded = load_finetuned_weights(folder, task)
    ctx = DistContext(device=pick_device(run.device))
    loaded.to(ctx.device)
    loaded.eval()
    return FinetunedModel(folder, settings, tokenizers, loaded, ctx, memory, run)


def load_finetuned_weights(folder: Path, task: Any) -> Any:
    """The torch model of a fine-tuned NER or classification folder (its weights checked to load without code)."""
    import transformers

    from greenadapt.artifacts.model_weights import check_weights_load_safely

    check_weights_load_safely(folder)
    with quiet_transformers():
        return getattr(transformers, task.auto_model).from_pretrained(str(folder))


def _open_onnx(folder: Path, settings: TaskSettings, tokenizers: TokenizerPair, task: Any, run: ModelRunSettings) -> FinetunedModel:
    """The fine-tuned model run by ONNX Runtime on the CPU (exported on first use, from the cache after)."""
    from greenadapt.inference.onnx_runtime import onnx_model

    model = onnx_model(folder, lambda: load_finetuned_weights(folder, task), quantize=run.quantize)
    # device None: batches stay numpy arrays, which the ONNX model takes and gives back (no torch)
    return FinetunedModel(folder, settings, tokenizers, model, DistContext(device=None), run=run)


@dataclass
class PredictResult:
    output: Path
    examples: int
    pool: str
    metrics: dict[str, Any] | None
    model: Path


def find_model_folder(spec: str | os.PathLike[str]) -> tuple[Path, TaskSettings]:
    """A fine-tuned model folder and its task settings, from a run folder or one of its seed folders."""
    path = Path(spec)
    if not path.is_dir():
        raise StageError("no fine-tuned model here", path=path, hint="pass the folder `greenadapt finetune` wrote")
    manifest = read_manifest(path)
    if manifest is not None and manifest.get("kind") == kinds.FINETUNE:
        models = load_stage(path, kinds.FINETUNE).section("stats", "models")
        if len(models) > 1:
            names = ", ".join(sorted(models.values()))
            folders = [f"{path}/{name}" for name in sorted(models.values())]
            raise UsageError(f"this run holds one model per seed ({names})", path=path,
                             hint=f"pass --model {folders[0]}, or all of them for their ensemble: "
                                  + " ".join(f"--model {folder}" for folder in folders))
    elif (path / MANIFEST).exists():
        load_stage(path, kinds.FINETUNE)  # damaged or of another kind: its one line says which
    elif (path.parent / MANIFEST).is_file() and (read_manifest(path.parent) or {}).get("kind") == kinds.FINETUNE:
        load_stage(path.parent, kinds.FINETUNE)
    elif (path / TASK_FILE).is_file():
        # finetune always writes a manifest beside the model: without it no checksum proves the weights whole
        raise StageError(
            f"{MANIFEST} is missing, so nothing proves the model's files are whole", path=path,
            hint=f"restore {MANIFEST} (it holds the files' checksums), or predict with the whole run folder finetune wrote",
        )
    task_json = path / TASK_FILE
    if not task_json.is_file():
        raise StageError(
            f"not a fine-tuned greenadapt model (no {TASK_FILE})",
            path=path,
            hint="pass the folder `greenadapt finetune` wrote",
        )
    try:
        document = json.loads(task_json.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise StageError(f"unreadable {TASK_FILE}: {type(exc).__name__}", path=task_json) from None
    return path, TaskSettings.from_json(document, task_json)


def run_predict(
    model: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    input_path: Path,
    output_path: Path,
    *,
    options: LoadSettings = DEFAULT_LOAD,
    ignore_labels: bool = False,
    reader_overrides: dict[str, Any] | None = None,
    force: bool = False,
    found: tuple[Path, TaskSettings] | None = None,
) -> PredictResult:
    """Predict labels for ``input_path`` with a fine-tuned model; score them when the input is labelled.

    The input is read with the training files' reader options; ``reader_overrides``
    (ReaderOptions field → value, None values ignored) changes some of them.
    A G-MAP model (``gmap_config.json``) is reloaded with its general model:
    the one recorded at training, or ``options.general_model`` (checked by weights).
    ``found``: what :func:`find_model_folder` returned for ``model``, when the caller already verified it.
    ``model`` may name several fine-tuned folders of one task and label set: an ensemble, whose prediction is the
    label of highest mean probability over its members (:func:`label_file`).
    """
    options.check()
    specs = ensemble_members(model)
    for spec in specs:
        check_prediction_output(output_path, force=force, model=spec, input_path=input_path)
    founds = [found] if found is not None and len(specs) == 1 else [find_model_folder(spec) for spec in specs]
    request, logits = label_file(founds, input_path, options=options, ignore_labels=ignore_labels, reader_overrides=reader_overrides)
    return request.write(logits, output_path, founds[0][0])


def ensemble_members(model: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str | os.PathLike[str]]:
    """The folders ``model`` names: one, or the members of an ensemble (a list of folders)."""
    members = [model] if isinstance(model, str | os.PathLike) else list(model)
    if not members:
        raise UsageError("no model given", hint="pass --model FOLDER (repeat it for an ensemble)")
    if len({str(Path(m).resolve()) for m in members}) != len(members):
        raise UsageError("an ensemble names the same model twice", hint="name each fine-tuned folder once")
    return members


def check_ensemble(founds: Sequence[tuple[Path, TaskSettings]]) -> None:
    """Members of one ensemble answer the same question in the same terms: one task, the same labels in one order."""
    if len(founds) < 2:
        return
    first_folder, first = founds[0]
    if get_task(first.task).answers_questions:
        raise UsageError("an ensemble of question-answering models is not supported", path=first_folder,
                         hint="ensembles take NER and classification models; run qa with one model")
    for folder, settings in founds[1:]:
        if settings.task != first.task or list(settings.labels) != list(first.labels):
            raise UsageError(f"ensemble members differ: {first_folder} is {first.task} with labels {', '.join(first.labels)}",
                             path=folder, hint="an ensemble's members are fine-tuned on the same task and label set")


def label_file(
    founds: Sequence[tuple[Path, TaskSettings]],
    input_path: Path,
    *,
    options: LoadSettings = DEFAULT_LOAD,
    ignore_labels: bool = False,
    reader_overrides: dict[str, Any] | None = None,
) -> tuple[PredictionRequest, np.ndarray]:
    """The request (as the first member reads ``input_path``) and the logits of its output rows.

    One model: its pooled logits. An ensemble: the log of its members' mean probabilities (each member reads
    the file with its own tokenizers and pools its own views; the rows, words or examples, are the file's), so
    that the label of highest mean probability wins. Members are opened one at a time.
    """
    request, by_mode = label_file_by_mode(founds, input_path, options=options, ignore_labels=ignore_labels,
                                          reader_overrides=reader_overrides)
    return request, by_mode[request.mode]


def label_file_by_mode(
    models: Sequence[tuple[Path, TaskSettings]] | FinetunedModel,
    input_path: Path,
    *,
    options: LoadSettings = DEFAULT_LOAD,
    modes: Sequence[str] | None = None,
    ignore_labels: bool = False,
    reader_overrides: dict[str, Any] | None = None,
) -> tuple[PredictionRequest, dict[str, np.ndarray]]:
    """:func:`label_file` under each pooling mode of ``modes`` (None: ``options.pool``; ``()``: every mode the
    first model has), from one pass per tokenizer and member. ``models``: the folders found (an ensemble when several),
    or one model already open (a multitask run's task: ``predict`` and ``evaluate --task``)."""
    if isinstance(models, FinetunedModel):
        headline, wanted = _modes(options.pool, modes, models.tokenizers.has_domain, models.folder)
        return _label_opened(models, input_path, headline, wanted, ignore_labels, reader_overrides)
    founds = models
    check_ensemble(founds)
    # An ensemble's modes are those of its members together, and each member pools a mode the way it can (a plain
    # model's one view serves every mode): the answer never depends on the order the members are named in.
    any_domain = any(has_domain_tokenizer(folder) for folder, _ in founds)
    headline, wanted = _modes(options.pool, modes, any_domain, founds[0][0])
    request: PredictionRequest | None = None
    totals: dict[str, np.ndarray] = {}
    for folder, settings in founds:
        opened = open_finetuned(folder, settings, options)
        mine, logits = _label_opened(opened, input_path, headline, wanted, ignore_labels, reader_overrides)
        if len(founds) == 1:
            return mine, logits
        request = request or replace(mine, mode=headline)
        for mode in wanted:
            probabilities = softmax(np.asarray(logits[mode], dtype=np.float64))
            totals[mode] = probabilities if mode not in totals else totals[mode] + probabilities
        del opened
    assert request is not None and totals
    return request, {mode: np.log(np.maximum(total / len(founds), np.finfo(np.float64).tiny)) for mode, total in totals.items()}


def _modes(pool: str, modes: Sequence[str] | None, any_domain: bool, folder: Path) -> tuple[str, list[str]]:
    """The headline pooling mode and the modes wanted (``modes`` None: the headline; ``()``: every mode there is)."""
    headline = ensemble_mode(pool, any_domain, folder)
    return headline, [headline] if modes is None else [ensemble_mode(m, any_domain, folder) for m in modes or report_modes(any_domain)]


def _label_opened(opened: FinetunedModel, input_path: Path, headline: str, wanted: Sequence[str], ignore_labels: bool,
                  reader_overrides: dict[str, Any] | None) -> tuple[PredictionRequest, dict[str, np.ndarray]]:
    """``input_path`` as ``opened`` reads it, and its logits under each mode of ``wanted`` (a one-view model's one
    view serves every mode)."""
    own = {mode: mode if opened.tokenizers.has_domain else "general" for mode in wanted}
    mine = read_for_prediction(input_path, opened.settings, opened.tokenizers, opened.folder,
                               pool=headline if opened.tokenizers.has_domain else "general",
                               ignore_labels=ignore_labels, reader_overrides=reader_overrides)
    computed = opened.logits_by_mode(mine.units, mine.task_file.examples, sorted(set(own.values())))
    return mine, {mode: computed[own[mode]] for mode in wanted}


def has_domain_tokenizer(folder: Path) -> bool:
    """Whether a model folder has two tokenizers (its general one in ``general-tokenizer/``), without loading them."""
    return (Path(folder) / GENERAL_TOKENIZER_DIR).is_dir()


def ensemble_mode(pool: str, any_domain: bool, folder: Path) -> str:
    """The pooling mode ``--pool`` means for models of which ``any_domain`` says whether one has a domain tokenizer."""
    check_pool(pool)
    if pool == "domain" and not any_domain:
        raise UsageError("--pool domain needs a model with a domain tokenizer", path=folder, hint="use --pool general")
    return pool if any_domain else "general"


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


@dataclass
class PredictionRequest:
    """A file to label with a fine-tuned task: read, label-checked and tokenized into units."""

    task: Any
    settings: Any
    task_file: TaskFile
    units: list[Any]
    mode: str
    score: bool

    def write(self, logits: Any, output_path: Path, folder: Path) -> PredictResult:
        predictions = self.task.decode(self.task_file, argmax_labels(logits, self.settings.labels))
        with resource_errors(output_path.parent):
            write_predictions(self.task_file, predictions, output_path)
        metrics = self.task.score(self.task_file, predictions, self.settings) if self.score else None
        if metrics is not None:
            metrics["warnings"] = prediction_warnings(self.task_file.path.name, self.task_file.gold(), predictions)
        return PredictResult(output_path, len(self.task_file.examples), self.mode, metrics, folder)


def read_for_prediction(
    input_path: Path,
    settings: Any,
    tokenizers: Any,
    folder: Path,
    *,
    pool: str,
    ignore_labels: bool,
    reader_overrides: dict[str, Any] | None,
) -> PredictionRequest:
    """Read ``input_path`` with the training reader options (``reader_overrides`` changes some; None values
    are ignored); labels of a labelled file are checked against the trained set unless ``ignore_labels``."""
    task = get_labelling_task(settings.task)
    overrides = {k: v for k, v in (reader_overrides or {}).items() if v is not None}
    if overrides:
        settings = replace(settings, reader=replace(settings.reader_options, **overrides).as_config())
    task_file = task.read(input_path, settings, require_labels=False)
    score = task_file.labelled and not ignore_labels
    if score:
        try:
            check_known_labels(task_file, settings.labels)
        except DataError as exc:
            raise DataError(exc.message, path=exc.path, line=exc.line, hint="pass --ignore-labels to predict without scoring") from None
    elif task_file.labelled:
        task_file = _strip_labels(task_file)
    mode = pooling_mode(pool, tokenizers, folder)
    units, _ = task.units(task_file, settings, tokenizers)
    return PredictionRequest(task, settings, task_file, units, mode, score)


def _strip_labels(task_file: TaskFile) -> TaskFile:
    from greenadapt.data.task_files import NerSentence

    examples = [
        replace(e, labels=None) if isinstance(e, NerSentence) else replace(e, label=None) for e in task_file.examples
    ]
    return replace(task_file, examples=examples, labelled=False)
