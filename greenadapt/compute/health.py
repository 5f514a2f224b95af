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
CAUSES = ("usual causes: a learning rate too low or too high (--lr), labels that do not match the text, or --max-length cutting the "
          "labelled words off")
QA_CAUSES = ("usual causes: a learning rate too low or too high (--lr), too few epochs or questions, or answers whose answer_start does "
             "not point at their text")


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
        shown = answers[0] if len(answers[0]) <= 60 else answers[0][:59] + "…"  # an answer can run to --max-answer-chars
        new.append(f"every question of {split} gets the answer {shown!r} ({len(scored)} questions): a constant model; {QA_CAUSES}")
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
        return [f"every prediction of {split} is {next(iter(distinct))!r} ({len(predicted)} examples): a constant, "
                f"majority-class model; {CAUSES}"]
    accuracy = sum(g == p for g, p in zip(gold, predicted, strict=True)) / len(gold)
    rate = majority_n / len(gold)
    if accuracy <= rate:
        return [f"{split} accuracy {compared(accuracy, rate)} majority-class rate (always answering {majority!r}): the model has "
                f"not learned the task; {CAUSES}"]
    return []


# -- a run that learned nothing, or barely trained: one judgement for finetune, info, report and compare ------------

NER_OUTSIDE = "O"
COLLAPSE_FIX = "train longer (--epochs), try another --lr, or check the training file's labels"


def collapse_fix(max_steps: int | None = None) -> str:
    """What to change after a run that learned nothing, naming the limit that was set: ``--max-steps`` when it cut the
    recipe short (raising ``--epochs`` would change nothing then), else the epochs."""
    if max_steps:
        return (f"train longer (--max-steps {max_steps} stopped it: raise it or leave it out), try another --lr, "
                "or check the training file's labels")
    return COLLAPSE_FIX


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

    if task == "ner":
        from greenadapt.data.metrics import entity_scores

        if not any(label != NER_OUTSIDE for sentence in predicted for label in sentence):
            return "tagged no entity"
        scores = entity_scores(gold, predicted)
        if scores["f1"] < _FLOOR["ner", "entity F1"]:
            return (f"reached entity F1 {100 * scores['f1']:.1f} ({scores['correct_entities']:,} of {scores['gold_entities']:,} gold "
                    f"entities)")
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


BUDGET_SHARE = 0.25  # a run trained on less than this share of its task's recipe is said to be barely trained


@dataclass(frozen=True)
class Budget:
    """What a run trained on, against its task's recipe (the task's default epochs over the same examples)."""

    seen: int  # training examples shown (steps x batch, at most epochs x examples)
    recipe: int  # the recipe's: its epochs x the examples
    spent: str  # how, in words: "60 steps × batch 32"
    recipe_words: str  # "3 epochs × 6,347"
    task: str

    @property
    def share(self) -> float:
        return self.seen / self.recipe if self.recipe else 1.0

    @property
    def short(self) -> bool:
        return self.share < BUDGET_SHARE

    def words(self) -> str:
        return (f"{self.spent} = {self.seen:,} training examples, {100 * self.share:.0f}% of the {self.task} recipe "
                f"({self.recipe_words} = {self.recipe:,})")


def training_budget(task: str, examples: int, *, recipe_epochs: int, epochs: int | None, max_steps: int | None, batch: int) -> Budget:
    """The budget of a run of ``examples`` training examples against its task's recipe of ``recipe_epochs`` epochs."""
    epochs = epochs or recipe_epochs
    seen = min(max_steps * batch, epochs * examples) if max_steps is not None else epochs * examples
    spent = f"{max_steps:,} steps × batch {batch}" if max_steps is not None else f"{epochs} epoch(s) × {examples:,}"
    return Budget(seen, recipe_epochs * examples, spent, f"{recipe_epochs} epochs × {examples:,}", task)


BARELY_TRAINED_FIX = "train longer (--epochs, or more --max-steps) or try another --lr"


def barely_trained_warning(budget: Budget) -> str | None:
    """finetune's warning for a run under :data:`BUDGET_SHARE` of its recipe (in its summary, ``info`` and ``report``)."""
    if not budget.short:
        return None
    return f"barely trained: {budget.words()}; its scores are not what the recipe reaches: {BARELY_TRAINED_FIX}"


def learned_nothing_warning(task: str, split: str, gold: Sequence[Any], predicted: Sequence[Any]) -> str | None:
    """finetune's warning for a run whose ``split`` predictions are at compare's floor (:data:`LEARNED_NOTHING`)."""
    why = degenerate(task, gold, predicted)
    return f"learned nothing on {split}: it {why}; {COLLAPSE_FIX}" if why else None
