"""Evaluation metrics, written out so their definitions are explicit and tested.

NER: entity-level precision, recall and F1 with the conlleval definition: a
predicted entity counts only if its span and type both equal a gold entity's.
Chunk boundaries follow conlleval's ``startOfChunk``/``endOfChunk`` with the
BIOES cases of its Python port (``E``/``S`` end a chunk, ``S`` starts one),
so BIO and BIOES both work, and an ``I-`` after ``O`` (or after another
type) starts a new entity, as in conlleval.

Classification: accuracy, micro and macro F1 (macro over the labels present
in gold or predictions, as scikit-learn does by default), the multi-class
Matthews correlation (Gorodkin's R_K, equal to scikit-learn's), and, when a
positive label is known, the binary F1 of that label (MRPC's F1).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# -- chunks: from here to its end marker this code is also copied into a served model's serve_onnx.py
# (greenadapt/inference/onnx_export.py), which must read entities as predict does without importing greenadapt.
Chunk = tuple[int, int, str]  # (first word, last word, type), inclusive


def split_tag(tag: str) -> tuple[str, str]:
    """``"B-Disease"`` → ``("B", "Disease")``, ``"O"`` → ``("O", "")``, ``"I"`` → ``("I", "")``."""
    if "-" in tag:
        prefix, kind = tag.split("-", 1)
        return prefix, kind
    return tag, ""


def end_of_chunk(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    """conlleval's endOfChunk: does a chunk end between the previous word and this one?"""
    if prev_tag in ("E", "S"):
        return True
    if prev_tag in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev_tag != "O" and prev_type != kind


def start_of_chunk(prev_tag: str, tag: str, prev_type: str, kind: str) -> bool:
    """conlleval's startOfChunk: does a chunk start at this word?"""
    if tag in ("B", "S"):
        return True
    if prev_tag in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag != "O" and prev_type != kind


def chunks(tags: Sequence[str]) -> list[Chunk]:
    """The entities of one sentence, conlleval-style."""
    found: list[Chunk] = []
    prev_tag, prev_type = "O", ""
    start: int | None = None
    for position, label in enumerate([*tags, "O"]):
        tag, kind = split_tag(label)
        if start is not None and end_of_chunk(prev_tag, tag, prev_type, kind):
            found.append((start, position - 1, prev_type))
            start = None
        if start_of_chunk(prev_tag, tag, prev_type, kind):
            start = position
        prev_tag, prev_type = tag, kind
    return found
# -- end of chunks


def can_cut_before(tags: Sequence[str], position: int) -> bool:
    """True if no entity spans words ``position - 1`` and ``position``."""
    if position <= 0 or position >= len(tags):
        return True
    prev_tag, prev_type = split_tag(tags[position - 1])
    tag, kind = split_tag(tags[position])
    return prev_tag == "O" or end_of_chunk(prev_tag, tag, prev_type, kind)


def _prf(correct: int, predicted: int, gold: int) -> dict[str, float]:
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def entity_scores(gold: Iterable[Sequence[str]], predicted: Iterable[Sequence[str]]) -> dict[str, Any]:
    """Entity P/R/F1 over sentences (overall and per type), plus word accuracy."""
    correct: Counter[str] = Counter()
    n_gold: Counter[str] = Counter()
    n_pred: Counter[str] = Counter()
    words = right_words = 0
    for gold_tags, pred_tags in zip(gold, predicted, strict=True):
        if len(gold_tags) != len(pred_tags):
            raise ValueError("gold and predicted sentences differ in length")
        gold_chunks = set(chunks(gold_tags))
        pred_chunks = set(chunks(pred_tags))
        for chunk in gold_chunks:
            n_gold[chunk[2]] += 1
        for chunk in pred_chunks:
            n_pred[chunk[2]] += 1
        for chunk in gold_chunks & pred_chunks:
            correct[chunk[2]] += 1
        words += len(gold_tags)
        right_words += sum(g == p for g, p in zip(gold_tags, pred_tags, strict=True))
    result: dict[str, Any] = _prf(sum(correct.values()), sum(n_pred.values()), sum(n_gold.values()))
    result["accuracy"] = right_words / words if words else 0.0
    result["gold_entities"] = sum(n_gold.values())
    result["predicted_entities"] = sum(n_pred.values())
    result["correct_entities"] = sum(correct.values())
    types = sorted(set(n_gold) | set(n_pred))
    if types != [""]:
        result["per_type"] = {t: {**_prf(correct[t], n_pred[t], n_gold[t]), "gold": n_gold[t]} for t in types}
    return result


