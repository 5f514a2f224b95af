"""The map from a context's wordpieces to its words (``greenadapt.corpus.words``), and word-level maxima."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.corpus.words import Words


def wordpiece_words(words: Words, piece_starts: np.ndarray, piece_ends: np.ndarray) -> np.ndarray:
    """Index of the word each wordpiece lies in, -1 for a piece outside every word.

    A piece belongs to the word holding its first character; pieces with an
    empty offset range (none come from BERT tokenizers, but other
    normalizers can produce them) are left out with -1.
    """
    import numpy as np

    if len(words) == 0 or len(piece_starts) == 0:
        return np.full(len(piece_starts), -1, dtype=np.int64)
    index = np.searchsorted(words.starts, piece_starts, side="right") - 1
    inside = (index >= 0) & (piece_ends > piece_starts)
    clipped = np.clip(index, 0, None)
    inside &= piece_starts < words.ends[clipped]
    return np.where(inside, index, -1)


def word_max(piece_values: np.ndarray, piece_word: np.ndarray, n_words: int) -> np.ndarray:
    """Per word, the maximum over its wordpieces' values; -inf for a word with no wordpiece."""
    import numpy as np

    out = np.full(n_words, -np.inf, dtype=np.float32)
    mask = piece_word >= 0
    np.maximum.at(out, piece_word[mask], piece_values[mask].astype(np.float32, copy=False))
    return out
