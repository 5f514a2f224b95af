"""A fine-tuned model run by ONNX Runtime on the CPU, fp32 or quantized to int8 (``--runtime onnx``).

The model of a fine-tuned folder is exported once (torch's ONNX exporter, dynamic batch and length), optionally
quantized (int8 weights per output channel; each token's activations quantized at run time with its own scale, so a
sentence gets the same answer in any batch: :mod:`~greenadapt.inference.onnx_quantize`), and cached beside the
weights it was made from: in the folder's ``.greenadapt-cache/onnx/<key>/`` (a cache-directory tag marks it as
greenadapt's), or, when the folder cannot be written, in the user's cache
(``$XDG_CACHE_HOME/greenadapt/onnx/<key>/``). The key is the SHA-256 of the weights and config, the quantization and
this exporter's format: changed weights give another key, so a stale export is never used.

What runs it is :class:`OnnxModel`, which answers the calls the torch model answered (``model(**inputs).logits``),
so both views, their mean pooling, the inference batching and QA's windows are exactly the torch path's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from greenadapt.artifacts import kinds
from greenadapt.artifacts.files import CACHE_FOLDER, CACHE_TAG, is_greenadapt_cache, make_cache
from greenadapt.artifacts.model_weights import weights_digest  # (onnx_export and the serving bench take it from here)
from greenadapt.errors import UsageError

log = logging.getLogger(__name__)

RUNTIMES = ("auto", "torch", "onnx")  # auto: greenadapt.inference.default_runtime
QUANTIZATIONS = ("none", "int8")
# bump when the export changes: every cached file is made again (3: int8 per row; 4: one-sided after GELU; 5: a stage
# folder with a manifest, was export.json)
EXPORT_FORMAT = "greenadapt-onnx-5"
MODEL_FILE = "model.onnx"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
ONNX_EXTRA = "pip install 'greenadapt[onnx]'"


def require_onnxruntime() -> Any:
    """ONNX Runtime, or one line naming the extra that brings it."""
    try:
        import onnxruntime
    except ImportError:
        raise UsageError("--runtime onnx needs ONNX Runtime, which is not installed", hint=ONNX_EXTRA) from None
    return onnxruntime


def check_runtime(runtime: str, quantize: str, device: str) -> None:
    """The runtime's options, before any model is opened."""
    if runtime not in RUNTIMES:
        raise UsageError(f"unknown --runtime {runtime!r}", hint=f"choose from {', '.join(RUNTIMES)}")
    if quantize not in QUANTIZATIONS:
        raise UsageError(f"unknown --quantize {quantize!r}", hint=f"choose from {', '.join(QUANTIZATIONS)}")
    if quantize != "none" and runtime == "torch":
        raise UsageError(f"--quantize {quantize} is for --runtime onnx", hint="leave --runtime out, or give --runtime onnx")
    if runtime == "onnx" or quantize != "none":
        kind, colon, index = device.partition(":")
        if kind not in ("auto", "cpu") or (colon and not index.isdigit()):
            raise UsageError(f"--runtime onnx runs on the CPU, not --device {device}",
                             hint="leave --device out (or cpu), or use --runtime torch on a GPU")
        configured = os.environ.get("XDG_CACHE_HOME") or ""
        if configured and os.path.isabs(configured) and os.path.exists(configured) and not os.path.isdir(configured):
            # (checked before ONNX Runtime is imported: it writes there too, and warns in lines of its own)
            raise UsageError(f"$XDG_CACHE_HOME={configured} is not a folder", hint="point it at a folder, or unset it")
        require_onnxruntime()


@dataclass(frozen=True)
class ExportSource:
    """What an export is of: ``model``, the folder of its config.json (its vocabulary; its labels unless ``labels``
    says), made from the weights and config whose digest is ``weights``, cached beside ``folder``. A fine-tuned
    folder is all four (:meth:`of`); one task of a multitask run is its run's encoder and that task's adapters and
    head (:func:`greenadapt.inference.multitask.task_export_source`)."""

    folder: Path
    model: Path
    weights: str
    labels: int | None = None

    @classmethod
    def of(cls, folder: Path | ExportSource) -> ExportSource:
        return folder if isinstance(folder, ExportSource) else cls(folder, folder, weights_digest(folder))


