"""The study's tables from compare.json files: each arm's score per pooling mode, and paired differences over seeds.

compare pairs every arm with its baseline; a study also asks arm-against-arm questions (green-agree against
green-min20, against base-rdrop, ...). Every arm of one compare.json was fine-tuned on the same seeds and test set,
so any two of them pair by seed: the per-seed differences get the same Student-t 95% interval compare uses.

    python bench/arm_table.py gpu-controls/compare-NCBI-disease.json gpu-controls/compare-BC5CDR-disease.json \\
        --pair green-agree:green-min20 --pair green-agree:base-rdrop --pair green-both:green-min20

Prints Markdown: per set, each arm's T_LM / T̂ / headline mean ± sd over its seeds (× 100), its difference to the
baseline (compare's own ``--against``) with the seed interval and the seeds above; then each ``--pair``'s
difference per set. Only seeds both arms finished count.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from greenadapt.comparison.statistics import compare_pair, mean_sd  # noqa: E402


def headline(variant: dict[str, Any], metric: str) -> dict[int, float]:
    """Per seed, the arm's score in its headline pool."""
    pool = variant["headline_pool"]
    return {int(seed): pools[pool][metric] for seed, pools in variant["scores"].items() if metric in pools.get(pool, {})}


def pool_cell(variant: dict[str, Any], pool: str, metric: str) -> str:
    values = [pools[pool][metric] * 100 for pools in variant["scores"].values() if metric in pools.get(pool, {})]
    if not values:
        return "—"
    mean, sd = mean_sd(values)
    return f"{mean:.2f} ± {sd:.2f}" if len(values) > 1 else f"{mean:.2f}"


def difference(arm: dict[str, Any], other: dict[str, Any], metric: str) -> str:
    """``arm − other`` over the seeds both finished: mean [95% over seeds]; seeds above; per-seed values."""
    mine, theirs = headline(arm, metric), headline(other, metric)
    seeds = sorted(set(mine) & set(theirs))
    if not seeds:
        return "no common seed"
    pair = compare_pair(arm["name"], other["name"], metric, {s: (mine[s], theirs[s]) for s in seeds}, None)
    interval = f" [{pair.seed_interval[0] * 100:+.2f}, {pair.seed_interval[1] * 100:+.2f}]" if pair.seed_interval else ""
    above = sum(d > 0 for d in pair.differences)
    each = ", ".join(f"{d * 100:+.2f}" for d in pair.differences)
    strong = "**" if pair.seed_interval and (pair.seed_interval[0] > 0 or pair.seed_interval[1] < 0) else ""
    return f"{strong}{pair.mean * 100:+.2f}{interval}{strong}; {above}/{len(seeds)} above ({each})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("compare_json", nargs="+", type=Path)
    parser.add_argument("--pair", action="append", default=[], metavar="ARM:OTHER", help="a paired difference to print per set")
    args = parser.parse_args()
    results = {}
    for path in args.compare_json:
        result = json.loads(path.read_text())
        name = Path(result["options"]["test"]).parent.name or path.stem
        results[name] = result
    print("| set | arm | seeds | T_LM | T̂ | headline | Δ vs baseline (95% over seeds); seeds above |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name, result in results.items():
        metric = result["metric"]
        arms = {v["name"]: v for v in result["variants"]}
        baseline = result["options"].get("against") or result["variants"][0]["name"]
        for arm_name, arm in arms.items():
            delta = "—" if arm_name == baseline else difference(arm, arms[baseline], metric)
            print(f"| {name} | {arm_name} | {len(arm['scores'])} | {pool_cell(arm, 'general', metric)} | {pool_cell(arm, 'domain', metric)} | "
                  f"{pool_cell(arm, arm['headline_pool'], metric)} | {delta} |")
    if args.pair:
        print()
        print("| pair | " + " | ".join(results) + " |")
        print("|---|" + "---|" * len(results))
        for spec in args.pair:
            arm_name, _, other_name = spec.partition(":")
            cells = []
            for result in results.values():
                arms = {v["name"]: v for v in result["variants"]}
                cells.append(difference(arms[arm_name], arms[other_name], result["metric"]) if arm_name in arms and other_name in arms else "—")
            print(f"| {arm_name} − {other_name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
