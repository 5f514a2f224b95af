"""One task of a multitask run: loading it (:func:`load_task`) and predicting with it (``predict --task``)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.inference.settings import DEFAULT_LOAD, LoadSettings
from greenadapt.artifacts import kinds
from greenadapt.artifacts.manifest import load_stage, read_manifest
from greenadapt.artifacts.model_folder import TokenizerPair, load_tokenizers
from greenadapt.errors import UsageError
from greenadapt.machine.devices import pick_device
from greenadapt.modeling.pals.config import BASE_DIR, TASKS_DIR
from greenadapt.tasks import TASK_FILE, TaskSettings
from greenadapt.compute.distributed import DistContext

if TYPE_CHECKING:
    from greenadapt.inference.onnx_runtime import ExportSource


@dataclass
class LoadedTask:
    """One task of a multitask run: a model called like a transformers model, its settings and tokenizers."""

    name: str
    model: Any  # greenadapt.modeling.pals.model.TaskModel
    settings: TaskSettings
    tokenizers: TokenizerPair
    folder: Path
    memory: tuple[Any, int] | None = None  # G-MAP: (the general model's own tokenizer or None for T_LM, its input limit)


def is_multitask(folder: str | os.PathLike[str]) -> bool:
    manifest = read_manifest(Path(folder)) if Path(folder).is_dir() else None
    return manifest is not None and manifest.get("kind") == kinds.MULTITASK


def multitask_run(members: Sequence[str | os.PathLike[str]], task: str | None) -> str | os.PathLike[str] | None:
    """The multitask run folder ``members`` names (with ``task``, or a folder that is one), or None for fine-tuned
    folders; several folders with a multitask run among them are refused (no ensemble of multitask runs)."""
    if task is None and not any(is_multitask(member) for member in members):
        return None
    if len(members) > 1:
        raise UsageError("an ensemble of multitask runs is not supported", hint="pass one multitask run with --task")
    return members[0]


def task_settings(folder: str | os.PathLike[str], name: str | None, *, checksums: bool = False) -> TaskSettings:
    """The settings of task ``name`` of a ``greenadapt multitask`` run folder, read without its weights: what its
    input is read as. A folder that is not a multitask run, or a name it has not, is one line naming the choices.
    ``checksums``: verify every file of the run too (:func:`load_task`, which reads the weights, does it once)."""
    path = Path(folder)
    if not is_multitask(path):
        raise UsageError("--task names a task of a multitask run, but this is not one", path=path,
                         hint="leave out --task for a `greenadapt finetune` model")
    names = list(load_stage(path, kinds.MULTITASK, checksums=checksums).stats.get("tasks", []))
    if name is None:
        raise UsageError("this is a multitask run: name the task to use", path=path,
                         hint=f"pass --task, one of: {', '.join(names)}")
    if name not in names:
        raise UsageError(f"no task {name!r} in this multitask run", path=path, hint=f"--task one of: {', '.join(names)}")
    task_json = path / TASKS_DIR / name / TASK_FILE
    try:
        document = json.loads(task_json.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        from greenadapt.errors import StageError

        raise StageError(f"unreadable {TASK_FILE} of task {name!r}: {exc}", path=path / TASKS_DIR / name) from None
    return TaskSettings.from_json(document, task_json)


def load_task(folder: str | os.PathLike[str], name: str | None, *, device: Any = "cpu", general_model: str | None = None) -> LoadedTask:
    """Task ``name`` of a ``greenadapt multitask`` run folder: the shared encoder with only that task's PALs and head
    (the name is checked before any weight is read: None or one the run has not is one line naming its tasks)."""
    path = Path(folder)
    settings = task_settings(path, name, checksums=True)
    assert name is not None  # task_settings refuses a missing name
    model, memory = _task_model(path, name, device, general_model)
    return LoadedTask(name, model, settings, load_tokenizers(path / BASE_DIR, inference=True), path, memory)


def _task_model(path: Path, name: str, device: Any, general_model: str | None) -> tuple[Any, tuple[Any, int] | None]:
    """The task's model of a verified run, and G-MAP's memory source (None without G-MAP)."""
    from greenadapt.artifacts.pretrained import quiet_transformers
    from greenadapt.modeling.pals.model import MultiTaskModel

    memory = None
    with quiet_transformers():
        from greenadapt.modeling.gmap.wiring import is_gmap_folder, load_fused

        if is_gmap_folder(path / BASE_DIR):
            fusion, general_tokenizer, general_length = load_fused(path / BASE_DIR, general_model=general_model)
            multi = MultiTaskModel.load(path, tasks=[name], base=fusion.domain)
            multi.attach_fusion(fusion)
            multi.to(device)
            memory = (general_tokenizer, general_length)
        else:
            _refuse_general_model(path, general_model)
            multi = MultiTaskModel.load(path, tasks=[name], device=device)
    return multi.task_view(name), memory


def _refuse_general_model(path: Path, general_model: str | None) -> None:
    if general_model is not None:
        raise UsageError("--general-model applies to G-MAP models; this multitask run has no G-MAP", path=path)


def predict_task(
    folder: str | os.PathLike[str],
    input_path: Path,
    output_path: Path,
    *,
    task: str | None,
    options: LoadSettings = DEFAULT_LOAD,
    ignore_labels: bool = False,
    reader_overrides: dict[str, Any] | None = None,
    force: bool = False,
) -> Any:
    """``greenadapt predict --model RUN --task NAME``: label (and score) a file with one task of a multitask run."""
    from greenadapt.artifacts.destination import check_prediction_output
    from greenadapt.inference.labelling import label_file_by_mode

    options.check()
    check_prediction_output(output_path, force=force, model=folder, input_path=input_path)
    opened = open_task_model(folder, task, options)
    request, logits = label_file_by_mode(opened, input_path, options=options, ignore_labels=ignore_labels,
                                           reader_overrides=reader_overrides)
    return request.write(logits[request.mode], output_path, opened.folder)


def open_task(folder: str | os.PathLike[str], name: str | None, options: LoadSettings = DEFAULT_LOAD) -> Any:
    """Task ``name`` of a multitask run as the object ``greenadapt.load`` gives for a fine-tuned folder of its kind
    (:class:`~greenadapt.inference.predictor.NerModel` or ``ClassifierModel``): raw text in, entities or labels out."""
    from greenadapt.inference.predictor import ClassifierModel, NerModel
    from greenadapt.tasks import get_task

    options.configure_process()
    opened = open_task_model(folder, name, options)
    return (NerModel if get_task(opened.settings.task).finds_entities else ClassifierModel)(opened, options)


def open_task_model(folder: str | os.PathLike[str], name: str | None, options: LoadSettings = DEFAULT_LOAD) -> Any:
    """Task ``name`` of a multitask run as a fine-tuned model opened for inference
    (:class:`~greenadapt.inference.labelling.FinetunedModel`), after its options and name are checked. ``--runtime
    onnx`` (or ``auto``, where it picks ONNX Runtime): the task's own graph, exported on first use (see
    :func:`task_export_source`)."""
    from greenadapt.inference.default_runtime import chosen_runtime
    from greenadapt.inference.labelling import FinetunedModel
    from greenadapt.inference.predictor import refuse_qa_options
    from greenadapt.modeling.gmap.wiring import is_gmap_folder

    refuse_qa_options(options, "a multitask run")
    path = Path(folder)
    fused = is_gmap_folder(path / BASE_DIR)
    if chosen_runtime(options.runtime, options.quantize, options.device, precision=options.precision, exportable=not fused) == "onnx":
        return _open_task_onnx(path, name, options)
    ctx = DistContext(device=pick_device(options.device))
    loaded = load_task(folder, name, device=ctx.device, general_model=options.general_model)
    return FinetunedModel(loaded.folder, loaded.settings, loaded.tokenizers, loaded.model, ctx, loaded.memory, options)


def _open_task_onnx(path: Path, name: str | None, options: LoadSettings) -> Any:
    """Task ``name`` run by ONNX Runtime on the CPU (a G-MAP run is refused, as a G-MAP folder is)."""
    from greenadapt.inference.labelling import FinetunedModel
    from greenadapt.inference.onnx_runtime import onnx_model, refuse_gmap

    refuse_gmap(path / BASE_DIR)  # before the run's files are hashed
    settings = task_settings(path, name, checksums=True)
    assert name is not None  # task_settings refuses a missing name
    _refuse_general_model(path, options.general_model)
    model = onnx_model(task_export_source(path, name, settings), lambda: task_graph_model(path, name), quantize=options.quantize)
    # device None: batches stay numpy arrays, which the ONNX model takes and gives back (no torch)
    return FinetunedModel(path, settings, load_tokenizers(path / BASE_DIR, inference=True), model, DistContext(device=None), run=options)


def task_graph_model(path: Path, name: str) -> Any:
    """The torch model a task's graph is traced from (only when it is not in the cache yet)."""
    return _task_model(path, name, pick_device("cpu"), None)[0]


def task_export_source(path: Path, name: str, settings: TaskSettings) -> ExportSource:
    """Task ``name``'s graph as an ONNX export (:class:`~greenadapt.inference.onnx_runtime.ExportSource`): the run's
    encoder (its config.json gives the vocabulary) with the task's adapters and head (its labels), made from the
    encoder's weights, the task's and the run's PALs config; cached in the run folder, each task under its own key."""
    import hashlib

    from greenadapt.artifacts.files import sha256_file
    from greenadapt.artifacts.model_weights import weights_digest
    from greenadapt.inference.onnx_runtime import ExportSource
    from greenadapt.modeling.pals.config import CONFIG_FILE

    parts = [f"task {name}", weights_digest(path / BASE_DIR), weights_digest(path / TASKS_DIR / name), sha256_file(path / CONFIG_FILE)]
    return ExportSource(path, path / BASE_DIR, hashlib.sha256("\n".join(parts).encode()).hexdigest(), labels=len(settings.labels))
