"""Runs that learned nothing: a comparison whose baseline (or variant) collapsed is no verdict, and says so.

A fine-tuning that tags no entity, or gives every text one label, scores near zero; a pair against it shows a
large "gain" with an interval that tells nothing of the method. compare reads each run's headline predictions
and names such runs in the pair's notes, in compare.json and under the verdict line, with the usual causes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.errors import StageError
from greenadapt.tasks import get_task
from greenadapt.switches import KEEP_GOING_ENV, switch

if TYPE_CHECKING:
    from greenadapt.comparison.ensembles import Run
    from greenadapt.comparison.recipe import Comparison

NER_OUTSIDE = "O"
COLLAPSE_FIX = "train longer (--epochs), try another --lr, or check the training file's labels"


@dataclass(frozen=True)
class Floor:
    """A run has learned nothing useful when its score is at or near what a model that learned nothing scores."""

    task: str  # ner, or classify (every text-level task)
    measure: str  # what is compared
    threshold: float  # the bound, on the measure's 0-1 scale
    rule: str  # how, in words (docs/compare.md shows this table)


# The one table of "learned nothing" (docs/compare.md, "When a run learns nothing"): a pair holding such a run is no
# verdict, and compare stops at the first one unless --keep-going.
LEARNED_NOTHING = (
    Floor("ner", "entity F1", 0.10, "under 10 (x 100): a handful of the gold entities found, whatever else it does"),
    Floor("ner", "word accuracy", 0.005, "at or within half a point of tagging every word with the most frequent gold label"),
    Floor("classify", "accuracy", 0.005, "at or within half a point of answering the majority label everywhere"),
    Floor("qa", "answer F1", 0.10, "under 10 (x 100): its answers share almost no word with the gold answers (a QA model that "
                                   "learned nothing answers spans at random, about 5)"),
)
_FLOOR = {(floor.task, floor.measure): floor.threshold for floor in LEARNED_NOTHING}


def degenerate(task: str, gold: Sequence[Any], predicted: Sequence[Any]) -> str | None:
    """What is wrong with a run's test predictions when it learned nothing useful (:data:`LEARNED_NOTHING`; None: nothing is)."""
    from collections import Counter

    from greenadapt.training.health import compared

    if task == "ner":
        from greenadapt.data.metrics import entity_scores

        if not any(label != NER_OUTSIDE for sentence in predicted for label in sentence):
            return "tagged no entity"
        scores = entity_scores(gold, predicted)
        if scores["f1"] < _FLOOR["ner", "entity F1"]:
            return f"reached entity F1 {100 * scores['f1']:.1f} ({scores['correct_entities']:,} of {scores['gold_entities']:,} gold entities)"
        words = [g for sentence in gold for g in sentence]
        majority, count = Counter(words).most_common(1)[0] if words else (NER_OUTSIDE, 0)
        rate = count / len(words) if words else 0.0
        if words and scores["accuracy"] <= rate + _FLOOR["ner", "word accuracy"]:
            return f"tagged words with accuracy {compared(scores['accuracy'], rate)} of tagging every word {majority!r}"
        return None
    labels = set(map(str, predicted))
    if len(labels) == 1 and len(set(map(str, gold))) > 1:
        return f"gave every test example the label {labels.pop()!r}"
    if len(set(map(str, gold))) > 1:  # (with one gold label, answering it everywhere is right, not a floor)
        majority, count = Counter(map(str, gold)).most_common(1)[0]
        rate = count / len(gold)
        accuracy = sum(str(g) == str(p) for g, p in zip(gold, predicted, strict=True)) / len(gold)
        if accuracy <= rate + _FLOOR["classify", "accuracy"]:
            return f"reached accuracy {compared(accuracy, rate)} of answering {majority!r} everywhere"
    return None


def degenerate_answers(test_scores: dict[str, float]) -> str | None:
    """What is wrong with a question-answering run's test scores (fractions) when it learned nothing (None: nothing is)."""
    f1 = test_scores.get("f1")
    if f1 is None or f1 >= _FLOOR["qa", "answer F1"]:
        return None
    exact = test_scores.get("exact_match")
    return f"reached answer F1 {100 * f1:.1f}" + (f" (EM {100 * exact:.1f})" if exact is not None else "")


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
        raise stopped_error(f"{run.name} seed {run.seed} {why}", queued, run.folder(options.out))


def stopped_error(what: str, not_started: int, path: Path) -> StageError:
    """The one line of a comparison stopped by a run that learned nothing (sequential or on workers)."""
    return StageError(f"compare stopped: {what}, a run that learned nothing; {not_started} fine-tuning(s) not started",
                      path=path, hint=f"{COLLAPSE_FIX}, then rerun with --force; or --keep-going to train them anyway")
