"""Runs that learned nothing: a comparison whose baseline (or variant) collapsed is no verdict, and says so.

A fine-tuning that tags no entity, or gives every text one label, scores near zero; a pair against it shows a
large "gain" with an interval that tells nothing of the method. compare reads each run's headline predictions
and names such runs in the pair's notes, in compare.json and under the verdict line, with the usual causes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.errors import StageError
from greenadapt.tasks import get_task

if TYPE_CHECKING:
    from greenadapt.comparison.ensembles import Run
    from greenadapt.comparison.recipe import CompareOptions

NER_OUTSIDE = "O"
COLLAPSE_FIX = "train longer (--epochs), try another --lr, or check the training file's labels"


def degenerate(task: str, gold: Sequence[Any], predicted: Sequence[Any]) -> str | None:
    """What is wrong with a run's test predictions when it learned nothing (None: nothing is)."""
    if task == "ner":
        from greenadapt.training.health import below_majority

        if not any(label != NER_OUTSIDE for sentence in predicted for label in sentence):
            return "tagged no entity"
        worse = below_majority(gold, predicted)
        return f"tagged words with {worse}" if worse else None
    labels = set(map(str, predicted))
    if len(labels) == 1 and len(set(map(str, gold))) > 1:
        return f"gave every test example the label {labels.pop()!r}"
    return None


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


def learned_nothing(options: CompareOptions, run: Run) -> str | None:
    """What is wrong with a finished run that learned nothing (its test predictions under its headline pool), else None."""
    from greenadapt.comparison.ensembles import read_by_pool

    by_pool = read_by_pool(run.folder(options.out))
    if by_pool is None or get_task(options.task).answers_questions:
        return None
    pools = by_pool["pools"]
    return degenerate(options.task, by_pool["gold"], pools["mean"] if "mean" in pools else pools["general"])


KEEP_GOING_ENV = "GREENADAPT_KEEP_GOING"  # 1: every compare goes on past a run that learned nothing, as --keep-going


def keeps_going(options: CompareOptions) -> bool:
    return options.keep_going or os.environ.get(KEEP_GOING_ENV, "").strip() == "1"


def stop_if_it_learned_nothing(options: CompareOptions, run: Run, *, queued: int) -> None:
    """Fail fast: the first run that learned nothing stops the comparison (unless --keep-going): half an hour of
    fine-tunings on a recipe that teaches nothing is no verdict."""
    why = None if keeps_going(options) or not queued else learned_nothing(options, run)
    if why is not None:
        raise stopped_error(f"{run.name} seed {run.seed} {why}", queued, run.folder(options.out))


def stopped_error(what: str, not_started: int, path: Path) -> StageError:
    """The one line of a comparison stopped by a run that learned nothing (sequential or on workers)."""
    return StageError(f"compare stopped: {what}, a run that learned nothing; {not_started} fine-tuning(s) not started",
                      path=path, hint=f"{COLLAPSE_FIX}, then rerun with --force; or --keep-going to train them anyway")
