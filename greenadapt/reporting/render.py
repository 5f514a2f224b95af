"""Render the collected report data as Markdown (stdout) and one self-contained HTML page."""

from __future__ import annotations

import functools
import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from greenadapt.artifacts import kinds
from greenadapt.artifacts.destination import REPORT_MARKER
from greenadapt.reporting.paper import SOURCE
from greenadapt.reporting.cells import html_table as _html_table
from greenadapt.reporting.cells import img as _img
from greenadapt.reporting.cells import md_table as _md_table
from greenadapt.reporting.cells import num as _num
from greenadapt.reporting.cells import plain as _plain
from greenadapt.reporting.comparisons import comparison_html, comparison_markdown
from greenadapt.reporting.plots import axis_unit

# --------------------------------------------------------------------------
# Number formatting


ENERGY_TEXT_UNITS = (("Wh", 1e3), ("kWh", 1.0), ("MWh", 1e-3))  # base: kWh
CO2_TEXT_UNITS = (("g", 1e3), ("kg", 1.0), ("t", 1e-3))  # base: kg


def _scaled(value: Any, units: Sequence[tuple[str, float]]) -> str:
    """``value`` in the unit its size reads best in (the charts' rule, :func:`plots.axis_unit`), plain decimals."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "—"
    unit, factor = axis_unit([value], units)
    return f"{_plain(value * factor)} {unit}"


def _energy(kwh: Any) -> str:
    return _scaled(kwh, ENERGY_TEXT_UNITS)


def _energy_source(cost: Mapping[str, Any]) -> str:
    """``measured (rapl) @ 481 g/kWh``: the label first, as that is what a reader weighs the figure by."""
    method = cost.get("energy_method")
    if not method:
        return "—"
    text = f"{cost.get('energy_label') or 'estimated'} ({method})"
    if cost.get("co2_intensity_g_per_kwh") is not None:
        text += f" @ {_num(cost['co2_intensity_g_per_kwh'])} g/kWh"
    return text


def _co2(kg: Any) -> str:
    return _scaled(kg, CO2_TEXT_UNITS)


def _mean_std(row: Mapping[str, Any]) -> str:
    # One scale everywhere: percent. QA's scores are percentages already; the labelling tasks' are fractions.
    scale = 1.0 if row.get("kind") == kinds.QA else 100.0
    text = f"{row['mean'] * scale:.2f}"
    if row["n"] > 1:
        text += f" ± {row['std'] * scale:.2f}"
    return text + f" (n={row['n']})"


# --------------------------------------------------------------------------
# Tables, shared by both formats


def stage_table(data: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["stage", "kind", "wall", "CPU time", "GPU time", "peak mem (MiB)", "energy", "CO₂", "energy from"]
    rows = []
    for s in data["stages"]:
        c = s["cost"]
        rows.append(
            [
                s["name"],
                s["kind"],
                _duration(c.get("wall_seconds")),
                _duration(c.get("cpu_seconds")),
                _duration(c.get("gpu_seconds")) if c.get("gpu_seconds") else "—",
                _num(c.get("peak_rss_mib"), 4),
                _energy(c.get("energy_kwh")),
                _co2(c.get("co2_kg")),
                _energy_source(c),
            ]
        )
    return head, rows


def comparison_table(data: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["what", "hardware", "wall", "device time", "energy", "CO₂", "cost"]
    rows = []
    for r in list(data["paper"]["published"]) + list(data["paper"]["ours"]):
        device = f"{_duration(r['device_hours'] * 3600)} ({r.get('device', '')})" if r.get("device_hours") is not None else "—"
        rows.append(
            [
                r["name"],
                r.get("hardware") or "—",
                _duration(r["wall_hours"] * 3600) if r.get("wall_hours") is not None else "—",
                device,
                _energy(r.get("energy_kwh")) + (f" ({r['energy_label']})" if r.get("energy_label") else ""),
                _co2(r.get("co2_kg")),
                r.get("cost_usd") or "—",
            ]
        )
    return head, rows


def ratio_lines(data: Mapping[str, Any]) -> list[str]:
    lines = []
    for r in data["paper"]["ratios"]:
        text = f"{r['ours']} vs {r['reference']}: wall time × {_num(r['wall_ratio'])}"
        if r.get("co2_ratio") is not None:
            text += f", CO₂ × {_num(r['co2_ratio'])}"
        lines.append(text)
    return lines


def alignment_table(data: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["align output", "method", "held-out cosine", "train cosine", "shared words", "new words"]
    rows = [
        [a["name"], str(a["method"]), _num(a["heldout_cosine"]), _num(a["train_cosine"]), _num(a["n_shared"]), _num(a["n_new"])]
        for a in data["alignment"]
    ]
    return head, rows


def pretraining_table(data: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["pretrain output", "model", "steps", "tokens", "held-out loss: domain", "perplexity: domain",
            "held-out loss: general", "tokens/s", "wall", "CPU h", "GPU h"]

    def change(scores: Mapping[str, Any] | None, key: str) -> str:
        if not scores:
            return "—"
        return f"{_num(scores.get(f'{key}_before'), 4)} → {_num(scores.get(f'{key}_after'), 4)}"

    rows = []
    for r in data["pretraining"]:
        notes = [f"tokenizer {r['tokenizer']}"] if r.get("tokenizer") else []
        if r.get("head_warmup_steps"):
            notes.append(f"head warm-up {r['head_warmup_steps']}")
        if r.get("gmap"):
            notes.append(f"G-MAP {r['gmap']}")
        rows.append(
            [
                r["name"],
                f"{r.get('model')} ({', '.join(notes)})" if notes else str(r.get("model")),
                _num(r.get("steps")),
                _num(r.get("tokens")),
                change(r["heldout"].get("domain"), "loss"),
                change(r["heldout"].get("domain"), "perplexity"),
                change(r["heldout"].get("general"), "loss"),
                _num(r.get("tokens_per_second")),
                _duration(r.get("wall_seconds")),
                _num(r.get("cpu_hours")),
                _num(r.get("gpu_hours")) if r.get("gpu_hours") else "—",
            ]
        )
    return head, rows


def neighbour_table(alignment: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["word", "count", "nearest word2vec words", "nearest wordpieces to W·v"]
    rows = []
    for n in alignment["neighbours"]:
        rows.append(
            [
                str(n.get("word")) + (" (probe)" if n.get("kind") == "probe" else ""),
                _num(n.get("count")),
                ", ".join(f"{w} {s:.3f}" for w, s in (n.get("within") or [])) or "—",
                ", ".join(f"{w} {s:.3f}" for w, s in (n.get("cross") or [])) or "—",
            ]
        )
    return head, rows


def results_table(data: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["configuration", "task", "mix", "split", "pooling", "metric", "mean ± sd (%)", "seeds"]
    # a row made by a run that barely trained carries the mark in the row itself, not only in the warnings below
    barely = {w["stage"] for w in data.get("warnings") or [] if str(w.get("warning", "")).startswith("barely trained")}
    rows = [
        [r["group"] + (f" {BARELY_MARK}" if barely & set(r.get("runs") or []) else ""), str(r["task"]), _num(r["mix"]), r["split"],
         r["pool"], r["metric"], _mean_std(r), ",".join(r["seeds"])]
        for r in data["results"]
    ]
    return head, rows


BARELY_MARK = "(barely trained: see the warnings)"


def entity_type_rows(data: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["run", "split", "entity type", "F1 mean ± sd (%)", "seeds", "gold entities"]
    rows = [
        [r["run"], r["split"], r["type"],
         f"{100 * r['f1']['mean']:.2f}" + (f" ± {100 * r['f1']['std']:.2f}" if r["f1"].get("n", 1) > 1 else ""),
         str(r["f1"].get("n", 1)), str(r["gold"])]
        for r in data.get("entity_types") or []
    ]
    return head, rows


def _duration(seconds: Any) -> str:
    """Seconds in the unit its magnitude reads best in: s, min, h, days."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return "—"
    if seconds < 10:
        return f"{_plain(seconds, 2)} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 72 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


