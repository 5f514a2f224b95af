"""The report's results: scores grouped by run recipe over seeds, their cost upstream, and the comparison with the paper's figures."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from greenadapt.artifacts import kinds
from greenadapt.artifacts.manifest import multitask_tasks
from greenadapt.machine.energy import sum_costs
from greenadapt.reporting.paper import LB_TO_KG, PUBLISHED
from greenadapt.reporting.reading import SEED_DIR, optional_json


def adaptation_chains(stages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per ``expand`` output: its cost plus its align and w2v inputs' (the paper's "adaptation")."""
    by_path = {str(Path(s["path"]).resolve()): s for s in stages}
    rows: list[Any] = []
    for expand in (s for s in stages if s["kind"] == "expand"):
        chain = [expand]
        current = expand
        for upstream in ("align", "w2v"):
            link = next((i for i in current["inputs"] if isinstance(i, dict) and i.get("stage") == upstream), None)
            found = None
            if link and link.get("path"):
                found = by_path.get(str(Path(link["path"]).resolve()))
                if found is None and isinstance(link.get("relpath"), str):  # a workspace moved since
                    found = by_path.get(str((Path(current["path"]) / link["relpath"]).resolve()))
            if found is None:
                break
            chain.append(found)
            current = found
        align = next((s for s in chain if s["kind"] == "align"), None)
        total = sum_costs([s["cost"] for s in chain])
        rows.append(
            {
                "name": expand["name"],
                "method": None if align is None else (align["stats"].get("method") or align["config"].get("method")),
                "stages": [s["name"] for s in reversed(chain)],
                "complete": len(chain) == 3,
                "n_new": expand["stats"].get("n_new"),
                **total,
            }
        )
    return rows


def seed_of(stage: Mapping[str, Any]) -> Any:
    config = stage.get("config") or {}
    seeds = config.get("seeds")
    if isinstance(seeds, list) and len(seeds) == 1:
        return seeds[0]
    return (config.get("train") or {}).get("seed", "?")


def _strip_seed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_seed(v) for k, v in value.items() if k not in ("seed", "seeds")}
    if isinstance(value, list):
        return [_strip_seed(v) for v in value]
    return value


