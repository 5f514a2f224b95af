"""What to do next, from a comparison's verdicts and where its gain lives: one plain line (docs/compare.md, "What it
recommends"), shown under the verdicts, kept in compare.json as ``recommendation`` and in the report.

The rule, in order:

1. A pair that is not a verdict (a run learned nothing): no recommendation, the fix for such a run instead.
2. A variant significantly above the baseline (every interval excludes 0): use the best such variant. If the pair has
   strata and its gain is at least as large on test mentions *without* a new word as on those with one, the gain is
   not the new rows': say that R-Drop on the baseline may give it too.
3. Otherwise, a variant significantly below: keep the baseline, naming it.
4. Otherwise (within noise): keep the baseline, the simpler model; with fewer than 3 seeds, run more before deciding;
   and when the best variant's gain is as large without new words, suggest R-Drop on the baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from greenadapt.comparison.strata import WITH_NEW, WITHOUT_NEW

MIN_SEEDS = 3  # fewer seeds than this cannot separate a one-point gain from seed noise (docs/compare.md)
# R-Drop, not --both-views: on the CPU study's four NER sets it was the better of the two on the unadapted model (docs/study.md)
REGULARIZER_HINT = "try R-Drop (`--agreement 1`) on {baseline}: the gain may be the regularizer's, not the new words'"


def recommend(pairs: Sequence[Mapping[str, Any]], *, scale: float = 100.0, unit: str = "F1") -> str:
    """The recommendation line for compare.json's ``pairs`` (their ``to_json`` form)."""
    if not pairs:
        return "nothing to recommend: no pair was compared"
    if any(pair.get("not_a_verdict") for pair in pairs):
        from greenadapt.compute.health import COLLAPSE_FIX

        return f"no recommendation: a run learned nothing ({COLLAPSE_FIX}), then compare again"
    baseline = pairs[0]["baseline"]

    def amount(pair: Mapping[str, Any]) -> str:
        return f"{pair['mean'] * scale:+.2f} {unit}"

    better = [p for p in pairs if p.get("significant95") and p["mean"] > 0]
    if better:
        best = max(better, key=lambda p: p["mean"])
        line = f"use {best['variant']}: {amount(best)} over {baseline}, significant over seeds and test sentences"
        if _gain_without_new_words(best):
            line += "; but its gain is as large on mentions without a new word: " + REGULARIZER_HINT.format(baseline=baseline)
        return line
    worse = [p for p in pairs if p.get("significant95") and p["mean"] < 0]
    if worse:
        worst = min(worse, key=lambda p: p["mean"])
        return f"keep {baseline}: {worst['variant']} is {amount(worst)} below it, significant over seeds and test sentences"
    seeds = min(len(p.get("seeds") or []) for p in pairs)
    line = f"keep {baseline}, the simpler model: no variant is significantly better"
    if seeds < MIN_SEEDS:
        line += f" (over {seeds} seed{'s' * (seeds != 1)}: run at least {MIN_SEEDS} (--seeds 1,2,3) before deciding)"
    best = max(pairs, key=lambda p: p["mean"])
    if best["mean"] > 0 and _gain_without_new_words(best):
        line += "; the gain is as large without new words: " + REGULARIZER_HINT.format(baseline=baseline)
    return line


def _gain_without_new_words(pair: Mapping[str, Any]) -> bool:
    """Whether the pair's difference on mentions without a new word is at least its difference on those with one."""
    rows = {row.get("stratum"): row for row in pair.get("strata") or [] if row.get("split") == "new words"}
    with_new, without = rows.get(WITH_NEW), rows.get(WITHOUT_NEW)
    if not with_new or not without or not with_new.get("mentions") or not without.get("mentions"):
        return False
    return float(without["difference"]) >= float(with_new["difference"])