# --------------------------------------------------------------------------
# Markdown


def markdown(data: Mapping[str, Any]) -> str:
    parts = ["# greenadapt report", "", "Runs: " + ", ".join(f"`{r}`" for r in data["runs"]), ""]
    parts += ["## Stages and their cost", "", _md_table(*stage_table(data)), ""]
    if data["paper"]["ours"] or data["paper"]["published"]:
        parts += ["## Adaptation cost beside the paper's", "", _md_table(*comparison_table(data)), ""]
        parts += [f"- {line}" for line in ratio_lines(data)]
        parts += ["",
                  f"Published figures: {SOURCE}. Ours: w2v + align + expand of each adapted model, and each continued-pretraining stage on "
                  f"its own; the paper's corpus is far larger.", ""]
    if data.get("finetune_cost"):
        f = data["finetune_cost"]
        parts += [
            f"Fine-tuning, all runs: {_duration(f['wall_seconds'])} wall, {_num(f['cpu_hours'])} CPU h, "
            f"{_energy(f['energy_kwh'])}, {_co2(f['co2_kg'])} CO₂.",
            "",
        ]
    if data["alignment"]:
        parts += ["## Alignment", "", _md_table(*alignment_table(data)), ""]
    if data["pretraining"]:
        parts += ["## Masked-LM pretraining", "", _md_table(*pretraining_table(data)), ""]
    if data["results"]:
        parts += ["## Results", "", _md_table(*results_table(data)), ""]
    if data.get("entity_types"):
        parts += ["### F1 by entity type", "", _md_table(*entity_type_rows(data)), ""]
    if data.get("warnings"):
        parts += ["## Warnings", "", *(f"- `{w['stage']}`: {w['warning']}" for w in data["warnings"]), ""]
    for comparison in data.get("comparisons") or []:
        parts += comparison_markdown(comparison)
    if data["training"]:
        parts += ["## Training", ""]
        for curve in data["training"]:
            last = curve["loss"][-1] if curve["loss"] else None
            dev = curve["dev"][-1] if curve["dev"] else None
            text = f"- `{curve['name']}` seed {curve['seed']}: {len(curve['loss'])} logged steps"
            if last:
                text += f", last loss {last[1]:.4f} at step {int(last[0])}"
            if dev:
                text += f", last dev score {dev[1]:.4f}"
            parts.append(text)
        parts.append("")
    return "\n".join(parts)


