"""``greenadapt info``: what a folder is, read from what greenadapt wrote into it.

One reader for the question "what is this folder?": the stage manifest (kind,
when, which version, its parents, its cost and its figures), the
``greenadapt`` block of ``config.json`` for a model folder, and the
tokenizers it holds. Nothing is loaded but JSON, so it answers at once for a
folder of any size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.artifacts import kinds
from greenadapt.artifacts.manifest import multitask_tasks, read_manifest_checked, verify_files
from greenadapt.errors import StageError
from greenadapt.options import INPUT_OUTPUT, REQUIRED, Settings, option

if TYPE_CHECKING:
    from greenadapt.options import Run

# The figures of each stage kind worth a line, from its manifest's stats (in this order).
_FIGURES: dict[str, tuple[str, ...]] = {
    "w2v": ("vector_source", "tokens", "lines", "vocab_size", "dim"),
    "align": ("method", "n_shared", "n_new", "heldout_cosine", "train_cosine"),
    "expand": ("method", "n_new", "vocab_size_before", "vocab_size_after", "first_new_id"),
    "pretrain": ("steps", "tokens_trained", "tokens_per_second", "tokenizer", "device"),
    "finetune": ("task", "mix", "pool"),
    "qa": ("pool", "questions"),
    "multitask": ("tasks",),
    "predict": ("sentences", "documents"),
}


@dataclass(frozen=True, kw_only=True)
class InfoSettings(Settings):
    """``greenadapt info``: describe a folder greenadapt wrote, or a model folder."""

    command = "info"
    positional = ("path",)
    run_options = ()

    path: str = option(REQUIRED, "--path", panel=INPUT_OUTPUT, metavar="PATH", argument=True,
                       help="A folder greenadapt wrote (w2v, align, expand, finetune, ...) or a model folder.")
    check_files: bool = option(False, "--check", panel=INPUT_OUTPUT,
                               help="Also verify every file against the manifest's checksums (reads them all).")


def run_info(settings: InfoSettings, run: Run) -> dict[str, Any]:
    """``greenadapt info``: :func:`describe_folder` of the settings' folder (``check_files``: every file's checksum too)."""
    return describe_folder(Path(settings.path), check_files=settings.check_files)


def describe_folder(path: Path, *, check_files: bool = False) -> dict[str, Any]:
    """A JSON-ready description of ``path``; raises :class:`UsageError` for a folder greenadapt cannot read."""
    folder = Path(path)
    if not folder.exists():
        raise StageError("no such folder", path=folder, hint="pass a folder that a greenadapt command wrote, or a model folder")
    if not folder.is_dir():
        raise StageError("a file, not an output folder", path=folder, hint="pass the folder that holds manifest.json")
    manifest, damage = read_manifest_checked(folder)
    info: dict[str, Any] = {"path": str(folder.resolve())}
    if manifest is None and damage:
        info.update(kind=None, manifest=f"manifest.json is {damage}", damaged=True)
    elif manifest is None:
        info.update(kind=None, manifest="none (not written by greenadapt)")
    else:
        stats = manifest.get("stats") or {}
        info.update(
            kind=manifest.get("kind"),
            manifest="ok",
            greenadapt_version=manifest.get("greenadapt_version"),
            created=manifest.get("created"),
            figures={**{k: stats[k] for k in _FIGURES.get(str(manifest.get("kind")), ()) if k in stats}, **_row_figures(stats)},
            parents=[_parent(i) for i in manifest.get("inputs") or [] if isinstance(i, dict)],
            cost=_cost(manifest),
            warnings=list(stats.get("warnings") or []),
        )
        if isinstance(stats.get("per_type"), dict):
            info["per_type"] = stats["per_type"]
        if manifest.get("kind") == kinds.MULTITASK and isinstance(stats.get("scores"), dict):
            tasks = multitask_tasks(manifest.get("config") or {})
            info["task_scores"] = {name: {"metric": tasks.get(name, {}).get("metric"), **splits} for name, splits in stats["scores"].items()
                                   if isinstance(splits, dict)}
            if isinstance(stats.get("average"), dict):  # of the tasks' own metrics
                info["task_average"] = stats["average"]
        if isinstance(stats.get("summary"), dict):
            info["scores"] = stats["summary"]
            info["metric"] = ((manifest.get("config") or {}).get("task") or {}).get("metric") or stats.get("metric")
        if check_files:
            problem = verify_files(folder, manifest)
            info["files"] = problem or "ok"
            info["check"] = {"ok": problem is None, "problem": problem}
    if check_files and "check" not in info:  # nothing to verify the files against
        info["check"] = {"ok": False, "problem": info["manifest"]}
    model = _model(folder)
    if model:
        info["model"] = model
    if manifest is None and not damage and (folder / kinds.COMPARE_RESULT).is_file():
        info.update(_comparison(folder / kinds.COMPARE_RESULT))
        return info
    if manifest is None and not damage and not model:
        raise StageError(
            "neither a greenadapt output nor a model folder (no manifest.json, no config.json)",
            path=folder, hint="pass a folder that a greenadapt command wrote",
        )
    return info


def _comparison(path: Path) -> dict[str, Any]:
    """A compare folder: its variants' headline scores and its verdicts, from compare.json."""
    from greenadapt.artifacts.compare_result import finished_runs, progress_line, read_compare_result

    result = read_compare_result(path)
    finished = finished_runs(result, path.parent)
    variants = []
    for variant in result.get("variants") or []:
        headline = (variant.get("summary") or {}).get(variant.get("headline_pool")) or {}
        variants.append({"name": variant.get("name"), "model": variant.get("model"), "pool": variant.get("headline_pool"),
                         "mean": headline.get("mean"), "sd": headline.get("sd"), "n": headline.get("n")})
    return {"kind": "compare", "manifest": f"none (a compare folder: {kinds.COMPARE_RESULT})", "metric": result.get("metric"),
            "task": (result.get("options") or {}).get("task"), "variants": variants,
            "verdicts": [pair.get("verdict") for pair in result.get("pairs") or []],
            "recommendation": result.get("recommendation"),
            "stopped": result.get("stopped") if isinstance(result.get("stopped"), dict) else None,
            "progress": progress_line(result, finished),
            "finished_runs": finished if result.get("in_progress") else None,
            "where_it_lives": [line for pair in result.get("pairs") or [] for line in pair.get("strata_table") or []],
            "notes": [note for pair in result.get("pairs") or [] for note in pair.get("notes") or []],
            "seconds": result.get("seconds")}


