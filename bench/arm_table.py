"""The study's tables from compare.json files: each arm's score per pooling mode, and paired differences over seeds.

compare pairs every arm with its baseline; a study also asks arm-against-arm questions (green-agree against
green-min20, against base-rdrop, ...). Every arm of one compare.json was fine-tuned on the same seeds and test set,
so any two of them pair by seed: the per-seed differences get the same Student-t 95% interval compare uses.

    python bench/arm_table.py gpu-controls/compare-NCBI-disease.json gpu-controls/compare-BC5CDR-disease.json \\
        --pair green-agree:green-min20 --pair green-agree:base-rdrop --pair green-both:green-min20

Prints Markdown: per set, each arm's T_LM / T̂ / headline mean ± sd over its seeds (× 100), its difference to the
baseline (compare's own ``--against``; where the files of a set name different ones, the study's ``base``) with the
seed interval and the seeds above; then each ``--pair``'s difference per set. Only seeds both arms finished count.
Several files of one set (the CPU study writes one per arm and seed, bench/cpu_study.py) are merged by arm and seed
when their recipe is the same. ``--rule`` applies docs/study.md's rule as amended on 2026-11-29
(bench/study_rule.py) to the seeds the files hold: it reads a question only at its looks (seeds 1-5, then 1-10, of
all four sets) and says what each waits for.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import study_rule  # noqa: E402  (beside this file)

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
    pair = paired(arm, other, metric)
    if pair is None:
        return "no common seed"
    seeds = pair.seeds
    interval = f" [{pair.seed_interval[0] * 100:+.2f}, {pair.seed_interval[1] * 100:+.2f}]" if pair.seed_interval else ""
    above = sum(d > 0 for d in pair.differences)
    each = ", ".join(f"{d * 100:+.2f}" for d in pair.differences)
    strong = "**" if pair.seed_interval and (pair.seed_interval[0] > 0 or pair.seed_interval[1] < 0) else ""
    return f"{strong}{pair.mean * 100:+.2f}{interval}{strong}; {above}/{len(seeds)} above ({each})"


RECIPE_KEYS = ("task", "epochs", "batch_size", "lr", "max_length", "precision", "max_steps")


def merge(results: dict[str, dict[str, Any]], name: str, result: dict[str, Any], path: Path) -> None:
    """Add one compare.json to its set's table: files of one set (the CPU study writes one per arm and seed) pair by
    seed when their recipe is the same; an arm's seed found twice keeps the first score."""
    if name not in results:
        results[name] = {**result, "variants": [dict(v, scores=dict(v["scores"])) for v in result["variants"]]}
        return
    held = results[name]
    if held["options"].get("against") != result["options"].get("against"):
        held["no_common_baseline"] = True  # the later sets' units compare arm against arm: no arm is every file's baseline
    for key in RECIPE_KEYS:
        if held["options"].get(key) != result["options"].get(key):
            raise SystemExit(f"{path}: {key} is {result['options'].get(key)!r}, another file of {name} has "
                             f"{held['options'].get(key)!r}: only runs of one recipe pair")
    arms = {v["name"]: v for v in held["variants"]}
    for variant in result["variants"]:
        if variant["name"] not in arms:
            arms[variant["name"]] = dict(variant, scores=dict(variant["scores"]))
            held["variants"].append(arms[variant["name"]])
        else:
            for seed, pools in variant["scores"].items():
                arms[variant["name"]]["scores"].setdefault(seed, pools)


def paired(arm: dict[str, Any], other: dict[str, Any], metric: str) -> Any:
    mine, theirs = headline(arm, metric), headline(other, metric)
    seeds = sorted(set(mine) & set(theirs))
    return compare_pair(arm["name"], other["name"], metric, {s: (mine[s], theirs[s]) for s in seeds}, None) if seeds else None


def apply_rule(paths: list[Path]) -> list[str]:
    """docs/study.md's rule as amended on 2026-11-29, on every seed the files hold."""
    return study_rule.report(study_rule.apply(study_rule.unit_scores(paths)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("compare_json", nargs="+", type=Path)
    parser.add_argument("--pair", action="append", default=[], metavar="ARM:OTHER", help="a paired difference to print per set")
    parser.add_argument("--rule", action="store_true", help="apply docs/study.md's rule as amended on 2026-11-29 (bench/study_rule.py)")
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    try:
        study_rule.unit_scores(args.compare_json)  # every file readable, and the files of one set and seed pair
        for path in args.compare_json:
            name, result = study_rule.read_unit(path)
            merge(results, name or path.stem, result, path)
    except study_rule.UnitFileError as error:
        raise SystemExit(str(error)) from None
    print("| set | arm | seeds | T_LM | T̂ | headline | Δ vs baseline (95% over seeds); seeds above |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name, result in results.items():
        metric = result["metric"]
        arms = {v["name"]: v for v in result["variants"]}
        baseline = result["options"].get("against") or result["variants"][0]["name"]
        if result.get("no_common_baseline"):  # the study's units pair arm with arm: its baseline where it ran
            baseline = study_rule.BASELINE if study_rule.BASELINE in arms else None
        for arm_name, arm in arms.items():
            delta = (f"no {study_rule.BASELINE} run on this set (the pairs below)" if baseline is None
                     else "—" if arm_name == baseline else difference(arm, arms[baseline], metric))
            print(f"| {name} | {arm_name} | {len(arm['scores'])} | {pool_cell(arm, 'general', metric)} | "
                  f"{pool_cell(arm, 'domain', metric)} | "
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
                cells.append(difference(arms[arm_name], arms[other_name], result["metric"]) if arm_name in arms
                             and other_name in arms else "—")
            print(f"| {arm_name} − {other_name} | " + " | ".join(cells) + " |")
    if args.rule:
        print()
        print("\n".join(apply_rule(args.compare_json)))


if __name__ == "__main__":
    main()
