"""Runs that learned nothing: a comparison whose baseline (or variant) collapsed is no verdict, and says so.

A fine-tuning that tags no entity, or gives every text one label, scores near zero; a pair against it shows a
large "gain" with an interval that tells nothing of the method. compare reads each run's headline predictions
and names such runs in the pair's notes, in compare.json and under the verdict line, with the usual causes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
