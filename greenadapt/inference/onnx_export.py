"""``greenadapt export --onnx``: a fine-tuned NER or classification folder as a self-contained folder for serving.

The folder holds what runs the model without greenadapt or torch: the ONNX file(s) (fp32 and/or int8, from the
model folder's cache: :mod:`greenadapt.inference.onnx_runtime`), both views' ``tokenizer.json``, the labels, the
pooling recipe written down (``pooling.json``: which tokenizers, which piece of a word is read, how the views are
pooled, the special ids and the input length), a model card, and ``serve_onnx.py``: the recipe in 200 lines of
numpy, onnxruntime and tokenizers that gives the entities ``greenadapt predict`` gives.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.artifacts.stage import StageOutcome, StageRun, resource_errors
from greenadapt.errors import UsageError
from greenadapt.inference.settings import TaskChoiceSettings
from greenadapt.options import INPUT_OUTPUT, MODEL, PERFORMANCE, REQUIRED, option

if TYPE_CHECKING:
    from collections.abc import Callable

    from greenadapt.inference.onnx_runtime import ExportSource
    from greenadapt.options import Run

log = logging.getLogger(__name__)

KIND = "onnx-export"
FORMATS = ("both", "fp32", "int8")
MODEL_FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx"}
SCRIPT = "serve_onnx.py"
GENERAL_VIEW = "general/tokenizer.json"


@dataclass(frozen=True, kw_only=True)
class ExportSettings(TaskChoiceSettings):
    """``greenadapt export``: a fine-tuned folder as a self-contained ONNX folder to serve without greenadapt."""

    command = "export"
    positional = ("model",)
    run_options = ("out", "force", "wait")
    out_required = True
    run_help = {"out": "The folder to write (the ONNX files, both tokenizers, labels, pooling.json, serve_onnx.py, README.md)."}

    model: str = option(REQUIRED, "--model", "-m", panel=MODEL,
                        help="A `greenadapt finetune` run folder (NER or classification), or a `greenadapt multitask` run with --task.")
    onnx: bool = option(False, "--onnx", panel=INPUT_OUTPUT, help="Export to ONNX (the one format export writes today; required).")
    quantize: str = option("both", "--quantize", panel=PERFORMANCE, choices=FORMATS,
                           help="Which ONNX files: fp32, int8 (int8 weights; each token's activations quantized on their own) or both.")

    def check(self) -> None:
        if not self.onnx:
            raise UsageError("export writes ONNX: pass --onnx", hint="greenadapt export --onnx --model RUN --out DIR")


def run_export(settings: ExportSettings, run: Run) -> StageOutcome:
    """``greenadapt export --onnx``: see the module's docstring."""
    from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR, load_tokenizers
    from greenadapt.inference.onnx_runtime import cache_key, require_onnxruntime
    from greenadapt.tasks import get_task

    require_onnxruntime()
    source, load, task_settings, name = _exported_model(settings)  # the weights hashed once, for every format
    if get_task(task_settings.task).answers_questions:
        raise UsageError("export --onnx takes NER and classification folders (question answering: --runtime onnx of `greenadapt qa`)",
                         path=source.folder, hint="pass a finetune run of --task ner or classify")
    assert run.out is not None
    tokenizers = load_tokenizers(source.model)
    formats = ("fp32", "int8") if settings.quantize == "both" else (settings.quantize,)
    keys = {f: cache_key(source.folder, "none" if f == "fp32" else "int8", weights=source.weights) for f in formats}
    config = {"model": str(source.folder), "weights": keys}
    kind = "finetune" if settings.task is None else "multitask"
    with StageRun(KIND, run.out, config, [{"path": str(source.folder), "kind": kind}], force=run.force, wait=run.wait) as stage:
        if stage.skipped:
            assert stage.manifest is not None
            return StageOutcome(stage.out, stage.manifest, True, stage.skip_reason)
        with resource_errors(stage.tmp):
            files = _write(source, load, task_settings, tokenizers, formats, stage.tmp, GENERAL_TOKENIZER_DIR, name)
        manifest = stage.commit(stats={"task": task_settings.task, "formats": list(formats), "views": 2 if tokenizers.has_domain else 1,
                                       "files": files, **({"task_of_the_run": settings.task} if settings.task else {})})
    log.info("export: %s -> %s", source.folder, stage.out)
    return StageOutcome(stage.out, manifest, False)


