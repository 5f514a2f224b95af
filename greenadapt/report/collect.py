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

import hashlib
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from greenadapt.energy import cost_of, sum_costs
from greenadapt.errors import StageError, UsageError
from greenadapt.report.paper import LB_TO_KG, PUBLISHED

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
ADAPT_KINDS = ("w2v", "align", "expand")
_SEED_DIR = re.compile(r"^seed[-_]?\d+$")
MAX_CURVE_POINTS = 400


def find_stage_folders(run: Path) -> list[Path]:
    """Every stage folder (one holding ``manifest.json``) at or under ``run``, sorted."""
    if not run.exists():
        raise StageError("no such folder", path=run, hint="pass a run folder, e.g. <workdir>/<corpus>/<model>")
    if not run.is_dir():
        raise StageError("not a folder", path=run, hint="pass a run folder, e.g. <workdir>/<corpus>/<model>, not a file")
    found: list[Path] = []
    for root, dirs, files in os.walk(run):
        if MANIFEST in files:
            found.append(Path(root))
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.endswith(".checkpoint"))
    if not found:
        raise StageError(
            "not a greenadapt run folder: no stage output (manifest.json) at or under it",
            path=run,
            hint="pass a workspace run folder (<workdir>/<corpus>/<model>), a stage folder or a finetune output folder",
        )
    return sorted(found)


def read_json_file(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise StageError(f"garbled {what}: not UTF-8 text", path=path, hint="rerun the stage with --force") from None
    except OSError as exc:
        raise StageError(f"cannot read {what}: {exc.strerror or exc}", path=path) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StageError(
            f"garbled {what}: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno, hint="rerun the stage with --force"
        ) from None


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    manifest = read_json_file(path, "manifest")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("kind"), str):
        raise StageError("garbled manifest: not a greenadapt stage manifest (no 'kind')", path=path, hint="rerun the stage with --force")
    return manifest


def _optional_json(path: Path, what: str) -> Any:
    return read_json_file(path, what) if path.is_file() else None


# --------------------------------------------------------------------------
# The report's data


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
            manifest = read_manifest(folder)
            rel = folder.relative_to(root).as_posix()
            stages.append(
                {
                    "run": str(root),
                    "path": str(folder),
                    "name": f"{root.name}/{rel}" if rel != "." else root.name,
                    "kind": manifest["kind"],
                    "created": manifest.get("created"),
                    "config": manifest.get("config") or {},
                    "inputs": manifest.get("inputs") or [],
                    "stats": manifest.get("stats") or {},
                    "cost": cost_of(manifest),
                }
            )
    order = {kind: i for i, kind in enumerate(("w2v", "align", "expand", "pretrain", "finetune", "qa"))}
    stages.sort(key=lambda s: (s["run"], order.get(s["kind"], len(order)), s["name"]))
    return {
        "runs": [str(Path(r)) for r in runs],
        "stages": [{k: v for k, v in s.items() if k not in ("config", "inputs")} for s in stages],
        "adaptation": adaptation_chains(stages),
        "finetune_cost": sum_costs(trained) if (trained := [s["cost"] for s in stages if s["kind"] in ("finetune", "pretrain")]) else None,
        "alignment": [alignment_of(s) for s in stages if s["kind"] == "align"],
        "pretraining": [pretraining_of(s) for s in stages if s["kind"] == "pretrain"],
        "training": [curve for s in stages if s["kind"] in ("finetune", "pretrain") for curve in curves_of(s)],
        "results": results_table(stages),
        "accuracy_vs_cost": accuracy_vs_cost(stages),
        "paper": paper_comparison(stages),
        "growth": cost_growth(stages),
        "comparisons": comparisons(runs),
        # Training that did not learn (a flat loss, a constant or majority-class model): beside the scores it makes.
        "warnings": [{"stage": s["name"], "warning": w} for s in stages for w in s["stats"].get("warnings") or [] if isinstance(w, str)],
    }


def comparisons(runs: Sequence[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """The ``compare.json`` of every compare folder given (``greenadapt compare --out``), with where it is."""
    from greenadapt.comparison.run import RESULT_FILE

    found = []
    for run in runs:
        for path in sorted(Path(run).rglob(RESULT_FILE)):  # at the run folder, or below it (the study's finetune/<set>/)
            document = read_json_file(path, "compare result")
            if isinstance(document, dict) and document.get("kind") == "compare":
                found.append({**document, "path": str(path.parent)})
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


def alignment_of(stage: Mapping[str, Any]) -> dict[str, Any]:
    report = _optional_json(Path(stage["path"]) / "report.json", "alignment report") or {}
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
    seeds = models.items() if models else [(str(_seed_of(stage)), ".")]
    curves = []
    for seed, sub in seeds:
        log_path = folder / sub / "train_log.jsonl"
        if not log_path.is_file():
            continue
        loss, dev = _read_log(log_path)
        curves.append({"name": stage["name"], "group": group_label(stage), "seed": seed, "loss": loss, "dev": dev})
    return curves


def _seed_of(stage: Mapping[str, Any]) -> Any:
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
    if len(parts) > 1 and _SEED_DIR.match(parts[-1]):
        parts = parts[:-1]
    return "/".join(parts)


def _per_seed_scores(stage: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """``{seed: {split: {pool: {metric: value}}}}`` and the primary metric, whatever the task's metrics.json shape."""
    metrics = _optional_json(Path(stage["path"]) / "metrics.json", "metrics file")
    if not isinstance(metrics, dict):
        return {}, "f1"
    primary = str(metrics.get("primary_metric") or "f1")
    if isinstance(metrics.get("per_seed"), dict):
        return metrics["per_seed"], primary
    pool = str(metrics.get("pool") or stage["stats"].get("pool") or "general")
    if isinstance(metrics.get(primary), int | float):  # `greenadapt qa`: one flat score dict for its one data file
        return {str(_seed_of(stage)): {"eval": {pool: metrics}}}, primary
    # `finetune --task qa`: {split: scores}
    splits = {k: v for k, v in metrics.items() if isinstance(v, dict) and isinstance(v.get(primary), int | float)}
    if not splits:
        return {}, primary
    return {str(_seed_of(stage)): {split: {pool: scores} for split, scores in splits.items()}}, primary


def results_table(stages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Mean ± std over seeds of the primary metric, per configuration group, split and pooling mode."""
    groups: dict[str, dict[str, Any]] = {}
    for stage in stages:
        if stage["kind"] not in ("finetune", "qa"):
            continue
        per_seed, primary = _per_seed_scores(stage)
        if not per_seed:
            continue
        key = group_key(stage)
        group = groups.setdefault(
            key,
            {
                "group": group_label(stage),
                "kind": stage["kind"],
                "task": stage["stats"].get("task") or (stage["config"].get("task") or {}).get("task") or stage["kind"],
                "mix": stage["stats"].get("mix"),
                "model": stage["config"].get("model"),
                "metric": primary,
                "runs": [],
                "values": {},
            },
        )
        group["runs"].append(stage["name"])
        for seed, splits in per_seed.items():
            for split, pools in (splits or {}).items():
                for pool, scores in (pools or {}).items():
                    value = (scores or {}).get(primary) if isinstance(scores, dict) else None
                    if isinstance(value, int | float) and math.isfinite(value):
                        group["values"].setdefault((split, pool), []).append((str(seed), float(value)))
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
        if stage["kind"] != "finetune":
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
        _comparison_row(stages, f"this run: {s['name']} (continued masked-LM pretraining, {s['stats'].get('steps')} steps)", [s["name"]], s["cost"])
        for s in stages
        if s["kind"] == "pretrain"
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
