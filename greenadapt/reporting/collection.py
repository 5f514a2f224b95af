"""Find the stage outputs under run folders and read what the report shows.

A *run folder* is anything that holds greenadapt stage outputs: a workspace
run (``<workdir>/<corpus>/<model>/`` with ``w2v/ align/ expand/`` and, as the
reproduction study writes them, ``finetune/<set>/<variant>/seed-<s>/``), a
single stage folder, or a folder of fine-tuning runs. Every folder with a
``manifest.json`` is a stage; the walk does not descend into a stage folder,
nor into hidden folders (temporaries) or ``*.checkpoint`` folders.

Nothing here verifies checksums (the report only reads), and nothing here
imports torch or matplotlib.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from greenadapt.artifacts import kinds
from greenadapt.errors import StageError, UsageError
from greenadapt.machine.energy import cost_of, sum_costs
from greenadapt.reporting.reading import find_stage_folders, optional_json, read_json_file, read_manifest
from greenadapt.reporting.results import (
    accuracy_vs_cost,
    adaptation_chains,
    entity_type_table,
    group_label,
    paper_comparison,
    results_table,
    seed_of,
)

log = logging.getLogger(__name__)

MAX_CURVE_POINTS = 400


# --------------------------------------------------------------------------
# The report's data


def _stage(root: Path, folder: Path, name: str) -> dict[str, Any]:
    manifest = read_manifest(folder)
    return {
        "run": str(root),
        "path": str(folder),
        "name": name,
        "kind": manifest["kind"],
        "created": manifest.get("created"),
        "config": manifest.get("config") or {},
        "inputs": manifest.get("inputs") or [],
        "stats": manifest.get("stats") or {},
        "cost": cost_of(manifest),
    }


def _add_upstream(stages: list[dict[str, Any]]) -> None:
    """The adaptation and pretraining stages a listed stage was built from, wherever ``--out`` put them
    (found through each manifest's inputs), so a model's report carries its whole cost."""
    seen = {Path(s["path"]).resolve() for s in stages}
    pending = list(stages)
    while pending:
        stage = pending.pop()
        for recorded in stage["inputs"]:
            if not isinstance(recorded, dict) or not (recorded.get("relpath") or recorded.get("path")):
                continue
            folder = ((Path(stage["path"]) / recorded["relpath"]) if recorded.get("relpath") else Path(recorded["path"])).resolve()
            if folder in seen or not (folder / "manifest.json").is_file():
                continue
            seen.add(folder)
            try:
                found = _stage(Path(stage["run"]), folder, f"{folder.parent.name}/{folder.name} (input of {stage['name']})")
            except StageError as exc:  # an unreadable input is said, not fatal: the folders asked for are reported
                log.warning("%s: input %s left out of the report: %s", stage["name"], folder, exc.message)
                continue
            if found["kind"] in (*kinds.ADAPTATION, kinds.PRETRAIN):
                stages.append(found)
                pending.append(found)


def collect(runs: Sequence[str | os.PathLike[str]]) -> dict[str, Any]:
    """Everything the report shows, as plain JSON-able data."""
    if not runs:
        raise UsageError("no run folder given", hint="greenadapt report RUN [RUN ...]")
    stages: list[dict[str, Any]] = []
    for run in runs:
        root = Path(run)
        from greenadapt.comparison.run import RESULT_FILE

        if root.is_dir() and not any(root.rglob("manifest.json")) and any(root.rglob(RESULT_FILE)):
            continue  # compare results whose runs were moved away: the results alone
        for folder in find_stage_folders(root):
            rel = folder.relative_to(root).as_posix()
            stages.append(_stage(root, folder, f"{root.name}/{rel}" if rel != "." else root.name))
    _add_upstream(stages)
    order = {kind: i for i, kind in enumerate((*kinds.ADAPTATION, kinds.PRETRAIN, kinds.FINETUNE, kinds.QA))}
    stages.sort(key=lambda s: (s["run"], order.get(s["kind"], len(order)), s["name"]))
    return {
        "runs": [str(Path(r)) for r in runs],
        "stages": [{k: v for k, v in s.items() if k not in ("config", "inputs")} for s in stages],
        "adaptation": adaptation_chains(stages),
        "finetune_cost": sum_costs(trained) if (trained := [s["cost"] for s in stages if s["kind"] in kinds.TRAINED]) else None,
        "alignment": [alignment_of(s) for s in stages if s["kind"] == "align"],
        "pretraining": [pretraining_of(s) for s in stages if s["kind"] == kinds.PRETRAIN],
        "training": [curve for s in stages if s["kind"] in kinds.TRAINED for curve in curves_of(s)],
        "results": results_table(stages),
        "entity_types": entity_type_table(stages),
        "accuracy_vs_cost": accuracy_vs_cost(stages),
        "paper": paper_comparison(stages),
        "growth": cost_growth(stages),
        "comparisons": comparisons(runs),
        # Training that did not learn (a flat loss, a constant or majority-class model): beside the scores it makes.
        "warnings": [{"stage": s["name"], "warning": w} for s in stages for w in s["stats"].get("warnings") or [] if isinstance(w, str)],
    }


def comparisons(runs: Sequence[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """The ``compare.json`` of every compare folder given (``greenadapt compare --out``), with where it is."""
    from greenadapt.artifacts.compare_result import finished_runs, progress_line, read_compare_result
    from greenadapt.comparison.run import RESULT_FILE

    found = []
    for run in runs:
        for path in sorted(Path(run).rglob(RESULT_FILE)):  # at the run folder, or below it (the study's finetune/<set>/)
            document = read_json_file(path, "compare result")
            if isinstance(document, dict) and document.get("kind") == "compare":
                result = read_compare_result(path)
                found.append({**result, "path": str(path.parent), "progress": progress_line(result, finished_runs(result, path.parent))})
    return found


# What a stage's size is, for "how cost grows": the manifest statistic, and what it counts.
GROWTH_SIZES = {"w2v": ("tokens", "corpus tokens"), "align": ("n_w2v", "word2vec words"), "expand": ("n_new", "new words")}


def cost_growth(stages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Wall time and peak memory against size, per stage kind, where the report holds runs of several sizes.

    w2v runs are grouped by their epochs (the time per token scales with them); a kind with fewer than two
    distinct sizes has no curve.
    """
    series = []
    for kind, (key, counts) in GROWTH_SIZES.items():
        groups: dict[str, list[list[Any]]] = {}
        for stage in stages:
            size, wall = stage["stats"].get(key), stage["cost"].get("wall_seconds")
            if stage["kind"] != kind or not isinstance(size, int | float) or not isinstance(wall, int | float) or size <= 0:
                continue
            epochs = stage["config"].get("epochs") if kind == "w2v" else None
            label = f"{kind} ({epochs} epoch{'' if epochs == 1 else 's'})" if isinstance(epochs, int) else kind
            groups.setdefault(label, []).append([size, wall, stage["cost"].get("peak_rss_mib"), stage["name"]])
        for label, points in groups.items():
            if len({p[0] for p in points}) >= 2:
                series.append({"kind": kind, "label": label, "size": counts, "points": sorted(points, key=lambda p: (p[0], p[3]))})
    return series


def alignment_of(stage: Mapping[str, Any]) -> dict[str, Any]:
    report = optional_json(Path(stage["path"]) / "report.json", "alignment report") or {}
    stats = {**stage["stats"], **{k: v for k, v in report.items() if k != "neighbours"}}
    return {
        "name": stage["name"],
        "method": stats.get("method"),
        "heldout_cosine": stats.get("heldout_cosine"),
        "train_cosine": stats.get("train_cosine"),
        "n_shared": stats.get("n_shared"),
        "n_new": stats.get("n_new"),
        "n_w2v": stats.get("n_w2v"),
        "neighbours": report.get("neighbours") or [],
    }


def pretraining_of(stage: Mapping[str, Any]) -> dict[str, Any]:
    """A continued-pretraining (DAPT) stage: its budget, held-out masked-LM loss before and after, and its cost."""
    stats, config, cost = stage["stats"], stage["config"], stage["cost"]
    before, after = stats.get("heldout_before") or {}, stats.get("heldout_after") or {}
    heldout = {}
    for corpus in ("domain", "general"):
        first, last = before.get(corpus), after.get(corpus)
        if isinstance(first, dict) and isinstance(last, dict):
            heldout[corpus] = {
                "loss_before": first.get("loss"),
                "loss_after": last.get("loss"),
                "perplexity_before": first.get("perplexity"),
                "perplexity_after": last.get("perplexity"),
            }
    return {
        "name": stage["name"],
        "model": config.get("model"),
        "tokenizer": stats.get("tokenizer") or config.get("tokenizer"),
        "gmap": (config.get("gmap") or {}).get("strategy"),
        "head_warmup_steps": (config.get("train") or {}).get("head_warmup_steps", 0),
        "steps": stats.get("steps"),
        "tokens": stats.get("tokens_trained"),
        "tokens_per_second": stats.get("tokens_per_second"),
        "processes": stats.get("processes"),
        "device": stats.get("device"),
        "heldout": heldout,
        "wall_seconds": cost.get("wall_seconds"),
        "cpu_hours": cost.get("cpu_hours"),
        "gpu_hours": (cost.get("gpu_seconds") or 0.0) / 3600,
        "energy_kwh": cost.get("energy_kwh"),
        "co2_kg": cost.get("co2_kg"),
    }


def _read_log(path: Path) -> tuple[list[list[float]], list[list[float]]]:
    """(step, loss) and (step, dev score) pairs of a ``train_log.jsonl``; a torn last line is ignored."""
    losses: list[list[float]] = []
    dev: list[list[float]] = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s:%d: skipping a garbled training-log line", path, number)
                continue
            if not isinstance(record, dict) or not isinstance(record.get("step"), int | float):
                continue
            if record.get("event") == "dev" and isinstance(record.get("score"), int | float):
                dev.append([record["step"], float(record["score"])])
            elif isinstance(record.get("loss"), int | float) and math.isfinite(record["loss"]):
                losses.append([record["step"], float(record["loss"])])
    return _thin(losses), dev


def _thin(points: list[list[float]]) -> list[list[float]]:
    if len(points) <= MAX_CURVE_POINTS:
        return points
    stride = math.ceil(len(points) / MAX_CURVE_POINTS)
    return points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])


def curves_of(stage: Mapping[str, Any]) -> list[dict[str, Any]]:
    folder = Path(stage["path"])
    models = stage["stats"].get("models") or {}
    seeds = models.items() if models else [(str(seed_of(stage)), ".")]
    curves = []
    for seed, sub in seeds:
        log_path = folder / sub / "train_log.jsonl"
        if not log_path.is_file():
            continue
        loss, dev = _read_log(log_path)
        curves.append({"name": stage["name"], "group": group_label(stage), "seed": seed, "loss": loss, "dev": dev})
    return curves


