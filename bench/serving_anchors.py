"""The CPU int8 runtimes a user would pick instead of greenadapt's, run inside greenadapt's own predict and evaluate.

Two anchors, each converted and quantized by script (never by hand), once, into ``--store`` (cached by the run's
weights digest):

- ``ctranslate2-int8``: CTranslate2's converter on the run's folder (its BERT encoder), ``compute_type="int8"``
  (weights int8, activations quantized per row at run time); the token classifier, a 384 x labels product, in numpy.
- ``openvino-int8``: OpenVINO's converter on greenadapt's own fp32 ONNX export, then NNCF's post-training static
  int8 (``ModelType.TRANSFORMER``: its SmoothQuant and bias correction) calibrated on the run's training sentences,
  each read in every view the run has (the views greenadapt feeds it).

The anchor stands where ONNX Runtime stands (``model(**inputs).logits``), so tokenizing, both views and their mean
pooling, batching and entity reading are greenadapt's in every arm: the bench compares runtimes, nothing else. A
batch is cut into one slice per core, each run by its own thread, as greenadapt's ONNX Runtime session does (each
anchor was measured faster this way than one call of two threads: docs/benchmarks.md).

    python bench/serving_anchors.py openvino-int8 --store STORE -- predict -m RUN sentences.txt -o out.jsonl
    python bench/serving_anchors.py ctranslate2-int8 --store STORE -- evaluate -m RUN test.tsv --json

``pip install ctranslate2 openvino nncf`` brings both (beside greenadapt's torch and transformers, unchanged).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from greenadapt.inference.onnx_runtime import OnnxModel  # noqa: E402

ANCHORS = {"ctranslate2-int8": ("ctranslate2",), "openvino-int8": ("openvino", "nncf")}  # anchor: the modules it needs
CALIBRATION_SENTENCES = 300  # NNCF's default subset size


def installed(anchor: str) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ANCHORS[anchor])


class SlicedModel(OnnxModel):
    """Answers ``model(**inputs)`` as greenadapt's OnnxModel does (whose eval/train/to it keeps): the batch cut into one
    slice per thread, each slice's logits from :meth:`logits_of`."""

    def __init__(self, config: Any, threads: int) -> None:  # (no ONNX Runtime session: the anchor is the runtime)
        self.config, self.threads = config, max(1, threads)
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="anchor") if self.threads > 1 else None

    def logits_of(self, worker: int, feed: dict[str, Any]) -> Any:
        raise NotImplementedError

    def __call__(self, **inputs: Any) -> SimpleNamespace:
        import numpy as np
        import torch

        feed = {name: tensor.cpu().numpy() for name, tensor in inputs.items() if tensor is not None}
        rows = len(feed["input_ids"])
        parts = min(self.threads, rows)
        if parts <= 1 or self._pool is None:
            logits = self.logits_of(0, feed)
        else:
            bounds = np.linspace(0, rows, parts + 1).astype(int)
            runs = [self._pool.submit(self.logits_of, worker, {name: array[a:b] for name, array in feed.items()})
                    for worker, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))]
            logits = np.concatenate([run.result() for run in runs])
        return SimpleNamespace(logits=torch.from_numpy(np.ascontiguousarray(logits, dtype=np.float32)))


class CTranslate2Tagger(SlicedModel):
    """CTranslate2's int8 BERT encoder, then the run's token classifier in numpy."""

    def __init__(self, folder: Path, store: Path, config: Any, threads: int) -> None:
        import ctranslate2
        from safetensors.numpy import load_file

        super().__init__(config, threads)
        converted = store / "ctranslate2-int8"
        if not converted.is_dir():
            from ctranslate2.converters import TransformersConverter

            with made_whole(converted) as tmp:
                TransformersConverter(str(folder)).convert(str(tmp), quantization="int8", force=True)
        self.encoder = ctranslate2.Encoder(str(converted), device="cpu", compute_type="int8", intra_threads=1, inter_threads=self.threads)
        weights = load_file(str(folder / "model.safetensors"))
        self.weight, self.bias = weights["classifier.weight"].T.copy(), weights["classifier.bias"]

    def logits_of(self, worker: int, feed: dict[str, Any]) -> Any:
        import ctranslate2
        import numpy as np

        lengths = feed["attention_mask"].sum(axis=1).astype(np.int32)
        ids = ctranslate2.StorageView.from_array(np.ascontiguousarray(feed["input_ids"], dtype=np.int32))
        types = feed.get("token_type_ids")
        output = self.encoder.forward_batch(ids, ctranslate2.StorageView.from_array(lengths),
                                            token_type_ids=None if types is None else types.tolist())
        return np.asarray(output.last_hidden_state) @ self.weight + self.bias


