"""ONNX Runtime int8 variants of one fine-tuned NER folder, side by side: speed and agreement with fp32.

Exports the folder's model (the plain-attention trace greenadapt's `--runtime onnx` uses), makes the variants
docs/benchmarks.md ("Serving on a CPU") weighs, and runs each on the same batches of corpus lines (one view: the
folder's own tokenizer; batches of 32 sorted by length, up to 128 wordpieces): sentences/s and the share of
wordpieces whose argmax label equals the fp32 graph's. Also prints ONNX Runtime's per-operator time of greenadapt's
int8 graph (activations per row), one thread as each of its session's slices runs, with what the per-row steps cost.

    python bench/onnx_int8_variants.py --run RUN_FOLDER --corpus ../shared/data/corpora/biomed-10m.txt.gz --lines 1000
    python bench/onnx_int8_variants.py --run RUN_FOLDER --corpus ... --lines 640 --profile-only
"""

from __future__ import annotations

import argparse
import collections
import gzip
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def batches(run: Path, corpus: Path, lines: int, size: int = 32) -> list[dict[str, np.ndarray]]:
    from tokenizers import Tokenizer

    with gzip.open(corpus, "rt", encoding="utf-8") if corpus.suffix == ".gz" else corpus.open(encoding="utf-8") as f:
        texts = [line.strip() for line in itertools.islice(f, lines * 2) if line.strip()][:lines]
    ids = [e.ids[:128] for e in Tokenizer.from_file(str(run / "tokenizer.json")).encode_batch(texts)]
    order = np.argsort([len(i) for i in ids])
    out = []
    for start in range(0, len(order), size):
        chunk = [ids[j] for j in order[start : start + size]]
        tokens = np.zeros((len(chunk), max(map(len, chunk))), np.int64)
        mask = np.zeros_like(tokens)
        for row, piece in enumerate(chunk):
            tokens[row, : len(piece)], mask[row, : len(piece)] = piece, 1
        out.append({"input_ids": tokens, "attention_mask": mask, "token_type_ids": np.zeros_like(tokens)})
    return out


