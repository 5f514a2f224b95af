"""Best answer spans from word-level start/end logits.

A span is a pair of words ``k ≤ k'`` whose characters ``[start_k, end_k')``
are at most ``--max-answer-chars`` long; its score is ``start(k) + end(k')``. For
each start word the admissible end words form a contiguous band (word end
offsets increase), so all candidates fit a ``words × band`` matrix that is
scored and partially sorted with numpy, in row blocks to bound memory: a
10,000-word paper with a 500-character limit is a few million scores, not
a Python loop over 10⁸ pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from greenadapt.inference.qa.settings import AnswerSpanSettings
    import numpy as np

    from greenadapt.corpus.words import Words

_BLOCK_CELLS = 1 << 21  # scores per block: 8 MiB of float32


@dataclass(frozen=True)
class Span:
    first_word: int
    last_word: int
    score: float
    start_logit: float
    end_logit: float


def top_spans(
    start: np.ndarray,
    end: np.ndarray,
    words: Words,
    *,
    spans: AnswerSpanSettings,
    n_best: int,
) -> list[Span]:
    """The ``n_best`` highest-scoring spans ``spans`` admits, best first (ties: earlier, then shorter)."""
    import numpy as np

    n = len(words)
    if n == 0 or n_best < 1:
        return []
    start = np.asarray(start, dtype=np.float32)
    end = np.asarray(end, dtype=np.float32)
    # last_end[k]: the last word k' whose span from k stays within the character limit (< k when none does).
    last_end = np.searchsorted(words.ends, words.starts + spans.max_answer_chars, side="right") - 1
    band = int((last_end - np.arange(n)).max()) + 1
    if band <= 0:
        return []
    offsets = np.arange(band)
    rows_per_block = max(1, _BLOCK_CELLS // band)
    cand_first: list[np.ndarray] = []
    cand_last: list[np.ndarray] = []
    cand_score: list[np.ndarray] = []
    for first in range(0, n, rows_per_block):
        rows = np.arange(first, min(n, first + rows_per_block))
        last = rows[:, None] + offsets[None, :]
        valid = last <= last_end[rows][:, None]
        scores = np.where(valid, start[rows][:, None] + end[np.minimum(last, n - 1)], -np.inf)
        flat = scores.ravel()
        if n_best < flat.size:
            # Everything tied with the n-th best survives, so ties break the same way in every block.
            threshold = -np.partition(-flat, n_best - 1)[n_best - 1]
            top = np.flatnonzero(flat >= threshold)
        else:
            top = np.arange(flat.size)
        top = top[np.isfinite(flat[top])]
        cand_first.append(rows[top // band])
        cand_last.append(last.ravel()[top])
        cand_score.append(flat[top])
    firsts = np.concatenate(cand_first)
    lasts = np.concatenate(cand_last)
    scores = np.concatenate(cand_score)
    order = np.lexsort((lasts - firsts, firsts, -scores))[:n_best]
    return [
        Span(int(firsts[i]), int(lasts[i]), float(scores[i]), float(start[firsts[i]]), float(end[lasts[i]]))
        for i in order
    ]


def softmax(scores: list[float]) -> list[float]:
    import numpy as np

    if not scores:
        return []
    values = np.asarray(scores, dtype=np.float64)
    exp = np.exp(values - values.max())
    return (exp / exp.sum()).tolist()


def nbest_answers(
    context: str,
    words: Words,
    start: np.ndarray,
    end: np.ndarray,
    *,
    spans: AnswerSpanSettings,
    n_best: int,
) -> list[dict[str, Any]]:
    """The n-best answers as exact context substrings, with softmax probabilities over the n-best scores; ``spans``:
    which spans may be answers (``qa``'s options, or ``finetune --task qa``'s)."""
    best = top_spans(start, end, words, spans=spans, n_best=n_best)
    probabilities = softmax([span.score for span in best])
    answers = []
    for span, probability in zip(best, probabilities, strict=True):
        char_start = int(words.starts[span.first_word])
        char_end = int(words.ends[span.last_word])
        answers.append(
            {
                "text": context[char_start:char_end],
                "probability": probability,
                "score": span.score,
                "start_logit": span.start_logit,
                "end_logit": span.end_logit,
                "start": char_start,
                "end": char_end,
            }
        )
    return answers