def _row_figures(stats: dict[str, Any]) -> dict[str, Any]:
    """How an expand chose its words, and what a fitted method (distill) did, as lines."""
    figures: dict[str, Any] = {}
    if isinstance(stats.get("selection"), dict):
        figures["min_count"] = stats["selection"].get("min_count")
    fit = stats.get("distill")
    if isinstance(fit, dict):
        loss = (f"; held-out matching loss {fit['heldout_loss_before']:.3f} -> {fit['heldout_loss_after']:.3f}"
                if fit.get("heldout_loss_after") is not None else "")
        figures["distill"] = (f"{fit.get('words_seen', 0):,} rows fitted on {fit.get('windows', 0):,} windows, "
                              f"{fit.get('words_unseen', 0):,} words unseen (lstsq rows){loss}")
    return figures


def _parent(recorded: dict[str, Any]) -> dict[str, Any]:
    parent = {"path": recorded.get("path") or recorded.get("model")}
    for key in ("stage", "role", "kind"):
        if recorded.get(key):
            parent[key] = recorded[key]
    if "files_digest" in recorded and len(parent) == 1:
        parent["role"] = "model"
    return parent


def _cost(manifest: dict[str, Any]) -> dict[str, Any]:
    from greenadapt.machine.energy import cost_of

    cost = cost_of(manifest)  # the report's reading: energy estimated for manifests older than its accounting
    return {
        "wall_seconds": cost.get("wall_seconds"),
        "cpu_hours": round(cost["cpu_hours"], 4),
        "gpu_seconds": cost.get("gpu_seconds") or 0.0,
        "gpu": cost.get("gpu_model"),
        "energy_kwh": cost.get("energy_kwh"),
        "co2_kg": cost.get("co2_kg"),
        "processes": int(cost.get("processes") or 1),  # more than one: stopped, then resumed from a checkpoint
    }