def session(path: Path, *, profile: str | None = None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if profile:
        options.enable_profiling, options.profile_file_prefix = True, profile
        options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_all(path: Path, feed: list[dict[str, np.ndarray]]) -> tuple[float, list[np.ndarray]]:
    s = session(path)
    names = [i.name for i in s.get_inputs()]
    s.run(None, {n: feed[0][n] for n in names})
    start = time.perf_counter()
    outs = [s.run(None, {n: b[n] for n in names})[0] for b in feed]
    return sum(len(b["input_ids"]) for b in feed) / (time.perf_counter() - start), outs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--profile-only", action="store_true", help="only the per-operator time of greenadapt's int8 graph")
    args = parser.parse_args()
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.transformers import optimizer
    from transformers import AutoConfig, AutoModelForTokenClassification

    from greenadapt.inference.onnx_quantize import quantize_per_row
    from greenadapt.inference.onnx_runtime import export

    work = Path(tempfile.mkdtemp(prefix="onnx-variants-"))
    fp32 = work / "fp32" / "model.onnx"
    export(AutoModelForTokenClassification.from_pretrained(str(args.run)), fp32)
    per_row = work / "per-row.onnx"
    quantize_per_row(fp32, per_row)
    feed = batches(args.run, args.corpus, args.lines)
    if args.profile_only:
        print_profile(per_row, feed, work)
        return
    matmuls = [n.name for n in onnx.load(str(fp32), load_external_data=False).graph.node if n.op_type == "MatMul"]
    ffn_out = [n for n in matmuls if n.endswith("/output/dense/MatMul") and "attention" not in n]
    config = AutoConfig.from_pretrained(str(args.run))
    fused = optimizer.optimize_model(str(fp32), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size)
    fused.save_model_to_file(str(work / "fused.onnx"))
    float_default = {"DefaultTensorType": onnx.TensorProto.FLOAT}
    variants = {
        "int8 per tensor (ONNX Runtime's dynamic)": (fp32, {}),
        "int8, activation products too": (fp32, {"op_types_to_quantize": ["MatMul"], "extra_options": {"MatMulConstBOnly": False}}),
        "int8, FFN output projections fp32": (fp32, {"nodes_to_exclude": ffn_out}),
        "uint8 weights": (fp32, {"weight_type": QuantType.QUInt8}),
        "int8 of the fused graph (QAttention)": (work / "fused.onnx", {"op_types_to_quantize": ["MatMul", "Attention"],
                                                                       "extra_options": float_default}),
    }
    rate, reference = run_all(fp32, feed)
    print("| graph | sentences/s (one view) | wordpieces with fp32's label |\n|---|---:|---:|")
    print(f"| fp32 | {rate:.1f} | 100.000% |")
    rate, outs = run_all(per_row, feed)
    agree = np.concatenate([(o.argmax(-1) == r.argmax(-1))[b["attention_mask"] == 1]
                            for o, r, b in zip(outs, reference, feed, strict=True)])
    print(f"| int8 per row (greenadapt's) | {rate:.1f} | {100 * agree.mean():.3f}% |", flush=True)
    made = {}
    for number, (name, (source, extra)) in enumerate(variants.items()):
        target = made[name] = work / f"variant-{number}.onnx"
        quantize_dynamic(str(source), str(target), **{"weight_type": QuantType.QInt8, "per_channel": True, **extra})
        rate, outs = run_all(target, feed)
        agree = np.concatenate([(o.argmax(-1) == r.argmax(-1))[b["attention_mask"] == 1]
                                for o, r, b in zip(outs, reference, feed, strict=True)])
        print(f"| {name} | {rate:.1f} | {100 * agree.mean():.3f}% |", flush=True)
    for quant_format in (QuantFormat.QOperator, QuantFormat.QDQ):  # static: activations' ranges from 12 batches
        target = work / f"static-{quant_format.name}.onnx"

        class Batches(CalibrationDataReader):
            def __init__(self, batches: list[dict[str, np.ndarray]]) -> None:
                self.batches = iter(batches)

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self.batches, None)

        quantize_static(str(fp32), str(target), Batches(feed[::8][:12]), quant_format=quant_format, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        rate, outs = run_all(target, feed)
        agree = np.concatenate([(o.argmax(-1) == r.argmax(-1))[b["attention_mask"] == 1]
                                for o, r, b in zip(outs, reference, feed, strict=True)])
        print(f"| static int8, {quant_format.name}, calibrated on 12 batches | {rate:.1f} | {100 * agree.mean():.3f}% |", flush=True)
    try:  # 8-bit block-wise weights, int8 compute (MatMulNBits, accuracy level 4): its quantizer needs onnx-ir
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    except ImportError:
        print("| MatMulNBits, 8-bit blocks | skipped: pip install onnx-ir | |")
    else:
        for bits, block in ((8, 32), (8, 128), (4, 32)):
            quantizer = MatMulNBitsQuantizer(onnx.load(str(fp32)), bits=bits, block_size=block, is_symmetric=True, accuracy_level=4)
            quantizer.process()
            target = work / f"nbits-{bits}-{block}.onnx"
            quantizer.model.save_model_to_file(str(target), use_external_data_format=False)
            rate, outs = run_all(target, feed)
            agree = np.concatenate([(o.argmax(-1) == r.argmax(-1))[b["attention_mask"] == 1]
                                    for o, r, b in zip(outs, reference, feed, strict=True)])
            print(f"| MatMulNBits, {bits}-bit blocks of {block}, int8 compute | {rate:.1f} | {100 * agree.mean():.3f}% |", flush=True)
    print_profile(per_row, feed, work)


# The per-row steps' operators: the rows' largest and smallest values, their scales, the quantization itself.
PER_ROW_STEPS = ("ReduceMax", "ReduceMin", "Max", "Div", "Neg", "Reciprocal", "QuantizeLinear")


def print_profile(graph: Path, feed: list[dict[str, np.ndarray]], work: Path) -> None:
    """ONNX Runtime's kernel time per operator kind over the first 20 batches, one thread, and the per-row steps' share:
    their own operators, and the ``Mul`` nodes they add (the rows' inverse scales before the quantization and the rows'
    scales after each product), counted by node name."""
    profiled = session(graph, profile=str(work / "profile"))
    for b in feed[:20]:
        profiled.run(None, b)
    spent: collections.Counter[str] = collections.Counter()
    per_row = 0.0
    for event in json.loads(Path(profiled.end_profiling()).read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            op = event["args"]["op_name"]
            spent[op] += event["dur"]
            if op in PER_ROW_STEPS or "/per_row/" in event["name"] or "/RowScale" in event["name"]:
                per_row += event["dur"]
    total = sum(spent.values())
    print("\n| operator (greenadapt's int8 graph, first 20 batches, one thread) | share of kernel time |\n|---|---:|")
    for op, us in spent.most_common(14):
        print(f"| {op} | {100 * us / total:.1f}% |")
    print(f"| of which the per-row steps (their operators and Mul nodes) | {100 * per_row / total:.1f}% |")


if __name__ == "__main__":
    main()
