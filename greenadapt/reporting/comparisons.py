"""A compare folder in the report: its verdicts with their notes, the paired differences, where the gain lives, costs."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from greenadapt.reporting.cells import html_table, img, interval, md_table, num, signed


def compare_pairs_table(comparison: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["pair", f"Δ {comparison['metric']} (×100)", "per seed", "seeds 95%", "test-set bootstrap 95%", "verdict"]
    rows = [
        [f"{p['variant']} vs {p['baseline']}", signed(p["mean"]), ", ".join(signed(d) for d in p["differences"]),
         interval(p, "seed_interval95"), interval(p, "bootstrap_interval95"),
         "significant at 95%" if p["significant95"] else "not significant"]
        for p in comparison["pairs"]
    ]
    return head, rows


def compare_strata_table(comparison: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """NER: each pair's difference by kind of test mention (compare's ``strata``)."""
    head = ["pair", "mentions", "gold mentions", "variant F1", "baseline F1", "Δ F1 (×100)", "test-set bootstrap 95%"]
    rows = [[f"{p['variant']} vs {p['baseline']}", row["stratum"], f"{row['mentions']:,}", f"{100 * row['f1'][p['variant']]:.2f}",
             f"{100 * row['f1'][p['baseline']]:.2f}", signed(row["difference"]), interval(row, "bootstrap_interval95")]
            for p in comparison["pairs"] if not p.get("not_a_verdict") for row in p.get("strata") or []]
    return head, rows


def compare_variants_table(comparison: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    head = ["variant", "headline", "seeds", "mean", "general", "domain", "fine-tune CPU h", "adaptation CPU h", "kWh (both)"]
    rows = []
    for v in comparison["variants"]:
        summary = v["summary"]

        def cell(pool: str, summary: Mapping[str, Any] = summary) -> str:
            found = summary.get(pool)
            if not found:
                return "-"
            return f"{100 * found['mean']:.2f}" + (f" ± {100 * (found.get('sd') or 0):.2f}" if (found.get("n") or 1) > 1 else "")

        tune, adapt = v.get("finetune_cost") or {}, v.get("adaptation_cost") or {}
        rows.append([v["name"], v["headline_pool"], str(len(v["scores"])), cell("mean"), cell("general"), cell("domain"),
                     num((tune.get("cpu_seconds") or 0) / 3600), num((adapt.get("cpu_seconds") or 0) / 3600) if adapt else "-",
                     num((tune.get("energy_kwh") or 0) + (adapt.get("energy_kwh") or 0))])
    return head, rows


def stopped_lines(comparison: Mapping[str, Any]) -> list[str]:
    """A stopped comparison (its compare.json says why): what stopped it, what had finished, the fix."""
    stopped = comparison.get("stopped") or {}
    return [f"Stopped: {stopped.get('why')}; {stopped.get('not_started')} fine-tuning(s) not started.",
            f"Finished runs: {', '.join(stopped.get('finished_runs') or []) or 'none'}.", f"Fix: {stopped.get('fix')}."]


def comparison_html(comparison: Mapping[str, Any], forest: bytes | None) -> list[str]:
    if comparison.get("progress"):
        return [f"<h2>Did it help? <code>{html.escape(str(comparison['path']))}</code></h2>",
                f"<p><strong>{html.escape(comparison['progress'])}</strong></p>"]
    if comparison.get("stopped"):
        return [f"<h2>Did it help? <code>{html.escape(str(comparison['path']))}</code></h2>",
                *(f"<p>{html.escape(line)}</p>" for line in stopped_lines(comparison))]
    metric = comparison["metric"]
    body = [f"<h2>Did it help? <code>{html.escape(str(comparison['path']))}</code></h2>",
            "<ul>" + "".join(f"<li>{html.escape(p['verdict'])}"
                             + "".join(f"<br><em>{html.escape(note)}</em>" for note in p.get("notes") or [])
                             + "</li>" for p in comparison["pairs"]) + "</ul>",
            *([f'<p class="recommendation"><strong>Recommendation:</strong> {html.escape(comparison["recommendation"])}</p>']
              if comparison.get("recommendation") else []),
            img(forest, f"paired differences in {metric} with 95% intervals"),
            html_table(*compare_pairs_table(comparison), numeric=lambda i: 1 <= i <= 4),
            html_table(*compare_variants_table(comparison), numeric=lambda i: i >= 2)]
    if any(p.get("strata") and not p.get("not_a_verdict") for p in comparison["pairs"]):
        body += ["<h3>Where it lives</h3>", html_table(*compare_strata_table(comparison), numeric=lambda i: i >= 2)]
    shares = comparison.get("share_of_comparator_gain") or {}
    if shares:
        comparator = html.escape(str(comparison["options"].get("comparator")))
        parts = [f"{html.escape(n)}: {'-' if s is None else f'{100 * s:.0f}%'} of {comparator}'s gain" for n, s in shares.items()]
        body.append("<p>" + "; ".join(parts) + "</p>")
    body.append(
        '<p class="note">How to read it: each pair is one model against the baseline, fine-tuned with the same recipe '
        "and seeds and scored on the same test examples. Δ is the mean over seeds of the per-seed difference; "
        "the seeds interval (Student t) says how much another set of seeds could move it, the test-set interval "
        "(a paired bootstrap: both models rescored on the same resampled examples) how much another test sample "
        "could. A pair is significant only when every interval excludes 0; a headline is mean pooling for a "
        "model with a domain tokenizer.</p>"
    )
    return body


def comparison_markdown(comparison: Mapping[str, Any]) -> list[str]:
    """The Markdown of one compare folder: verdicts with their notes, the pairs' and variants' tables, where it lives."""
    parts: list[str] = []
    parts += [f"## Did it help? `{comparison['path']}`", ""]
    if comparison.get("progress"):
        return [*parts, f"**{comparison['progress'].capitalize()}**", ""]
    if comparison.get("stopped"):
        return [*parts, *(f"{line}\n" for line in stopped_lines(comparison))]
    parts += [line for p in comparison["pairs"] for line in [f"- {p['verdict']}", *(f"  - {note}" for note in p.get("notes") or [])]]
    if comparison.get("recommendation"):
        parts += ["", f"**Recommendation:** {comparison['recommendation']}"]
    parts += ["", md_table(*compare_pairs_table(comparison)), "", md_table(*compare_variants_table(comparison)), ""]
    if any(p.get("strata") and not p.get("not_a_verdict") for p in comparison["pairs"]):
        parts += ["### Where it lives", "", md_table(*compare_strata_table(comparison)), ""]
    return parts
