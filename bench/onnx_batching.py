"""How inference batching moves serving speed: the window of documents sorted together, and how ONNX Runtime runs a batch.

The same raw sentences (one per line) and fine-tuned NER run (both views, mean-pooled). Part one runs greenadapt's
own pooled path (``greenadapt.load(...).members[0].logits``) over windows of N sentences: each window is sorted by
length into batches of 64, so a small window leaves more padding in every batch. Part two runs ONNX Runtime alone on
the batches of one sorted window, three ways, alternating, each ``--repeats`` times (median kept):
padded to greenadapt's torch shapes (widths to a multiple of 8, batch sizes to a power of two) on a session of two
threads; unpadded on the same session; unpadded and cut into two slices, each run by a one-thread session of its own
thread (what ``--runtime onnx`` does).

    python bench/onnx_batching.py --run RUN_FOLDER --text sentences.txt --windows 256,2048,0 --repeats 3

``--text``: one sentence per line (bench/bench_serving.py's sentences.txt); a window of 0 is all of them at once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--text", type=Path, required=True)
    parser.add_argument("--quantize", default="int8", choices=("none", "int8"))
    parser.add_argument("--windows", default="256,2048,0")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import onnxruntime as ort

    import greenadapt
    from greenadapt.data.task_files import TaskFile
    from greenadapt.inference.predictor import _raw_sentences
    from greenadapt.compute.pooling import inference_shape

    served = greenadapt.load(args.run, runtime="onnx", quantize=args.quantize)
    member = served.members[0]  # type: ignore[attr-defined]
    texts = args.text.read_text(encoding="utf-8").splitlines()
    examples = [raw.sentence for raw in _raw_sentences(texts, served._word_pre_tokenizer)]  # type: ignore[attr-defined]
    units, _ = member.task.units(TaskFile(Path("<text>"), "jsonl", examples, False, {}), member.settings, member.tokenizers)
    print(f"{len(texts):,} sentences ({len(units):,} model sequences); ONNX {args.quantize}; {args.run}\n")

    print("| window (model sequences sorted together) | sentences/s (both views, greenadapt's pooled path) |\n|---|---:|")
    member.logits(units[:64], examples, "mean")
    for window in [int(w) for w in args.windows.split(",")]:
        size = window or len(units)
        started = time.perf_counter()
        for start in range(0, len(units), size):
            member.logits(units[start : start + size], examples, "mean")
        print(f"| {window or 'all'} | {len(texts) / (time.perf_counter() - started):.1f} |", flush=True)

    pad = member.tokenizers.pad_id

    def batches(view: int, padded: bool) -> list[dict[str, np.ndarray]]:
        order = np.argsort([-len(u.ids[view]) for u in units], kind="stable")
        made = []
        for start in range(0, len(order), 64):
            chunk, width = inference_shape(units, order[start : start + 64], view, 512 if padded else None, 64)  # (None: unpadded)
            ids = np.full((len(chunk), width), pad, dtype=np.int64)
            mask = np.zeros_like(ids)
            for row, i in enumerate(chunk):
                ids[row, : len(units[int(i)].ids[view])] = units[int(i)].ids[view]
                mask[row, : len(units[int(i)].ids[view])] = 1
            made.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
        return made

    def session(threads: int) -> ort.InferenceSession:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        return ort.InferenceSession(str(member.model.path), options, providers=["CPUExecutionProvider"])

    two, one, pool = session(2), session(1), ThreadPoolExecutor(2)

    def whole(feed: list[dict[str, np.ndarray]]) -> None:
        for batch in feed:
            two.run(None, batch)

    def sliced(feed: list[dict[str, np.ndarray]]) -> None:
        for batch in feed:
            half = (len(batch["input_ids"]) + 1) // 2
            list(pool.map(lambda part: one.run(None, part), [{k: v[:half] for k, v in batch.items()},
                                                             {k: v[half:] for k, v in batch.items()}]))

    padded, exact = batches(0, True) + batches(1, True), batches(0, False) + batches(1, False)
    ways = {"padded to torch's shapes, one run on 2 threads": (whole, padded), "unpadded, one run on 2 threads": (whole, exact),
            "unpadded, two slices, each on its own thread (kept)": (sliced, exact)}
    rates: dict[str, list[float]] = {name: [] for name in ways}
    for run, feed in ways.values():
        run(feed[:4])  # warm
    for _ in range(args.repeats):
        for name, (run, feed) in ways.items():
            started = time.perf_counter()
            run(feed)
            rates[name].append(len(texts) / (time.perf_counter() - started))
    first = statistics.median(next(iter(rates.values())))
    print("\n| ONNX Runtime alone, every sentence under both views, one sorted window | sentences/s (median) | × padded |\n|---|---:|---:|")
    for name, got in rates.items():
        print(f"| {name} | {statistics.median(got):.1f} | {statistics.median(got) / first:.2f} |")


if __name__ == "__main__":
    main()
