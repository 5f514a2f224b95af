"""Words and sentences of raw text, with character offsets into it.

A word is a whitespace-delimited token split further at runs of
punctuation ("x-ray," → "x", "-", "ray", ","). Punctuation is BERT's
definition (ASCII symbols plus Unicode category P*), the same the BERT
pre-tokenizer splits at, so a wordpiece never straddles two words and both
tokenizers of an expanded model see the same words: that is what lets their
logits be pooled word by word (question answering over a whole paper, NER
on raw text).

Sentences: raw text handed to an NER model is cut where a sentence ends, so
the model sees sentence-sized chunks as it did in training (NER training
sets are one sentence per example). The rule is deliberately simple and
documented: a line break ends a sentence; so does ``.``, ``!`` or ``?``
(with any closing quotes or brackets) followed by whitespace and a capital
letter, digit or opening bracket, unless the word before the period is a
single letter (an initial) or a common abbreviation of scientific prose.
"""

from __future__ import annotations

import re
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


# -- sentences: from here to its end marker this code is also copied into a served model's serve_onnx.py
# (greenadapt/inference/onnx_export.py), which must cut sentences as predict does without importing greenadapt.
# Abbreviations after which a period does not end a sentence (lower-cased, without the final period).
ABBREVIATIONS = frozenset(
    "e.g i.e et al fig figs eq eqs ref refs vs cf ca approx no nos vol dr mr mrs ms prof st sp spp resp "
    "incl dept univ jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
_BOUNDARY = re.compile(r"[.!?][\"')\]]*(?=\s+[\"'(\[]?[A-Z0-9])")
_LAST_WORD = re.compile(r"(\S+)$")


def split_sentences(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` character ranges of the sentences of ``text``, surrounding whitespace excluded."""
    spans: list[tuple[int, int]] = []
    for line in re.finditer(r"[^\n]+", text):
        start = line.start()
        for boundary in _BOUNDARY.finditer(line.group()):
            end = line.start() + boundary.end()
            if not _ends_sentence(text, start, line.start() + boundary.start()):
                continue
            spans.append((start, end))
            start = end
        spans.append((start, line.end()))
    return [trimmed for span in spans if (trimmed := _trim(text, *span)) is not None]


def _ends_sentence(text: str, start: int, period: int) -> bool:
    if text[period] != ".":
        return True
    before = _LAST_WORD.search(text, start, period)
    if before is None:
        return True
    word = before.group(1).lstrip("\"'([").lower()
    return not (len(word) == 1 and word.isalpha()) and word not in ABBREVIATIONS


def _trim(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None
# -- end of sentences