def _exported_model(settings: ExportSettings) -> tuple[ExportSource, Callable[[], Any], Any, str]:
    """What ``--model`` (and ``--task``) name, checked: the graph's source, its torch model's loader (called only when
    the graph is not cached yet), the task's settings and the card's name. A fine-tuned folder, or one task of a
    multitask run (``--task``, as ``predict`` takes it)."""
    from greenadapt.inference import multitask
    from greenadapt.inference.labelling import find_model_folder, load_finetuned_weights
    from greenadapt.inference.onnx_runtime import ExportSource
    from greenadapt.tasks import get_task

    task = settings.task
    if task is not None or multitask.is_multitask(settings.model):
        path = Path(settings.model).resolve()  # recorded whole: the same export from any working folder
        _refuse_gmap(path / multitask.BASE_DIR)
        task_settings = multitask.task_settings(path, task, checksums=True)  # (a name the run has not: one line naming its tasks)
        assert task is not None
        return (multitask.task_export_source(path, task, task_settings), lambda: multitask.task_graph_model(path, task), task_settings,
                f"{path.name}, task {task}")
    folder, task_settings = find_model_folder(settings.model)
    folder = folder.resolve()
    _refuse_gmap(folder)
    return ExportSource.of(folder), lambda: load_finetuned_weights(folder, get_task(task_settings.task)), task_settings, folder.name


def _refuse_gmap(model: Path) -> None:
    """Before the weights are hashed: a G-MAP graph would be the domain model without its fusion, never half a model."""
    from greenadapt.modeling.gmap import wiring as gmap

    if gmap.is_gmap_folder(model):
        raise UsageError("export --onnx does not export G-MAP runs (their fusion reads a second model's states)", path=model,
                         hint="serve it with `greenadapt predict` (torch)")


def _write(source: ExportSource, load: Callable[[], Any], task_settings: Any, tokenizers: Any, formats: tuple[str, ...], dest: Path,
           general_dir: str, name: str) -> list[str]:
    from greenadapt.inference.onnx_runtime import ensure_export

    loaded: list[Any] = []

    def model() -> Any:  # loaded once, and only if an export is not in the cache
        if not loaded:
            loaded.append(load())
        return loaded[0]

    folder = source.model  # the tokenizers' folder
    for fmt in formats:
        made = ensure_export(source, "none" if fmt == "fp32" else "int8", model)
        shutil.copyfile(made, dest / MODEL_FILES[fmt])
        for side in made.parent.glob(f"{made.name}*.data"):  # weights past 2 GB live beside the graph
            shutil.copyfile(side, dest / side.name)
    views = ["tokenizer.json"]
    if tokenizers.has_domain:
        (dest / "general").mkdir()
        shutil.copyfile(folder / general_dir / "tokenizer.json", dest / GENERAL_VIEW)
        views = [GENERAL_VIEW, "tokenizer.json"]
    shutil.copyfile(folder / "tokenizer.json", dest / "tokenizer.json")
    (dest / "labels.json").write_text(json.dumps({"task": task_settings.task, "labels": list(task_settings.labels)}, indent=2) + "\n")
    recipe = {
        "task": task_settings.task,
        "views": views,
        "words": views[0],  # the general tokenizer's pre-tokenizer makes the model's words from raw text
        "rows": "NER: the logits of each word's first piece; classification: of the first position ([CLS])",
        "pool": "mean of the views' logits (each word's, or each text's), then a softmax" if len(views) == 2 else "one view",
        "max_length": task_settings.max_length,
        "cls_id": tokenizers.cls_id, "sep_id": tokenizers.sep_id, "pad_id": tokenizers.pad_id, "unk_id": tokenizers.unk_id,
        "models": {fmt: MODEL_FILES[fmt] for fmt in formats},
        "inputs": ["input_ids", "attention_mask", "token_type_ids"],
    }
    (dest / "pooling.json").write_text(json.dumps(recipe, indent=2) + "\n")
    if task_settings.task == "ner":  # the script serves NER; a classification export is served by predict, or by the card's recipe
        (dest / SCRIPT).write_text(standalone_script(), encoding="utf-8")
    (dest / "README.md").write_text(_card(name, task_settings, views, formats), encoding="utf-8")
    return sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())


