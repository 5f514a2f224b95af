"""SQuAD evaluation: exact match and F1 with the official normalisation, plus substring match.

``normalize_answer``, exact match and token F1 follow the official SQuAD
v2.0 evaluation script (which equals v1.1 on answerable questions): lower
case, drop ASCII punctuation and the articles a/an/the, collapse
whitespace; a question's score is the maximum over its gold answers; a
question with no non-empty gold answer is scored against "". Substring
match (a Covid-QA convention for long free-text answers) counts a
prediction whose normalised text contains a normalised gold answer or is
contained in one; an empty string only matches an empty string.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    lowered = text.lower()
    no_punct = "".join(ch for ch in lowered if ch not in _PUNCTUATION)
    no_articles = _ARTICLES.sub(" ", no_punct)
    return " ".join(no_articles.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def substring_match(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if not pred or not ref:
        return float(pred == ref)
    return float(ref in pred or pred in ref)


def scoring_golds(answers: Sequence[str]) -> list[str]:
    """The gold texts a prediction is scored against (official v2.0 rule)."""
    golds = [text for text in answers if normalize_answer(text)]
    return golds or [""]


def evaluate(predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """Percentages over the questions in ``golds``; a missing prediction scores 0 (as "")."""
    totals = {"exact_match": 0.0, "f1": 0.0, "substring_match": 0.0}
    for qid, answers in golds.items():
        prediction = predictions.get(qid, "")
        references = scoring_golds(answers)
        totals["exact_match"] += max(exact_match(prediction, ref) for ref in references)
        totals["f1"] += max(f1_score(prediction, ref) for ref in references)
        totals["substring_match"] += max(substring_match(prediction, ref) for ref in references)
    n = len(golds)
    result: dict[str, Any] = {name: (100.0 * value / n if n else None) for name, value in totals.items()}
    result["scored_questions"] = n
    return result