# --------------------------------------------------------------------------
# HTML

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;color:#1d1d1d}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}h3{font-size:1rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.85rem}
.scroll{overflow-x:auto;max-width:100%}code{overflow-wrap:anywhere}
@media (max-width:40rem){body{margin:1rem auto;padding:0 .6rem}table{font-size:.75rem}td{white-space:nowrap}}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f4ee}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
img{max-width:100%;height:auto;display:block;margin:.5rem 0}
.note{color:#555;font-size:.8rem}code{font-size:.85em}
"""

# Marks, once the page has loaded, how many of its images decoded (for tests and the curious).
_SCRIPT = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  document.body.setAttribute("data-images", String(images.length));
  document.body.setAttribute("data-images-ok", String(images.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length));
});
"""


def html_page(data: Mapping[str, Any], figures: Mapping[str, bytes | None]) -> str:
    """The whole page; ``figures`` maps a figure key (see :func:`figure_specs`) to PNG bytes."""
    body = ["<h1>greenadapt report</h1>", "<p>Runs: " + ", ".join(f"<code>{html.escape(r)}</code>" for r in data["runs"]) + "</p>"]
    for index, comparison in enumerate(data.get("comparisons") or []):  # the question first: did it help?
        body += comparison_html(comparison, figures.get(f"forest:{index}"))
    body += ["<h2>Stages and their cost</h2>", _html_table(*stage_table(data), numeric=lambda i: 2 <= i <= 7)]
    body.append(_img(figures.get("cost"), "energy and wall time per stage"))
    if figures.get("growth"):
        body += ["<h3>How cost grows</h3>", _img(figures.get("growth"), "wall time and peak memory against size, per stage kind")]
    body.append(
        '<p class="note">Energy: <em>measured</em> where a hardware counter was read (rapl, nvml, or codecarbon in one of '
        "its counter modes), <em>estimated</em> otherwise (codecarbon's cpu_load model, or TDP × utilisation: "
        "tdp-estimate); CO₂ = kWh × the grid intensity recorded with each stage.</p>"
    )
    body += ["<h2>Adaptation cost beside the paper's</h2>", _html_table(*comparison_table(data), numeric=lambda i: 2 <= i <= 6)]
    if ratio_lines(data):
        body.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in ratio_lines(data)) + "</ul>")
    body.append(
        f'<p class="note">Published figures: {html.escape(SOURCE)}. Ours: w2v + align + expand of each adapted model, and each '
        f'continued-pretraining stage on its own; '
        "the paper adapted on a far larger corpus, and its CO₂ figures include a data-centre overhead factor.</p>"
    )
    if data.get("finetune_cost"):
        f = data["finetune_cost"]
        body.append(
            f"<p>Fine-tuning, all runs: {_duration(f['wall_seconds'])} wall, {_num(f['cpu_hours'])} CPU h, "
            f"{_energy(f['energy_kwh'])}, {_co2(f['co2_kg'])} CO₂.</p>"
        )
    if data["alignment"]:
        body += ["<h2>Alignment</h2>", _html_table(*alignment_table(data), numeric=lambda i: i >= 2)]
        for alignment in data["alignment"]:
            if alignment["neighbours"]:
                body.append(f"<h3>Nearest neighbours: {html.escape(alignment['name'])} ({html.escape(str(alignment['method']))})</h3>")
                body.append(_html_table(*neighbour_table(alignment)))
    if data["pretraining"]:
        body += ["<h2>Masked-LM pretraining</h2>", _html_table(*pretraining_table(data), numeric=lambda i: i >= 2)]
    if data["results"]:
        body += ["<h2>Results</h2>", _html_table(*results_table(data))]
        if data.get("entity_types"):
            body += ["<h3>F1 by entity type</h3>", _html_table(*entity_type_rows(data), numeric=lambda i: i >= 3)]
        for key, title in result_groups(data):
            body.append(_img(figures.get(key), title))
        if figures.get("accuracy_vs_cost"):
            body += ["<h3>Accuracy against adaptation cost</h3>", _img(figures.get("accuracy_vs_cost"), "accuracy against adaptation cost")]
    if data.get("warnings"):
        items = "".join(f"<li><code>{html.escape(w['stage'])}</code>: {html.escape(w['warning'])}</li>" for w in data["warnings"])
        body += ["<h2>Warnings</h2>", f'<ul class="warnings">{items}</ul>']
    if data["training"]:
        body.append("<h2>Training curves</h2>")
        for key, title in curve_groups(data):
            body.append(_img(figures.get(key), title))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"{REPORT_MARKER}"
        "<title>greenadapt report</title>"
        f"<style>{_CSS}</style><script>{_SCRIPT}</script></head><body>\n" + "\n".join(b for b in body if b) + "\n</body></html>\n"
    )


