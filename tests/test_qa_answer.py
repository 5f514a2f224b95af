"""Span search: best start(k) + end(k'), k ≤ k', within the character limit, n-best with softmax."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from greenadapt.corpus.words import Words, split_words
from greenadapt.inference.qa.answer import nbest_answers, softmax, top_spans
from greenadapt.inference.qa.settings import AnswerSpanSettings

CONTEXT = "Fever is common. The main cause is mother-to-child transmission of HIV."


def test_hand_built_logits_give_the_expected_span() -> None:
    words = split_words(CONTEXT)
    texts = [CONTEXT[s:e] for s, e in zip(words.starts, words.ends, strict=True)]
    start = np.full(len(words), -5.0)
    end = np.full(len(words), -5.0)
    start[texts.index("mother")] = 4.0
    end[texts.index("transmission")] = 3.0
    end[texts.index("Fever")] = 9.0  # before the best start: never paired with it
    answers = nbest_answers(CONTEXT, words, start, end, spans=AnswerSpanSettings(max_answer_chars=500), n_best=5)
    assert answers[0]["text"] == "mother-to-child transmission"
    assert answers[0]["score"] == 7.0 and answers[0]["start_logit"] == 4.0 and answers[0]["end_logit"] == 3.0
    assert CONTEXT[answers[0]["start"] : answers[0]["end"]] == answers[0]["text"]


def test_character_limit_excludes_longer_spans() -> None:
    words = split_words(CONTEXT)
    texts = [CONTEXT[s:e] for s, e in zip(words.starts, words.ends, strict=True)]
    start = np.zeros(len(words))
    end = np.zeros(len(words))
    start[texts.index("The")] = 10.0
    end[texts.index("HIV")] = 10.0  # "The main ... HIV" is 54 characters
    end[texts.index("cause")] = 6.0
    best = nbest_answers(CONTEXT, words, start, end, spans=AnswerSpanSettings(max_answer_chars=30), n_best=3)[0]
    assert best["text"] == "The main cause"
    assert all(len(a["text"]) <= 30 for a in nbest_answers(CONTEXT, words, start, end,
                                                           spans=AnswerSpanSettings(max_answer_chars=30), n_best=20))
    assert nbest_answers(CONTEXT, words, start, end, spans=AnswerSpanSettings(max_answer_chars=60), n_best=1)[0]["text"] == CONTEXT[17:-1]


def test_nbest_probabilities_are_a_softmax_over_sorted_scores() -> None:
    rng = np.random.default_rng(1)
    words = split_words(CONTEXT)
    start, end = rng.normal(size=(2, len(words)))
    answers = nbest_answers(CONTEXT, words, start, end, spans=AnswerSpanSettings(max_answer_chars=40), n_best=20)
    assert len(answers) == 20
    scores = [a["score"] for a in answers]
    assert scores == sorted(scores, reverse=True)
    probabilities = [a["probability"] for a in answers]
    assert abs(sum(probabilities) - 1.0) < 1e-9
    np.testing.assert_allclose(probabilities, np.exp(scores) / np.exp(scores).sum(), rtol=1e-6)
    assert len({(a["start"], a["end"]) for a in answers}) == 20
    for answer in answers:
        assert CONTEXT[answer["start"] : answer["end"]] == answer["text"] and len(answer["text"]) <= 40
    assert softmax([]) == []


def test_words_without_logits_are_never_chosen() -> None:
    words = split_words("alpha beta gamma")
    start = np.array([-np.inf, 1.0, 0.0])
    end = np.array([5.0, -np.inf, 0.5])
    spans = top_spans(start, end, words, spans=AnswerSpanSettings(max_answer_chars=100), n_best=10)
    assert [(s.first_word, s.last_word) for s in spans] == [(1, 2), (2, 2)]


def _brute_force(start: np.ndarray, end: np.ndarray, words: Words, max_chars: int) -> list[tuple[float, int, int]]:
    spans = []
    for k in range(len(words)):
        for k2 in range(k, len(words)):
            if words.ends[k2] - words.starts[k] <= max_chars and np.isfinite(start[k] + end[k2]):
                spans.append((float(np.float32(start[k]) + np.float32(end[k2])), k, k2))
    return sorted(spans, key=lambda item: (-item[0], item[1], item[2] - item[1]))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(1, 12), min_size=1, max_size=40),
    st.integers(1, 60),
    st.integers(1, 25),
    st.integers(0, 2**31 - 1),
)
def test_matches_brute_force(lengths: list[int], max_chars: int, n_best: int, seed: int) -> None:
    gaps = np.random.default_rng(seed).integers(0, 3, size=len(lengths))
    starts, position = [], 0
    for length, gap in zip(lengths, gaps, strict=True):
        position += int(gap)
        starts.append(position)
        position += length
    words = Words(np.array(starts), np.array(starts) + np.array(lengths))
    rng = np.random.default_rng(seed)
    start = rng.integers(-3, 4, size=len(lengths)).astype(np.float32)  # small integers: many ties
    end = rng.integers(-3, 4, size=len(lengths)).astype(np.float32)
    expected = _brute_force(start, end, words, max_chars)[:n_best]
    spans = AnswerSpanSettings(max_answer_chars=max_chars)
    got = [(s.score, s.first_word, s.last_word) for s in top_spans(start, end, words, spans=spans, n_best=n_best)]
    assert got == expected


def _python_lines(call: Any) -> tuple[Any, int]:
    """What ``call()`` returns, and how many Python lines it ran: a count of work that no machine's speed changes."""
    import sys

    lines = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal lines
        lines += event == "line"
        return tracer

    sys.settrace(tracer)
    try:
        return call(), lines
    finally:
        sys.settrace(None)


def test_long_document_search_is_vectorised() -> None:
    """The span search runs as array operations: the Python it runs does not grow with the document (O(n²) Python
    over 12k words would be 10^8 lines), counted in lines rather than timed."""
    def document(n: int) -> tuple[str, Any, Any, Any]:
        rng = np.random.default_rng(0)
        text = " ".join("w" * int(k) for k in rng.integers(1, 10, size=n))
        words = split_words(text)
        start, end = rng.normal(size=(2, len(words))).astype(np.float32)
        return text, words, start, end

    small = document(3_000)
    _, short = _python_lines(lambda: nbest_answers(*small, spans=AnswerSpanSettings(max_answer_chars=500), n_best=20))
    text, words, start, end = document(12_000)
    answers, long = _python_lines(lambda: nbest_answers(text, words, start, end, spans=AnswerSpanSettings(max_answer_chars=500), n_best=20))
    assert long <= 2 * short + 100, (short, long)  # four times the words, not four (or sixteen) times the Python
    best = max(
        (start[k] + end[k2], k, k2)
        for k in range(len(words))
        for k2 in range(k, min(len(words), k + 120))
        if words.ends[k2] - words.starts[k] <= 500
    )
    assert answers[0]["score"] == float(best[0])
