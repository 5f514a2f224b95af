"""The centred sliding windows of Poerner et al. (2020) over a long context.

For a question of ``q`` wordpieces and a model input of at most ``L``
positions, ``W = L − 3 − q`` context wordpieces fit next to ``[CLS] Q
[SEP] … [SEP]``. The context is cut into *active* windows of width and
stride ``N = floor(W / 2)``: ``[nN, min(|C|, nN + N))``. Each model input
holds one active window in its centre and fills the remaining ``W − N``
places with the surrounding context, alternately right and left (right
first), taking more from one side when the other runs out. Only the
logits of the active part are kept, so every context wordpiece receives
exactly one start and one end logit, computed with at least about ``N/2``
wordpieces of context on each side where the document has them.

When consecutive windows would feed the model the same context slice (a
context that fits in one input, or windows clamped at either end of the
document) they are merged into one input whose active part is the union:
the logits are identical, the model runs once instead of several times.
"""

from __future__ import annotations

from dataclasses import dataclass

SPECIAL_POSITIONS = 3  # [CLS] question [SEP] context [SEP]


@dataclass(frozen=True)
class Window:
    """One model input: context slice ``[span_start, span_stop)`` around active ``[active_start, active_stop)``."""

    active_start: int
    active_stop: int
    span_start: int
    span_stop: int

    def input_length(self, question_length: int) -> int:
        return SPECIAL_POSITIONS + question_length + self.span_stop - self.span_start

    def active_offset(self, question_length: int) -> int:
        """Position of the first active context wordpiece in the model input."""
        return 2 + question_length + self.active_start - self.span_start


def window_width(max_length: int, question_length: int) -> int:
    """The paper's N = floor((L − 3 − |T(Q)|) / 2)."""
    return (max_length - SPECIAL_POSITIONS - question_length) // 2


def max_question_length(max_length: int) -> int:
    """Longest question kept whole: beyond it windows get too narrow to be useful (N ≥ (L − 3) / 4)."""
    return (max_length - SPECIAL_POSITIONS) // 2


def plan_windows(context_length: int, question_length: int, max_length: int) -> list[Window]:
    """Windows covering ``range(context_length)`` with disjoint active parts, in order."""
    width = window_width(max_length, question_length)
    if width < 1:
        raise ValueError(f"no room for context: max_length {max_length}, question of {question_length} wordpieces")
    capacity = min(max_length - SPECIAL_POSITIONS - question_length, context_length)
    windows: list[Window] = []
    for active_start in range(0, context_length, width):
        active_stop = min(context_length, active_start + width)
        extra = capacity - (active_stop - active_start)
        right = min(context_length - active_stop, max(-(-extra // 2), extra - active_start))
        left = extra - right
        window = Window(active_start, active_stop, active_start - left, active_stop + right)
        previous = windows[-1] if windows else None
        if previous is not None and (previous.span_start, previous.span_stop) == (window.span_start, window.span_stop):
            windows[-1] = Window(previous.active_start, active_stop, window.span_start, window.span_stop)
        else:
            windows.append(window)
    return windows