def _model(folder: Path) -> dict[str, Any]:
    config_path = folder / "config.json"
    if not config_path.is_file():
        return {}
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {"config": "config.json is not readable JSON"}
    if not isinstance(config, dict):
        return {"config": "config.json is not a JSON object"}
    from greenadapt.artifacts.model_card import CONFIG_KEY
    from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR

    model: dict[str, Any] = {
        "architecture": (config.get("architectures") or [config.get("model_type")])[0],
        "vocab_size": config.get("vocab_size"),
        "hidden_size": config.get("hidden_size"),
        "layers": config.get("num_hidden_layers"),
        "tokenizers": ["domain (folder root)", f"general ({GENERAL_TOKENIZER_DIR}/)"]
        if (folder / GENERAL_TOKENIZER_DIR).is_dir() else ["one (folder root)"],
    }
    labels = config.get("id2label")
    heads = ("ForTokenClassification", "ForSequenceClassification")
    if isinstance(labels, dict) and any(head in str(config.get("architectures")) for head in heads):
        model["labels"] = [labels[k] for k in sorted(labels, key=lambda k: int(k))]
    if isinstance(config.get(CONFIG_KEY), dict):
        model["greenadapt"] = config[CONFIG_KEY]
    return model


def per_type_cells(kinds: dict[str, Any]) -> str:
    """One split's F1 per entity type over seeds, as every summary shows it: ``Disease 80.12 ± 0.50 (960 gold)``."""
    cells = []
    for kind, value in kinds.items():
        spread = f" ± {100 * value['f1']['std']:.2f}" if value["f1"].get("n", 1) > 1 else ""
        cells.append(f"{kind} {100 * value['f1']['mean']:.2f}{spread} ({value['gold']} gold)")
    return ", ".join(cells)


def render(info: dict[str, Any]) -> str:
    """The description as aligned text lines for a person, with no terminal control character from the files."""
    from greenadapt.errors import escape_controls

    return "\n".join(escape_controls(line) for line in _lines(info))


def _lines(info: dict[str, Any]) -> list[str]:
    lines = [f"{info['path']}"]
    kind = info.get("kind")
    lines.append(f"  kind        {kind or '-'}   (manifest: {info['manifest']})")
    if kind == "compare":
        metric = f", metric {info['metric']}" if info.get("metric") else ""  # a compare cut short has none yet
        lines.append(f"  task        {info.get('task')}{metric}")
        if info.get("progress"):
            lines.append(f"  progress    {info['progress']}")
            lines.append(f"  finished    {', '.join(info.get('finished_runs') or []) or 'none yet'}")
        stopped = info.get("stopped")
        if stopped:
            lines.append(f"  stopped     {stopped.get('why')}; {stopped.get('not_started')} fine-tuning(s) not started")
            lines.append(f"  finished    {', '.join(stopped.get('finished_runs') or []) or 'none'}")
            lines.append(f"  fix         {stopped.get('fix')}")
        for variant in info.get("variants") or []:
            lines.append(f"  variant     {variant['name']:<16} {_spread(variant.get('mean'), variant.get('sd'), variant.get('n'))} "
                         f"({variant.get('pool')} pooling)   {variant.get('model')}")
        lines += [f"  verdict     {verdict}" for verdict in info.get("verdicts") or []]
        if info.get("recommendation"):
            lines.append(f"  recommends  {info['recommendation']}")
        lines += [f"  {line}" for line in info.get("where_it_lives") or []]
        lines += [f"  note        {note}" for note in info.get("notes") or []]
        return lines
    if kind:
        lines.append(f"  written     {info.get('created')} by greenadapt {info.get('greenadapt_version')}")
        for key, value in (info.get("figures") or {}).items():
            lines.append(f"  {key.replace('_', ' '):<11} {_number(value)}")
        scores = info.get("scores") or {}
        for split, value in scores.items():
            if isinstance(value, dict) and "mean" in value:
                # The scale every summary uses: percent, with the metric's name (summary, report, model card).
                seeds = value.get("n") or 1
                spread = f" ± {100 * value.get('std', 0):.2f} over {seeds} seeds" if seeds > 1 else " (1 seed)"
                lines.append(f"  {split + ' score':<11} {info.get('metric') or 'score'} {100 * value['mean']:.2f}{spread}")
        lines += _task_score_lines(info)
        for split, kinds in (info.get("per_type") or {}).items():
            lines.append(f"  {split + ' types':<11} f1 {per_type_cells(kinds)}")
        lines += _cost_line(info.get("cost") or {})
        for parent in info.get("parents") or []:
            label = parent.get("stage") or parent.get("role") or parent.get("kind") or "input"
            lines.append(f"  from        {label}: {parent.get('path')}")
        for warning in info.get("warnings") or []:
            lines.append(f"  warning     {warning}")
        if info.get("files"):
            lines.append(f"  files       {info['files'] if info['files'] == 'ok' else 'CHECK FAILED: ' + str(info['files'])}")
    model = info.get("model") or {}
    if model:
        lines.append(f"  model       {model.get('architecture')}, vocabulary {_number(model.get('vocab_size'))}, "
                     f"{model.get('layers')} layers × {model.get('hidden_size')}")
        lines.append(f"  tokenizers  {', '.join(model.get('tokenizers') or [])}")
        if model.get("labels"):
            lines.append(f"  labels      {', '.join(map(str, model['labels']))}")
        block = model.get("greenadapt")
        if block:
            lines.append(_adapted_line(block))
    return lines