def classification_scores(
    gold: Sequence[str], predicted: Sequence[str], *, positive: str | None = None
) -> dict[str, Any]:
    """Accuracy, micro/macro F1, MCC, and the positive label's F1 when ``positive`` is given."""
    if len(gold) != len(predicted):
        raise ValueError("gold and predicted differ in length")
    labels = sorted(set(gold) | set(predicted))
    index = {label: i for i, label in enumerate(labels)}
    k = len(labels)
    confusion = [[0] * k for _ in range(k)]
    for g, p in zip(gold, predicted, strict=True):
        confusion[index[g]][index[p]] += 1
    total = len(gold)
    right = sum(confusion[i][i] for i in range(k))
    per_label = {}
    for i, label in enumerate(labels):
        tp = confusion[i][i]
        n_pred = sum(confusion[j][i] for j in range(k))
        n_gold = sum(confusion[i])
        per_label[label] = {**_prf(tp, n_pred, n_gold), "gold": n_gold}
    result: dict[str, Any] = {
        "accuracy": right / total if total else 0.0,
        # Single-label classification: micro P = micro R = accuracy.
        "micro_f1": right / total if total else 0.0,
        "macro_f1": sum(v["f1"] for v in per_label.values()) / k if k else 0.0,
        "mcc": matthews_corrcoef(confusion),
        "per_label": per_label,
        "examples": total,
    }
    if positive is not None:
        result["f1"] = per_label[positive]["f1"] if positive in per_label else 0.0
        result["positive_label"] = positive
    return result


def matthews_corrcoef(confusion: Sequence[Sequence[int]]) -> float:
    """Multi-class MCC (Gorodkin 2004) from a gold × predicted confusion matrix; 0 when undefined."""
    k = len(confusion)
    total = sum(map(sum, confusion))
    right = sum(confusion[i][i] for i in range(k))
    gold_counts = [sum(row) for row in confusion]
    pred_counts = [sum(confusion[i][j] for i in range(k)) for j in range(k)]
    cov_xy = right * total - sum(g * p for g, p in zip(gold_counts, pred_counts, strict=True))
    cov_xx = total * total - sum(p * p for p in pred_counts)
    cov_yy = total * total - sum(g * g for g in gold_counts)
    if cov_xx == 0 or cov_yy == 0:
        return 0.0
    return cov_xy / math.sqrt(cov_xx * cov_yy)


def default_positive_label(labels: Sequence[str]) -> str | None:
    """The positive class of a binary task when it is evident: {0, 1} → 1, {false, true} → true."""
    lowered = {label.lower(): label for label in labels}
    for negative, positive in (("0", "1"), ("false", "true"), ("no", "yes"), ("not_entailment", "entailment")):
        if set(lowered) == {negative, positive}:
            return lowered[positive]
    return None


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "std": std, "n": n}


def summarize_seeds(per_seed: Mapping[str, Mapping[str, Mapping[str, Mapping[str, Any]]]]) -> dict[str, Any]:
    """``per_seed[seed][split][pool]`` metric dicts → ``[split][pool][metric]`` mean ± std of scalar metrics,
    and ``[split][pool]["per_type"][type]`` the same of each entity type's P/R/F1 (seqeval's report, over seeds)."""
    summary: dict[str, Any] = {}
    seeds = list(per_seed)
    first = per_seed[seeds[0]]
    for split, pools in first.items():
        for pool, metrics in pools.items():
            runs = [per_seed[s].get(split, {}).get(pool, {}) for s in seeds]
            for name, value in metrics.items():
                if isinstance(value, float) and all(isinstance(run.get(name), float) for run in runs):
                    summary.setdefault(split, {}).setdefault(pool, {})[name] = mean_std([float(run[name]) for run in runs])
            by_type = _per_type_over_seeds([run.get("per_type") or {} for run in runs])
            if by_type:
                summary.setdefault(split, {}).setdefault(pool, {})["per_type"] = by_type
    return summary


def _per_type_over_seeds(runs: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Each entity type's precision, recall and F1 as mean ± std over the seeds, and its gold count."""
    if not runs or not all(runs):
        return {}
    types = sorted(set().union(*(set(run) for run in runs)))
    zero = {"precision": 0.0, "recall": 0.0, "f1": 0.0, "gold": 0}  # a type one seed neither found nor had
    return {
        kind: {
            **{name: mean_std([float(run.get(kind, zero)[name]) for run in runs]) for name in ("precision", "recall", "f1")},
            "gold": max(int(run.get(kind, zero).get("gold", 0)) for run in runs),
        }
        for kind in types
    }
