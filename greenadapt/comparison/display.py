"""compare's result for a terminal: the table and the verdict lines."""

from __future__ import annotations

from greenadapt.comparison.run import CompareResult, summarize, verdict_unit
from greenadapt.comparison.strata import strata_lines


def render(result: CompareResult) -> str:
    """The table and the verdict lines, for a terminal."""
    metric = result.metric
    pools = ("mean", "general", "domain")
    lines = [f"{'variant':<16} {'seeds':>5}  " + "  ".join(f"{p + ' ' + metric:>16}" for p in pools)
             + f"  {'fine-tune CPU h':>15}  {'adapt CPU h':>11}"]
    for v in result.variants:
        summary = summarize(v, metric)
        cells = []
        for pool in pools:
            cell = summary.get(pool)
            text = f"{cell['mean'] * 100:.2f} ± {cell['sd'] * 100:.2f}" if cell else "-"
            cells.append(f"{text + ('*' if pool == v.headline_pool and cell else ''):>16}")
        adapt = v.adaptation_cost.get("cpu_seconds")
        adapted = f"{adapt / 3600:.3f}" if adapt is not None else "-"  # a model greenadapt did not make
        lines.append(f"{v.name:<16} {len(v.scores):>5}  " + "  ".join(cells)
                     + f"  {v.finetune_cost.get('cpu_seconds', 0) / 3600:>15.3f}  {adapted:>11}")
    lines.append(f"(* headline: mean pooling for a model with a domain tokenizer; {metric} × 100, mean ± sd over seeds)")
    for pair in result.pairs:
        lines.append(pair.verdict(unit=verdict_unit(metric)))
        lines.extend(f"  {note}" for note in pair.notes)
        lines.extend(strata_lines(pair.to_json()))
    lines.append(f"recommendation: {result.recommendation()}")
    for name, share in result.shares.items():
        lines.append(f"{name}: {share * 100:.0f}% of {result.options.comparator}'s gain" if share is not None
                     else f"{name}: {result.options.comparator} gained nothing to take a share of")
    return "\n".join(lines)