# --------------------------------------------------------------------------
# Which figures the page has


def result_groups(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """One results figure per task and split: (figure key, title)."""
    seen = dict.fromkeys((r["task"], r["split"]) for r in data["results"])
    return [(f"results:{task}:{split}", f"{task}, {split} split") for task, split in seen]


def _curve_family(group: str) -> str:
    """Curves are drawn together per data set: the configuration's parent folder (``.../finetune/<set>``)."""
    return group.rsplit("/", 1)[0] if "/" in group else group


def curve_groups(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    seen = dict.fromkeys(_curve_family(c["group"]) for c in data["training"])
    return [(f"curve:{family}", family) for family in seen]


def figure_specs(data: Mapping[str, Any]) -> dict[str, Callable[[], bytes | None]]:
    from greenadapt.reporting import plots

    specs: dict[str, Callable[[], bytes | None]] = {
        "cost": lambda: plots.cost_chart(data["stages"]),
        "growth": lambda: plots.growth_chart(data.get("growth", [])),
        "accuracy_vs_cost": lambda: plots.accuracy_cost_chart(data.get("accuracy_vs_cost", [])),
    }
    for key, title in result_groups(data):
        _, task, split = key.split(":", 2)
        rows = [r for r in data["results"] if str(r["task"]) == task and r["split"] == split]
        specs[key] = functools.partial(plots.results_chart, rows, title)
    for key, family in curve_groups(data):
        curves = [c for c in data["training"] if _curve_family(c["group"]) == family]
        specs[key] = functools.partial(plots.curve_chart, curves, family)
    for index, comparison in enumerate(data.get("comparisons") or []):
        if comparison.get("pairs"):  # (a stopped comparison has none to plot)
            specs[f"forest:{index}"] = functools.partial(plots.forest_plot, comparison["pairs"], comparison["metric"])
    return specs


# --------------------------------------------------------------------------
# A compare folder: "did it help?"