class OpenVinoTagger(SlicedModel):
    """OpenVINO's CPU plugin on NNCF's static int8 form of greenadapt's fp32 ONNX export."""

    def __init__(self, folder: Path, store: Path, config: Any, threads: int, precision: str | None = None) -> None:
        import openvino as ov

        super().__init__(config, threads)
        quantized = store / "openvino-int8" / "model.xml"
        if not quantized.parent.is_dir():
            with made_whole(quantized.parent) as tmp:
                quantize_openvino(folder, tmp / quantized.name, calibration_samples(folder))
        core = ov.Core()
        # throughput streams, one thread each: the slices run side by side, as greenadapt's ONNX Runtime slices do
        settings = {"NUM_STREAMS": str(self.threads), "INFERENCE_NUM_THREADS": str(self.threads)}
        if precision is not None:  # what it does not quantize: bf16 by default where the CPU has it
            settings["INFERENCE_PRECISION_HINT"] = precision
        self.compiled = core.compile_model(str(quantized), "CPU", settings)
        self.requests = [self.compiled.create_infer_request() for _ in range(self.threads)]
        self.names = [port.any_name for port in self.compiled.inputs]

    def logits_of(self, worker: int, feed: dict[str, Any]) -> Any:
        request = self.requests[worker]
        request.infer({name: feed[name] for name in self.names})
        return request.get_output_tensor(0).data.copy()


@contextlib.contextmanager
def made_whole(target: Path) -> Iterator[Path]:
    """A temporary folder beside ``target``, renamed to it once its block has written it whole (a killed conversion
    leaves no half of one where the next run would take it)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def quantize_openvino(folder: Path, out: Path, calibration: list[dict[str, Any]]) -> None:
    import nncf
    import openvino as ov

    from greenadapt.inference.labelling import load_finetuned_weights
    from greenadapt.inference.onnx_runtime import ensure_export
    from greenadapt.tasks import get_labelling_task

    fp32 = ensure_export(folder, "none", lambda: load_finetuned_weights(folder, get_labelling_task("ner")))
    model = ov.convert_model(str(fp32))
    names = [port.any_name for port in model.inputs]
    dataset = nncf.Dataset(calibration, lambda sample: {name: sample[name] for name in names})
    quantized = nncf.quantize(model, dataset, model_type=nncf.ModelType.TRANSFORMER, subset_size=len(calibration))
    ov.save_model(quantized, str(out))


def calibration_samples(folder: Path, limit: int = CALIBRATION_SENTENCES) -> list[dict[str, Any]]:
    """The run's first ``limit`` training sentences (its options.json's training file), each as every view the run
    has (the domain tokenizer, and the general one where the folder has it) tokenizes it: one sample a row."""
    import numpy as np
    from transformers import AutoTokenizer

    from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR

    train = Path(json.loads((folder / "options.json").read_text())["options"]["train"])
    sentences, words = [], []
    for line in train.open(encoding="utf-8"):
        if line.strip():
            words.append(line.split("\t")[0])
        elif words:
            sentences.append(" ".join(words))
            words = []
        if len(sentences) == limit:
            break
    views = [folder] + [path for path in (folder / GENERAL_TOKENIZER_DIR,) if path.is_dir()]
    samples = []
    for view in views:
        tokenizer = AutoTokenizer.from_pretrained(str(view))
        for sentence in sentences:
            encoded = tokenizer(sentence, truncation=True, max_length=128, return_tensors="np")
            samples.append({name: np.asarray(array, dtype=np.int64) for name, array in encoded.items()})
    return samples


def anchor_model(anchor: str, folder: Path, store: Path, *, precision: str | None = None) -> SlicedModel:
    """``anchor``'s model of ``folder``, converted once into ``store``; ``precision``: OpenVINO's inference precision
    hint (its default where None)."""
    import torch
    from transformers import AutoConfig

    from greenadapt.inference.onnx_runtime import weights_digest

    store = store / weights_digest(folder)[:16]
    store.mkdir(parents=True, exist_ok=True)
    config, threads = AutoConfig.from_pretrained(str(folder)), torch.get_num_threads()
    if anchor == "ctranslate2-int8":
        return CTranslate2Tagger(folder, store, config, threads)
    return OpenVinoTagger(folder, store, config, threads, precision)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("anchor", choices=sorted(ANCHORS))
    parser.add_argument("--store", type=Path, required=True, help="where the converted and quantized models are kept")
    ours, command = (sys.argv[1:sys.argv.index("--")], sys.argv[sys.argv.index("--") + 1:]) if "--" in sys.argv else (sys.argv[1:], [])
    args = parser.parse_args(ours)
    if not command:
        parser.error("give a greenadapt predict or evaluate command line after --")
    store = args.store.resolve()
    import greenadapt.inference.onnx_runtime as onnx_runtime

    # greenadapt's --runtime onnx path, with the anchor standing where ONNX Runtime's session stands
    onnx_runtime.onnx_model = lambda folder, load, quantize="none": anchor_model(args.anchor, Path(folder), store)
    sys.argv = ["greenadapt", *command, "--runtime", "onnx"]
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from greenadapt.cli import entry_point

    entry_point()


if __name__ == "__main__":
    main()
