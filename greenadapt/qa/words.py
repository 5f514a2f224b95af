"""Words of a context and the map from wordpieces to them.

A word is a whitespace-delimited token split further at runs of
punctuation ("x-ray," → "x", "-", "ray", ","), with character offsets into
the original string. Punctuation is BERT's definition (ASCII symbols plus
Unicode category P*), the same the BERT pre-tokenizer splits at, so a
wordpiece never straddles two words and both tokenizers see the same words:
that is what lets their logits be pooled word by word.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_SPACE, _PUNCT, _OTHER = 0, 1, 2


@dataclass(frozen=True)
class Words:
    starts: np.ndarray  # int64 character offsets, increasing
    ends: np.ndarray  # exclusive

    def __len__(self) -> int:
        return len(self.starts)


@lru_cache(maxsize=65536)
def _kind(char: str) -> int:
    if char.isspace():
        return _SPACE
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return _PUNCT
    return _PUNCT if unicodedata.category(char).startswith("P") else _OTHER


def _char_kinds(text: str) -> np.ndarray:
    import numpy as np

    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    # A paper has a few hundred distinct characters: classify each once, then look up.
    unique, inverse = np.unique(codes, return_inverse=True)
    table = np.fromiter((_kind(chr(c)) for c in unique), dtype=np.int8, count=len(unique))
    return table[inverse]


def split_words(text: str) -> Words:
    import numpy as np

    if not text:
        empty = np.zeros(0, dtype=np.int64)
        return Words(empty, empty)
    kinds = _char_kinds(text)
    change = np.flatnonzero(kinds[1:] != kinds[:-1]) + 1
    run_starts = np.concatenate(([0], change))
    run_ends = np.concatenate((change, [len(text)]))
    keep = kinds[run_starts] != _SPACE
    # A run of letters is one word, a run of punctuation is one word, whitespace separates.
    return Words(run_starts[keep].astype(np.int64), run_ends[keep].astype(np.int64))


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