def _cost_line(cost: dict[str, Any]) -> list[str]:
    if cost.get("wall_seconds") is None:
        return []
    gpu = f", {cost['gpu_seconds']:.0f} GPU s ({cost['gpu']})" if cost.get("gpu") else ""
    resumed = f", in {cost['processes']} processes (resumed)" if (cost.get("processes") or 1) > 1 else ""
    return [f"  cost        {cost['wall_seconds']:.0f} s wall, {cost.get('cpu_hours') or 0:.3f} CPU h{gpu}, "
            f"{cost.get('energy_kwh') or 0:.2e} kWh{resumed}"]


def _adapted_line(block: dict[str, Any]) -> str:
    """What a model folder's ``greenadapt`` block says of how it was made: an expansion's new rows, a second view's
    dropped pieces, or what is recorded (never a "None" for what an older or another kind of folder does not record)."""
    if block.get("method") == "second-view":
        return (f"  second view a second tokenizer over the model's own vocabulary, {_number(block.get('drop'))} of its pieces "
                f"dropped (seed {_number(block.get('seed'))}); no new rows")
    rows = block.get("new_rows") or {}
    said = [f"{block['method']}" if block.get("method") else "expanded"]
    if block.get("base_model"):
        said.append(f"on {block['base_model']}")
    head = " ".join(said)
    if rows.get("count") is not None:
        head += f": {_number(rows['count'])} new rows" + (f" from id {_number(rows['first'])}" if rows.get("first") is not None else "")
    if block.get("pooling"):
        head += f"; predictions pooled: {block['pooling']}"
    return f"  expanded    {head}"


def _spread(mean: float | None, sd: float | None, n: int | None) -> str:
    """A score over seeds in percent: ``80.65 ± 0.39 (3 seeds)``; one seed has no spread to show."""
    if mean is None:
        return "-"
    if not n or n < 2:
        return f"{100 * mean:.2f} (1 seed)"
    return f"{100 * mean:.2f} ± {100 * (sd or 0):.2f} ({n} seeds)"


def _task_score_lines(info: dict[str, Any]) -> list[str]:
    """A multitask run's score lines: each task's (in its own metric), then the average."""
    average = {"average": {"metric": None, **info["task_average"]}} if info.get("task_average") else {}
    lines = []
    for name, splits in [*(info.get("task_scores") or {}).items(), *average.items()]:
        metric = f"{splits['metric']} " if splits["metric"] else ""
        figures = ", ".join(f"{split} {metric}{100 * value:.2f}" for split, value in splits.items()
                            if split != "metric" and isinstance(value, int | float))
        lines.append(f"  {'score':<11} {name} {figures}")
    return lines


def _number(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"