# What the export puts into serve_onnx.py's template: placeholder -> (module, block), the code between the module's
# "# -- <block>:" and "# -- end of <block>" markers, so that the served model cuts sentences and reads entities with
# greenadapt's own code, not a copy of it.
SHARED_BLOCKS = {"# @sentences@": ("greenadapt.corpus.words", "sentences"), "# @chunks@": ("greenadapt.data.metrics", "chunks"),
                 "# @stalls@": ("greenadapt.inference.windows", "stalls")}


def standalone_script() -> str:
    """``serve_onnx.py`` as it is written into an export: its template with greenadapt's sentence splitter and entity
    reader put in (:data:`SHARED_BLOCKS`), so that it gives predict's entities without greenadapt."""
    import importlib
    from importlib.resources import files

    script = (files("greenadapt.inference.standalone") / SCRIPT).read_text(encoding="utf-8")
    for placeholder, (module, block) in SHARED_BLOCKS.items():
        source = Path(str(importlib.import_module(module).__file__)).read_text(encoding="utf-8")
        body = source[source.index(f"# -- {block}:"):source.index(f"# -- end of {block}")]
        script = script.replace(placeholder, body.rstrip() + "\n")
    return script


def _card(name: str, task_settings: Any, views: list[str], formats: tuple[str, ...]) -> str:
    both = len(views) == 2
    int8_line = ("int8 (int8 weights per channel; each token's activations quantized with its own scale, so an answer never depends on the "
                 "batch)")
    model_lines = "\n".join(f"- `{MODEL_FILES[f]}`: {'fp32' if f == 'fp32' else int8_line}" for f in formats)
    int8 = " --int8" if formats == ("int8",) else ""
    reading = (f"It reads text through two tokenizers (views) and averages their predictions: {views[0]} (the model's own) and "
               f"{views[1]} (the domain tokenizer, which keeps the domain words whole)."
               if both else "It reads text through one tokenizer.")
    return f"""# {name}, exported for serving (ONNX)

A {task_settings.task} model fine-tuned with greenadapt (run `{name}`), exported with `greenadapt export --onnx`.
{reading}

{model_lines}
- `{"`, `".join(views)}`: the tokenizers (`tokenizers` loads them in Python, Rust, JavaScript and Java bindings)
- `labels.json`: the labels, by output index
- `pooling.json`: how a prediction is made: which tokenizers, which rows, how they are pooled, special ids, input length
{_usage(task_settings, int8)}
"""


def _usage(task_settings: Any, int8: str) -> str:
    """The card's way to run it: serve_onnx.py for NER; a classification export is run by greenadapt predict."""
    if task_settings.task != "ner":
        return ("No `serve_onnx.py`: it serves NER. Run this classification model with `greenadapt predict --runtime onnx`, or feed\n"
                "the ONNX file the first view's ids and read the first position's logits (pooling.json). Labels: "
                + ", ".join(task_settings.labels) + ".\n")
    return f"""- `serve_onnx.py`: that recipe for NER, with onnxruntime, tokenizers and numpy alone (no greenadapt, no torch)

```bash
pip install onnxruntime tokenizers numpy
echo "Patients with tachycardia were treated." | python serve_onnx.py .{int8} > entities.jsonl
```

Each line of `entities.jsonl` is what `greenadapt predict` writes for that line: the entities with character
offsets, labels and scores. Labels: {", ".join(task_settings.labels)}. Inputs longer than {task_settings.max_length} pieces
are read in windows, as greenadapt does.
"""