class OnnxModel:
    """An ONNX Runtime session that answers as the torch model did: ``model(**inputs)`` has the same outputs
    (``.logits``, or ``.start_logits``/``.end_logits``), numpy arrays for numpy inputs and torch tensors for torch
    tensors, and ``.config`` is the model's (``source.model``'s).

    A batch is cut into ``threads`` slices run side by side, each by one thread: the layer norms, transposes and
    softmax between the int8 products parallelise poorly inside one run, so two slices on their own cores served the
    benchmark's sentences 1.25x faster than the whole batch on a session of two threads (bench/onnx_batching.py,
    docs/benchmarks.md "Serving on a CPU"). Rows never see each other, so a slice's outputs are the whole batch's
    rows, at int8 too (each token's activations have their own scale)."""

    training = False
    runs_any_shape = True  # nothing is compiled per input shape: batches need no padding to a few shapes

    def __init__(self, path: Path, source: ExportSource, *, threads: int | None = None) -> None:
        ort = require_onnxruntime()
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.path, self.folder, self.labels, self.threads = path, source.model, source.labels, max(1, threads or 1)
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        self._slices: Any = None  # the threads that run a batch's slices, started on the first batch of two rows or more

    def __call__(self, **inputs: Any) -> SimpleNamespace:
        """The outputs as the inputs came: numpy arrays for numpy arrays (greenadapt's own batches: no torch), else
        torch tensors (transformers' Pipeline, question answering)."""
        import numpy as np

        given_numpy = isinstance(inputs[self.inputs[0]], np.ndarray)
        feed = {name: inputs[name] if given_numpy else inputs[name].cpu().numpy() for name in self.inputs}
        rows = len(next(iter(feed.values())))
        parts = min(self.threads, rows)
        if parts <= 1:
            arrays = self.session.run(self.outputs, feed)
        else:
            if self._slices is None:
                from concurrent.futures import ThreadPoolExecutor

                self._slices = ThreadPoolExecutor(self.threads, thread_name_prefix="greenadapt-onnx")
            bounds = np.linspace(0, rows, parts + 1).astype(int)
            runs = [self._slices.submit(self.session.run, self.outputs, {name: array[a:b] for name, array in feed.items()})
                    for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
            sliced = [run.result() for run in runs]
            arrays = [np.concatenate(parts_of_one) for parts_of_one in zip(*sliced, strict=True)]
        if given_numpy:
            return SimpleNamespace(**dict(zip(self.outputs, arrays, strict=True)))
        import torch

        return SimpleNamespace(**{name: torch.from_numpy(array) for name, array in zip(self.outputs, arrays, strict=True)})

    @cached_property
    def config(self) -> Any:
        """The model's transformers config, read when asked (transformers' Pipeline asks): inference itself reads
        config.json alone, so answering imports no transformers (~1 CPU-s)."""
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(str(self.folder))

    @cached_property
    def _config_json(self) -> dict[str, Any]:
        """config.json as JSON: what greenadapt's own inference reads of the model (no transformers)."""
        from greenadapt.artifacts.pretrained import read_config

        return read_config(self.folder)

    @property
    def num_labels(self) -> int:
        """The model's labels, as transformers counts them (its id2label)."""
        return self.labels or len(self._config_json.get("id2label") or {}) or int(self._config_json.get("num_labels", 2))

    @property
    def device(self) -> Any:
        """The CPU, as a torch model says where it runs (transformers' Pipeline asks)."""
        import torch

        return torch.device("cpu")

    def eval(self) -> OnnxModel:
        return self

    def train(self, mode: bool = True) -> OnnxModel:
        return self

    def to(self, *args: Any, **kwargs: Any) -> OnnxModel:
        return self

    def get_input_embeddings(self) -> Any:
        return SimpleNamespace(num_embeddings=int(self._config_json["vocab_size"]))


def onnx_model(folder: Path | ExportSource, load: Any, *, quantize: str = "none") -> OnnxModel:
    """``folder``'s model as ONNX Runtime runs it: from the cache (the torch weights are then never loaded), or
    exported now from ``load()`` (the torch model). A G-MAP folder is refused: its fusion reads a second model."""
    from greenadapt.machine.devices import inference_threads

    refuse_gmap(folder.model if isinstance(folder, ExportSource) else folder)

    source = ExportSource.of(folder)
    return OnnxModel(ensure_export(source, quantize, load), source, threads=inference_threads())


def refuse_gmap(model: Path) -> None:
    """A G-MAP model is not run by ONNX Runtime: its fusion reads a second model's states (one line, before any hashing)."""
    from greenadapt.modeling.gmap import wiring as gmap

    if gmap.is_gmap_folder(model):
        raise UsageError("--runtime onnx does not run G-MAP models (their fusion reads a second model's states)", path=model,
                         hint="use --runtime torch")


def export_config(quantize: str, weights: str) -> dict[str, str]:
    """What an export is made from: this exporter's format, the quantization, the weights and config
    (:func:`weights_digest`). Its manifest's fingerprint and its name in the cache (:func:`cache_key`) are of this."""
    return {"format": EXPORT_FORMAT, "quantize": quantize, "weights": weights}


def cache_key(folder: Path, quantize: str, *, weights: str | None = None) -> str:
    """An export's name in the cache (``weights``: :func:`weights_digest`, where the caller has it)."""
    return _key(export_config(quantize, weights or weights_digest(folder)))


def _key(config: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:24]


def _user_cache() -> Path:
    """``$XDG_CACHE_HOME/greenadapt``; a relative ``$XDG_CACHE_HOME`` is ignored, as the XDG spec says (``~/.cache``)."""
    configured = os.environ.get("XDG_CACHE_HOME") or ""
    if configured and not os.path.isabs(configured):
        log.warning("XDG_CACHE_HOME=%s is not an absolute path, so it is ignored (the XDG rule): using ~/.cache", configured)
        configured = ""
    return Path(configured or Path.home() / ".cache") / "greenadapt"


def cache_root(folder: Path) -> Path:
    """The folder's own cache where it can be written, else the user's (a read-only folder, a shared model)."""
    own = folder / CACHE_FOLDER
    if os.access(folder, os.W_OK) and (not own.exists() or os.access(own, os.W_OK)):
        return own
    return _user_cache()


def ensure_export(folder: Path | ExportSource, quantize: str, load: Any) -> Path:
    """The ONNX file of ``folder``'s weights at ``quantize``: from its cache (:func:`cache_root`) when the export there
    is whole and verified, else exported now from ``load()`` (the torch model). An :class:`ExportSource` carries its
    weights' digest (hashed once for every format); a folder's is hashed here."""
    source = ExportSource.of(folder)
    config = export_config(quantize, source.weights)
    root = cache_root(source.folder)
    return find_export(source, config, root=root) or cached_export(source, config, load, root=root)


def _entry(root: Path, config: dict[str, str]) -> Path:
    return root / "onnx" / _key(config)


def _fits(source: ExportSource) -> Callable[[Path], str | None]:
    """The check of a cached export that its manifest cannot vouch for: a graph of ``source``'s model."""
    return lambda entry: graph_problem(entry / MODEL_FILE, source)


def find_export(source: ExportSource, config: dict[str, str], *, root: Path | None = None) -> Path | None:
    """The cached ONNX file of ``config`` (:func:`export_config`) in ``source.folder``'s cache, verified (a stage folder: each
    file's SHA-256 as its manifest recorded, and a graph that fits ``source``'s model); None if not made yet. A damaged
    or replaced export is made again (said once), or, where the cache cannot be written, refused in one line: a graph
    that merely loads is never served unchecked."""
    from greenadapt.artifacts.cache import entry_problem  # (here, not at import: `predict --help` reads this module's names)

    root = root or cache_root(source.folder)
    _check_cache_path(root)
    target = _entry(root, config)
    if not target.exists() and not target.is_symlink():
        return None
    problem = entry_problem(target, kinds.ONNX_EXPORT, config, _fits(source))
    if problem is None:
        log.info("ONNX model from the cache: %s", target)
        return target / MODEL_FILE
    if not os.access(root / "onnx", os.W_OK):
        from greenadapt.errors import ResourceError

        raise ResourceError(f"the cached ONNX export does not match what was written ({problem}) and its cache cannot be "
                            "written to make it again", path=target, hint=f"remove {target} (a cache: safe to delete)")
    log.warning("the cached ONNX export at %s does not match what was written (%s): making it again", target, problem)
    return None


def graph_problem(graph_file: Path, source: ExportSource) -> str | None:
    """Why an ONNX graph is not an export of ``source``'s model, or None: it must hold an embedding table of the
    model's vocabulary size (config.json's ``vocab_size``) and, for a model with labels, give one score per label."""
    import onnx

    from greenadapt.artifacts.files import read_own_text

    try:
        config = json.loads(read_own_text(source.model / "config.json", limit=16 << 20))
        graph = onnx.load(str(graph_file), load_external_data=False).graph
    except (OSError, ValueError, RecursionError) as exc:
        return f"its graph or the model's config.json cannot be read ({' '.join(str(exc).split())[:120]})"
    except Exception as exc:  # noqa: BLE001  (protobuf's DecodeError and its kin: a damaged graph, whatever its class)
        return f"its graph cannot be parsed ({type(exc).__name__})"
    vocabulary = config.get("vocab_size") if isinstance(config, dict) else None
    tables = {int(init.dims[0]) for init in graph.initializer if len(init.dims) == 2}
    if isinstance(vocabulary, int) and vocabulary not in tables:
        return f"its graph has no embedding table of {vocabulary} rows (the model's vocabulary): another model's graph"
    id2label = config.get("id2label") if isinstance(config, dict) else None
    labels = source.labels or (len(id2label) if isinstance(id2label, dict) else 0)
    dims = graph.output[0].type.tensor_type.shape.dim if graph.output else []
    scores = dims[-1].dim_value if dims else 0
    if labels > 1 and scores and scores != labels:
        return f"its graph scores {scores} labels, the model has {labels}: another model's graph"
    return None


def _check_cache_path(root: Path) -> None:
    """The cache is written only through folders greenadapt made: a link at its root, at ``onnx/`` or at the tag, or a
    folder of the user's at the cache's name, is refused in one line (never adopted, written through or removed)."""
    from greenadapt.errors import ResourceError

    for path in (root, root / "onnx", root / CACHE_TAG):
        if path.is_symlink():
            raise ResourceError("is a symbolic link where greenadapt keeps its ONNX cache; the cache never writes through a link",
                                path=path, hint="remove the link (greenadapt makes the folder itself)")
    for path in (root, root / "onnx"):
        if path.exists() and not path.is_dir():
            raise ResourceError("is not a folder, where greenadapt keeps its ONNX cache", path=path, hint="move it away")
    if root.name == CACHE_FOLDER and root.exists() and not is_greenadapt_cache(root):
        raise ResourceError(f"is a folder greenadapt did not make (it has no {CACHE_TAG} of greenadapt's), at the name of its "
                            "ONNX cache: it is never adopted", path=root, hint="rename or move that folder")


def cached_export(source: ExportSource, config: dict[str, str], load: Any, *, root: Path | None = None) -> Path:
    """The ONNX file of ``source``'s model (``load()``) as ``config`` says: exported, quantized and put in the cache as a
    stage (:class:`~greenadapt.artifacts.cache.CacheEntryRun`: under a lock, so two processes make it once; written
    in a temporary folder with its manifest and renamed into place; a killed export's temporary removed by the next)."""
    from greenadapt.artifacts.cache import CacheEntryRun
    from greenadapt.artifacts.stage import sweep_stale_temporaries

    root = root or cache_root(source.folder)
    _check_cache_path(root)
    make_cache(root)
    (root / "onnx").mkdir(exist_ok=True)
    _check_cache_path(root)  # (made now: nothing was planted between the check and the folders)
    sweep_stale_temporaries(root / "onnx")  # other keys' dead exports too (a key's own: by its stage)
    quantize = config["quantize"]
    int8 = " (quantized to int8)" if quantize == "int8" else ""
    with CacheEntryRun(kinds.ONNX_EXPORT, _entry(root, config), config, check=_fits(source), libraries=("onnx", "onnxruntime")) as entry:
        if entry.skipped:  # another process made it while this one waited
            return entry.out / MODEL_FILE
        log.info("exporting %s to ONNX%s, once (then cached in %s)", source.folder, int8, root)
        export(load(), entry.tmp / MODEL_FILE, quantize=quantize)
        entry.commit(extra={"source": str(source.folder)})
    log.info("ONNX model exported%s: %s", int8, entry.out)
    return entry.out / MODEL_FILE


def export(model: Any, path: Path, *, quantize: str = "none") -> None:
    """``model`` to ONNX at ``path`` (dynamic batch and sequence length; weights in a side file past 2 GB), then, for
    ``int8``, quantized: int8 weights per output channel, each token's activations quantized on their own as they come
    (:mod:`~greenadapt.inference.onnx_quantize`), so a sentence's answer never depends on its batch."""
    import inspect

    import torch

    model = model.eval()
    taken = inspect.signature(model.forward).parameters
    names = [name for name in INPUTS if name in taken]  # (a model without segment ids takes none)
    example = {name: torch.zeros(2, 8, dtype=torch.long) if name == "token_type_ids" else torch.ones(2, 8, dtype=torch.long)
               for name in names}
    with torch.no_grad():
        outputs = model(**example)
    output_names = [key for key in ("logits", "start_logits", "end_logits") if getattr(outputs, key, None) is not None]
    axes: dict[str, dict[int, str]] = {name: {0: "batch", 1: "sequence"} for name in names}
    for name in output_names:  # token logits [B, T, L] and answer logits [B, T] follow the length; a text's [B, L] does not
        token_level = getattr(outputs, name).dim() == 3 or name != "logits"
        axes[name] = {0: "batch", 1: "sequence"} if token_level else {0: "batch"}
    fp32 = path if quantize == "none" else path.parent / "fp32" / path.name
    fp32.parent.mkdir(parents=True, exist_ok=True)
    with _quiet_export(), _eager_attention(model):
        torch.onnx.export(_Outputs(model, names, output_names), tuple(example.values()), str(fp32), input_names=names,
                          output_names=output_names, dynamic_axes=axes, opset_version=17, dynamo=False)
    if quantize == "int8":
        from greenadapt.inference.onnx_quantize import quantize_per_row

        large = sum(p.stat().st_size for p in fp32.parent.iterdir()) > (1 << 31) - (64 << 20)
        with _quiet_export():
            quantize_per_row(fp32, path, large=large)
        shutil.rmtree(fp32.parent)


class _Outputs:
    """The model with ``inputs`` in that order and its named ``outputs`` as a tuple: what the exporter traces."""

    def __new__(cls, model: Any, inputs: list[str], outputs: list[str]) -> Any:
        import torch

        class Named(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *tensors: Any) -> tuple[Any, ...]:
                out = self.model(**dict(zip(inputs, tensors, strict=True)))
                return tuple(getattr(out, name) for name in outputs)

        return Named().eval()


@contextlib.contextmanager
def _eager_attention(model: Any) -> Any:
    """The model traced with its plain (eager) attention: torch's fused attention is traced into a mask of
    ``IsNaN``/``Where`` nodes that took a sixth of ONNX Runtime's time; the plain form runs 1.18x faster at int8 here
    (bench/bench_serving.py, docs/benchmarks.md) and gives the same logits. The switch is the model's, or that of the
    transformers model inside a wrapper (a multitask task's encoder)."""
    owner = next((module for module in model.modules() if hasattr(module, "set_attn_implementation")), None)
    before = getattr(getattr(owner, "config", None), "_attn_implementation", None)
    if owner is None or before is None or before == "eager":
        yield
        return
    owner.set_attn_implementation("eager")
    try:
        yield
    finally:
        owner.set_attn_implementation(before)


@contextlib.contextmanager
def _quiet_export() -> Any:
    """The exporter's tracer warnings (control flow it cannot see into) and the quantizer's advice, which it logs on
    the root logger, are the libraries' notes, not the user's: into greenadapt's log at DEBUG."""
    import warnings

    class Libraries(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if "onnxruntime" in record.pathname or "torch" in record.pathname:
                log.debug("%s", record.getMessage())
                return False
            return True

    quiet = Libraries()
    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.removeFilter(quiet)
