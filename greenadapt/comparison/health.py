"""Runs that learned nothing: a comparison whose baseline (or variant) collapsed is no verdict, and says so.

A fine-tuning that tags no entity, or gives every text one label, scores near zero; a pair against it shows a
large "gain" with an interval that tells nothing of the method. compare reads each run's headline predictions
and names such runs in the pair's notes, in compare.json and under the verdict line, with the usual causes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from greenadapt.errors import StageError
from greenadapt.tasks import get_task
from greenadapt.switches import KEEP_GOING_ENV, switch

# The judgement itself (the floors, what a run that learned nothing did) is the training's: finetune's summary, info
# and report say it of a single run in the same words (compute/health.py); compare stops on it and withholds verdicts.
from greenadapt.compute.health import COLLAPSE_FIX, LEARNED_NOTHING, Floor, collapse_fix, degenerate, degenerate_answers

if TYPE_CHECKING:
    from greenadapt.comparison.ensembles import Run
    from greenadapt.comparison.recipe import Comparison

__all__ = ["COLLAPSE_FIX", "LEARNED_NOTHING", "Floor", "collapse_notes", "degenerate", "degenerate_answers", "keeps_going",
           "learned_nothing", "stop_if_it_learned_nothing", "stopped_error"]

def collapse_notes(collapsed: dict[str, dict[int, str]], variant: str, baseline: str) -> list[str]:
    """The notes of the pair ``variant`` vs ``baseline`` for the runs of either that learned nothing."""
    notes = []
    for name in (baseline, variant):
        by_seed = collapsed.get(name) or {}
        if not by_seed:
            continue
        seeds = sorted(by_seed)
        what = sorted(set(by_seed.values()))
        notes.append(f"not a verdict: {name} {' / '.join(what)} on seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}: "
                     f"a run that learned nothing ({COLLAPSE_FIX})")
    return notes


def learned_nothing(options: Comparison, run: Run) -> str | None:
    """What is wrong with a finished run that learned nothing (its test predictions under its headline pool), else None."""
    from greenadapt.comparison.ensembles import read_by_pool

    if get_task(options.task).answers_questions:
        import json

        try:
            test = json.loads((run.folder(options.out) / "metrics.json").read_text(encoding="utf-8")).get("test") or {}
        except (OSError, ValueError, AttributeError, RecursionError):
            return None
        return degenerate_answers({k: float(v) / 100 for k, v in test.items() if isinstance(v, int | float)})
    by_pool = read_by_pool(run.folder(options.out))
    if by_pool is None:
        return None
    pools = by_pool["pools"]
    return degenerate(options.task, by_pool["gold"], pools["mean"] if "mean" in pools else pools["general"])




def keeps_going(options: Comparison) -> bool:
    return options.keep_going or bool(switch(KEEP_GOING_ENV))


def stop_if_it_learned_nothing(options: Comparison, run: Run, *, queued: int) -> None:
    """Fail fast: the first run that learned nothing stops the comparison (unless --keep-going): half an hour of
    fine-tunings on a recipe that teaches nothing is no verdict."""
    why = None if keeps_going(options) or not queued else learned_nothing(options, run)
    if why is not None:
        raise stopped_error(f"{run.name} seed {run.seed} {why}", queued, run.folder(options.out), options.max_steps)


class CompareStopped(StageError):
    """A comparison stopped by a run that learned nothing: what it did, and how many fine-tunings were not started."""

    def __init__(self, what: str, not_started: int, path: Path, max_steps: int | None = None) -> None:
        self.fix = collapse_fix(max_steps)
        super().__init__(f"compare stopped: {what}, a run that learned nothing; {not_started} fine-tuning(s) not started",
                         path=path, hint=f"{self.fix}, then rerun with --force; or --keep-going to train them anyway")
        self.what, self.not_started = what, not_started


def stopped_error(what: str, not_started: int, path: Path, max_steps: int | None = None) -> CompareStopped:
    """The one line of a comparison stopped by a run that learned nothing (sequential or on workers)."""
    return CompareStopped(what, not_started, path, max_steps)