def group_key(stage: Mapping[str, Any]) -> str:
    """Same configuration and inputs apart from the seed -> same group."""
    inputs = [{k: v for k, v in i.items() if k not in ("mtime_ns", "sha256")} if isinstance(i, dict) else i for i in stage["inputs"]]
    payload = json.dumps({"kind": stage["kind"], "config": _strip_seed(stage["config"]), "inputs": inputs}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def group_label(stage: Mapping[str, Any]) -> str:
    parts = stage["name"].split("/")
    if len(parts) > 1 and SEED_DIR.match(parts[-1]):
        parts = parts[:-1]
    return "/".join(parts)


def _scored(stage: Mapping[str, Any]) -> list[tuple[str, str, str, dict[str, Any], str]]:
    """(group key, label, task, per-seed scores, primary metric) of what a stage scores: a fine-tuning's or QA's one
    group, a multitask run's one per task (its metrics.json: task -> split -> pool -> scores)."""
    if stage["kind"] in (kinds.FINETUNE, kinds.QA):
        task = stage["stats"].get("task") or (stage["config"].get("task") or {}).get("task") or stage["kind"]
        return [(group_key(stage), group_label(stage), task, *_per_seed_scores(stage))]
    if stage["kind"] != kinds.MULTITASK:
        return []
    metrics = optional_json(Path(stage["path"]) / "metrics.json", "metrics file")
    tasks = metrics.get("tasks") if isinstance(metrics, dict) else None
    types = {name: settings.get("task") for name, settings in multitask_tasks(stage["config"]).items()}
    splits = ("dev", "test")
    return [(f"{group_key(stage)}/{name}", f"{group_label(stage)} ({name})", str(types.get(name) or "multitask"),
             {str(seed_of(stage)): {split: pools for split, pools in scores.items() if split in splits and isinstance(pools, dict)}},
             str(scores.get("metric") or "f1"))
            for name, scores in (tasks if isinstance(tasks, dict) else {}).items() if isinstance(scores, dict)]


def _per_seed_scores(stage: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """``{seed: {split: {pool: {metric: value}}}}`` and the primary metric, whatever the task's metrics.json shape."""
    metrics = optional_json(Path(stage["path"]) / "metrics.json", "metrics file")
    if not isinstance(metrics, dict):
        return {}, "f1"
    primary = str(metrics.get("primary_metric") or "f1")
    if isinstance(metrics.get("per_seed"), dict):
        return metrics["per_seed"], primary
    pool = str(metrics.get("pool") or stage["stats"].get("pool") or "general")
    if isinstance(metrics.get(primary), int | float):  # `greenadapt qa`: one flat score dict for its one data file
        return {str(seed_of(stage)): {"eval": {pool: metrics}}}, primary
    # `finetune --task qa`: {split: scores}
    splits = {k: v for k, v in metrics.items() if isinstance(v, dict) and isinstance(v.get(primary), int | float)}
    if not splits:
        return {}, primary
    return {str(seed_of(stage)): {split: {pool: scores} for split, scores in splits.items()}}, primary


def _add_values(values: dict[tuple[str, str], list[tuple[str, float]]], per_seed: Mapping[str, Any], primary: str) -> None:
    """Each seed's finite ``primary`` score into ``values`` under its (split, pooling mode)."""
    for seed, splits in per_seed.items():
        for split, pools in (splits or {}).items():
            for pool, scores in (pools or {}).items():
                value = (scores or {}).get(primary) if isinstance(scores, dict) else None
                if isinstance(value, int | float) and math.isfinite(value):
                    values.setdefault((split, pool), []).append((str(seed), float(value)))


def results_table(stages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Mean ± std over seeds of the primary metric, per configuration group, split and pooling mode."""
    groups: dict[str, dict[str, Any]] = {}
    for stage in stages:
        for key, label, task, per_seed, primary in _scored(stage):
            if per_seed:
                group = groups.setdefault(key, {"group": label, "kind": stage["kind"], "task": task, "mix": stage["stats"].get("mix"),
                                                "model": stage["config"].get("model"), "metric": primary, "runs": [], "values": {}})
                group["runs"].append(stage["name"])
                _add_values(group["values"], per_seed, primary)
    rows: list[Any] = []
    for group in groups.values():
        for (split, pool), pairs in sorted(group["values"].items(), key=lambda kv: (kv[0][0] != "test", kv[0])):
            values = [v for _, v in pairs]
            mean = sum(values) / len(values)
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
            rows.append(
                {
                    **{k: v for k, v in group.items() if k not in ("values",)},
                    "split": split,
                    "pool": pool,
                    "mean": mean,
                    "std": std,
                    "n": len(values),
                    "seeds": sorted({s for s, _ in pairs}),
                }
            )
    return rows


def entity_type_table(stages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """F1 per entity type of every fine-tuned NER run with typed labels, under the pooling the run reports."""
    return [
        {"run": stage["name"], "split": split, "type": kind, "f1": value["f1"], "gold": value["gold"]}
        for stage in stages
        if stage["kind"] == kinds.FINETUNE
        for split, types in (stage["stats"].get("per_type") or {}).items()
        for kind, value in types.items()
    ]


def upstream_cost(stage: Mapping[str, Any], by_path: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The cost of the stages that made ``stage``'s model (its stage inputs, followed upstream; each once).

    None when an upstream stage is not among the collected folders (its cost is unknown).
    """
    seen: dict[str, Mapping[str, Any]] = {}
    pending = [stage]
    while pending:
        current = pending.pop()
        for link in current["inputs"]:
            if not isinstance(link, dict) or not link.get("path"):
                continue
            found = by_path.get(str(Path(link["path"]).resolve()))
            if found is None and isinstance(link.get("relpath"), str):
                found = by_path.get(str((Path(current["path"]) / link["relpath"]).resolve()))
            if found is None and link.get("stage"):
                return None
            if found is None:
                continue  # a model folder greenadapt did not make (a base model): nothing to add
            # A model input that is a collected stage's folder (a pretrain output fine-tuned as
            # --model) is recorded as a model, not a stage: its cost counts all the same.
            if found["path"] not in seen:
                seen[found["path"]] = found
                pending.append(found)
    return sum_costs([s["cost"] for s in seen.values()]) if seen else {"cpu_seconds": 0.0, "wall_seconds": 0.0, "energy_kwh": 0.0}


def accuracy_vs_cost(stages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per fine-tuning group: test score (its headline pooling: mean when it trained on both tokenizers)
    against what adapting its model cost (0 for a base model) — the Pareto view of the methods."""
    by_path = {str(Path(s["path"]).resolve()): s for s in stages}
    rows: list[Any] = []
    results = results_table(stages)
    for stage in stages:
        if stage["kind"] != kinds.FINETUNE:
            continue
        group = group_label(stage)
        if any(r["group"] == group for r in rows):
            continue
        headline = "mean" if stage["stats"].get("mix") else "general"
        result = next((r for r in results if r["group"] == group and r["split"] == "test" and r["pool"] == headline), None)
        cost = upstream_cost(stage, by_path)
        if result is None or cost is None:
            continue
        rows.append({"group": group, "pool": headline, "metric": result["metric"], "mean": result["mean"], "std": result["std"],
                     "n": result["n"], "cpu_hours": (cost.get("cpu_seconds") or 0.0) / 3600,
                     "wall_seconds": cost.get("wall_seconds"), "energy_kwh": cost.get("energy_kwh")})
    return rows


def paper_comparison(stages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Our adaptation runs beside the paper's published cost figures, in the same units."""
    ours = [
        _comparison_row(stages, f"this run: {chain['name']} ({chain['method']})", chain["stages"], chain)
        for chain in adaptation_chains(stages)
        if chain["complete"]
    ]
    # Continued pretraining (the DAPT comparator) beside them, each stage on its own cost.
    ours += [
        _comparison_row(stages, f"this run: {s['name']} (continued masked-LM pretraining, {s['stats'].get('steps')} steps)",
                        [s["name"]], s["cost"])
        for s in stages
        if s["kind"] == kinds.PRETRAIN
    ]
    rows = [dict(p) for p in PUBLISHED]
    ratios = []
    # Ratios for the real adaptation (least squares); the ablations are listed, not compared.
    for mine in [o for o in ours if o["name"].endswith("(lstsq)")] or ours:
        for ref in rows:
            if ref.get("wall_hours") is None:
                continue
            ratios.append(
                {
                    "ours": mine["name"],
                    "reference": ref["name"],
                    "wall_ratio": mine["wall_hours"] / ref["wall_hours"],
                    "co2_ratio": None if mine["co2_kg"] is None or not ref.get("co2_kg") else mine["co2_kg"] / ref["co2_kg"],
                }
            )
    return {"published": rows, "ours": ours, "ratios": ratios}


def _comparison_row(stages: Sequence[Mapping[str, Any]], name: str, stage_names: Iterable[str], cost: Mapping[str, Any]) -> dict[str, Any]:
    """One of our rows of the paper comparison: ``cost`` is a stage's cost block or a chain's summed one."""
    gpu_hours = (cost.get("gpu_seconds") or 0.0) / 3600
    co2 = cost.get("co2_kg")
    return {
        "name": name,
        "hardware": _hardware(stages, stage_names),
        "wall_hours": cost["wall_hours"],
        "device_hours": gpu_hours or cost["cpu_hours"],
        "device": "GPU" if gpu_hours else "CPU core",
        "energy_kwh": cost.get("energy_kwh"),
        "co2_kg": co2,
        "co2_lbs": None if co2 is None else co2 / LB_TO_KG,
        "energy_method": cost.get("energy_method"),
        "energy_label": cost.get("energy_label"),
    }


def _hardware(stages: Iterable[Mapping[str, Any]], stage_names: Iterable[str]) -> str:
    names = set(stage_names)
    cores = {s["cost"].get("cpu_count") for s in stages if s["name"] in names}
    gpus = {s["cost"].get("gpu_model") for s in stages if s["name"] in names} - {None}
    text = "/".join(str(c) for c in sorted(c for c in cores if c)) + " CPUs"
    return text + (f" + {', '.join(sorted(gpus))}" if gpus else "")
