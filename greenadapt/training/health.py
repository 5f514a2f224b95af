"""Warnings when training is not learning (every loop of the runtime): a dev score stuck at 0, or a loss that has not fallen.

Checked at each evaluation (the end of an epoch). After :data:`PATIENCE`
evaluations:

- every dev score so far is 0;
- the mean loss of the last :data:`WINDOW` steps is not at least
  :data:`MIN_DROP` below the mean of the first :data:`WINDOW` steps.

Each kind is warned about once, with the figures and the usual causes; the
warnings are also kept for the run's manifest (fine-tuning records them). Nothing stops the run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

PATIENCE = 2
WINDOW = 20
MIN_DROP = 0.05  # a relative drop of 5%
CAUSES = "usual causes: a learning rate too low or too high (--lr), labels that do not match the text, or --max-length cutting the labelled words off"
QA_CAUSES = "usual causes: a learning rate too low or too high (--lr), too few epochs or questions, or answers whose answer_start does not point at their text"


@dataclass
class TrainingHealth:
    losses: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    evaluations: int = 0
    warnings: list[str] = field(default_factory=list)

    def record_loss(self, loss: float) -> None:
        self.losses.append(loss)

    def evaluated(self, score: float | None = None) -> list[str]:
        """After an evaluation (or an epoch without one): the new warnings (also logged)."""
        self.evaluations += 1
        if score is not None:
            self.scores.append(score)
        new = []
        if self.evaluations >= PATIENCE:
            if len(self.scores) >= PATIENCE and all(s == 0 for s in self.scores) and not self._said("dev score"):
                new.append(f"the dev score has stayed 0 after {len(self.scores)} evaluations ({len(self.losses)} steps); {CAUSES}")
            if len(self.losses) >= 2 * WINDOW and not self._said("loss") and self._loss_stalled():
                first, last = sum(self.losses[:WINDOW]) / WINDOW, sum(self.losses[-WINDOW:]) / WINDOW
                new.append(
                    f"the training loss has not fallen after {len(self.losses)} steps (mean {first:.4f} over the first "
                    f"{WINDOW} steps, {last:.4f} over the last {WINDOW}); {CAUSES}"
                )
        for warning in new:
            log.warning("training: %s", warning)
        self.warnings.extend(new)
        return new

    def final_warnings(self) -> list[str]:
        """The warnings about the finished run, for its manifest, summary and ``info``: those whose cause still holds at
        its end. A run whose dev score rose above 0 later, or whose loss fell later, keeps none of them (the log has
        them where they were said, and now a line that they no longer hold)."""
        kept = []
        for warning in self.warnings:
            if "dev score" in warning and any(s > 0 for s in self.scores):
                log.info("training: the dev score recovered (best %.4g): the earlier warning no longer holds", max(self.scores))
            elif "training loss" in warning and not self._loss_stalled():
                log.info("training: the training loss fell later: the earlier warning no longer holds")
            else:
                kept.append(warning)
        return kept

    def _loss_stalled(self) -> bool:
        first, last = sum(self.losses[:WINDOW]) / WINDOW, sum(self.losses[-WINDOW:]) / WINDOW
        return last > first * (1 - MIN_DROP)

    def _said(self, what: str) -> bool:
        return any(what in w for w in self.warnings)


def prediction_warnings(split: str, gold: list[Any], predicted: list[Any]) -> list[str]:
    """Warnings when scored predictions show a model that learned nothing (logged, and returned for the manifest).

    ``gold``/``predicted``: one label per example (classification) or one tag
    sequence per sentence (NER). A model that predicts one label for every
    example, or whose accuracy is no better than always answering the most
    frequent gold label, has not learned the task, whatever its headline says:
    accuracy at the majority rate can look like a score (ChemProt: 36.67).
    """
    if not gold or len(gold) != len(predicted):
        return []
    sequences = isinstance(gold[0], tuple | list)
    new = _entity_warnings(split, gold, predicted) if sequences else _label_warnings(split, gold, predicted)
    for warning in new:
        log.warning("%s: %s", split, warning)
    return new


def answer_warnings(split: str, golds: dict[str, list[str]], predictions: dict[str, str]) -> list[str]:
    """Warnings when a question-answering model learned nothing: it answers no question, gives one answer to
    every question, or none of its answers overlaps a gold one (logged, and returned for the manifest)."""
    from greenadapt.data.squad_metrics import f1_score

    scored = [qid for qid in golds if golds[qid] and qid in predictions]
    if len(scored) < 2:
        return []
    answers = [predictions[qid] for qid in scored]
    new = []
    if not any(answers):
        new.append(f"the model answers no question of {split} ({len(scored)} with gold answers): every answer is empty; {QA_CAUSES}")
    elif len(set(answers)) == 1 and len({golds[qid][0] for qid in scored}) > 1:
        new.append(f"every {split} question gets the answer {answers[0]!r} ({len(scored)} questions): a constant model; {QA_CAUSES}")
    elif not any(max(f1_score(predictions[qid], gold) for gold in golds[qid]) > 0 for qid in scored):
        new.append(f"no {split} answer overlaps its gold answer (F1 0 on {len(scored)} questions); {QA_CAUSES}")
    for warning in new:
        log.warning("%s: %s", split, warning)
    return new


def _entity_warnings(split: str, gold: list[Any], predicted: list[Any]) -> list[str]:
    from greenadapt.data.metrics import chunks  # the entity reading the F1 itself uses (conlleval)

    gold_entities = sum(len(chunks(tags)) for tags in gold)
    predicted_entities = sum(len(chunks(tags)) for tags in predicted)
    if gold_entities and not predicted_entities:
        return [f"the model tags no entity in {split} ({gold_entities} gold entities): every word is 'O'; {CAUSES}"]
    pairs = [(g, p) for tags_g, tags_p in zip(gold, predicted, strict=True) for g, p in zip(tags_g, tags_p, strict=True)]
    distinct = {p for _, p in pairs}
    if len(distinct) == 1 and len({g for g, _ in pairs}) > 1:
        return [f"every word of {split} is tagged {next(iter(distinct))!r}: a constant model; {CAUSES}"]
    worse = below_majority(gold, predicted)
    return [f"the model tags the words of {split} with {worse}; {CAUSES}"] if worse else []


def below_majority(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> str | None:
    """NER: why a model that tags words is worse than tagging every word with the most frequent gold label (None if it
    is not): it learned nothing, whatever entities it predicts (a random head tags hundreds)."""
    from collections import Counter

    pairs = [(g, p) for tags_g, tags_p in zip(gold, predicted, strict=True) for g, p in zip(tags_g, tags_p, strict=True)]
    if not pairs:
        return None
    majority, majority_n = Counter(g for g, _ in pairs).most_common(1)[0]
    accuracy = sum(g == p for g, p in pairs) / len(pairs)
    if accuracy < majority_n / len(pairs):
        return f"accuracy {compared(accuracy, majority_n / len(pairs))} of tagging every word {majority!r}"
    return None


def compared(value: float, reference: float) -> str:
    """``value``, then "below"/"at"/"above" and ``reference``, with as many decimals as it takes for two different
    numbers to read differently ("0.9368, below the 0.9426", never "0.94, below the 0.94")."""
    digits = 2
    while digits < 6 and round(value, digits) == round(reference, digits) and value != reference:
        digits += 1
    where = "below" if value < reference else "at" if value == reference else "above"
    return f"{value:.{digits}f}, {where} the {reference:.{digits}f}"


def _label_warnings(split: str, gold: list[Any], predicted: list[Any]) -> list[str]:
    from collections import Counter

    counts = Counter(gold)
    if len(counts) < 2:
        return []
    majority, majority_n = counts.most_common(1)[0]
    distinct = set(predicted)
    if len(distinct) == 1:
        return [f"every {split} prediction is {next(iter(distinct))!r} ({len(predicted)} examples): a constant, "
                f"majority-class model; {CAUSES}"]
    accuracy = sum(g == p for g, p in zip(gold, predicted, strict=True)) / len(gold)
    rate = majority_n / len(gold)
    if accuracy <= rate:
        return [f"{split} accuracy {compared(accuracy, rate)} majority-class rate (always answering {majority!r}): the model has "
                f"not learned the task; {CAUSES}"]
    return []
