"""Per-example contributions to a task's metric, from gold labels and one model's predictions.

Each function returns :class:`~greenadapt.comparison.statistics.Contributions`
whose metric, applied to the column sums of all rows, gives exactly what
``finetune`` reports (tests hold the two equal), so a bootstrap resample is
rescored without the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from greenadapt.tasks import get_task
from greenadapt.comparison.statistics import Contributions


def _f1(correct: float, predicted: float, gold: float) -> float:
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def ner_contributions(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> Contributions:
    """Entity-level micro F1 (conlleval chunks): per sentence (correct, predicted, gold) entity counts."""
    from greenadapt.data.metrics import chunks

    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    rows = np.zeros((len(gold), 3), dtype=np.int64)
    for i, (gold_tags, pred_tags) in enumerate(zip(gold, predicted, strict=True)):
        gold_chunks, pred_chunks = set(chunks(gold_tags)), set(chunks(pred_tags))
        rows[i] = (len(gold_chunks & pred_chunks), len(pred_chunks), len(gold_chunks))
    return Contributions(rows, lambda sums: _f1(*sums))


def classification_contributions(gold: Sequence[str], predicted: Sequence[str], metric: str,
                                 positive: str | None = None) -> Contributions:
    """Accuracy / micro F1, macro F1 or the positive label's F1, from one-hot (gold, predicted) rows per example."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold examples but {len(predicted)} predicted")
    labels = sorted(set(gold) | set(predicted))
    index = {label: i for i, label in enumerate(labels)}
    k = len(labels)
    rows = np.zeros((len(gold), 2 * k + 1), dtype=np.int64)  # gold one-hot, predicted one-hot, right
    for i, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        rows[i, index[g]] = 1
        rows[i, k + index[p]] = 1
        rows[i, 2 * k] = int(g == p)
    # Right per label needs the joint count: one more one-hot block, (label right) per example.
    right = np.zeros((len(gold), k), dtype=np.int64)
    for i, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        if g == p:
            right[i, index[g]] = 1
    rows = np.concatenate([rows, right], axis=1)

    def per_label_f1(sums: np.ndarray) -> list[float]:
        gold_n, pred_n, right_n = sums[:k], sums[k : 2 * k], sums[2 * k + 1 :]
        return [_f1(float(right_n[j]), float(pred_n[j]), float(gold_n[j])) for j in range(k)]

    if metric in ("accuracy", "micro_f1"):
        return Contributions(rows, lambda sums: float(sums[2 * k]) / float(sums[:k].sum()) if sums[:k].sum() else 0.0)
    if metric == "macro_f1":
        # As finetune reports it: over the labels seen in gold or predictions of the whole test set.
        return Contributions(rows, lambda sums: float(np.mean(per_label_f1(sums))) if k else 0.0)
    if metric == "f1" and positive is not None and positive in index:
        j = index[positive]
        return Contributions(rows, lambda sums: per_label_f1(sums)[j])
    raise ValueError(f"no per-example form of metric {metric!r}")


def qa_contributions(predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]]) -> Contributions:
    """SQuAD F1 (a fraction): per question its best token F1 over the gold answers, as ``qa.metrics.evaluate``;
    a question without a prediction scores 0."""
    from greenadapt.data.squad_metrics import f1_score, scoring_golds

    rows = np.array([[max(f1_score(predictions.get(qid, ""), ref) for ref in scoring_golds(answers)), 1.0]
                     for qid, answers in golds.items()], dtype=np.float64)
    return Contributions(rows, lambda sums: float(sums[0]) / float(sums[1]) if sums[1] else 0.0)


def contributions_for(task: str, metric: str, gold: Sequence[Any], predicted: Sequence[Any], positive: str | None = None) -> Contributions:
    """The contributions of ``task`` (``ner`` or ``classify``) under ``metric``."""
    if get_task(task).finds_entities:
        return ner_contributions(gold, predicted)
    return classification_contributions(gold, predicted, metric, positive)
