"""``subword-mean``: Fast Vocabulary Transfer (Gee et al., 2022).

A new word's row is the mean of the base model's input-embedding rows of the
wordpieces the general tokenizer T_LM splits it into (computed in float64, stored
as float32). It needs no word vectors: ``adapt --method subword-mean`` counts the
corpus words and skips word2vec training.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from greenadapt.adaptation.methods.base import FitContext, MethodDefaults, ROW_CHUNK, RowContext

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.adaptation.domain_tokenizer import GeneralTokenizer


class SubwordMean(MethodDefaults):
    name = "subword-mean"
    summary = "mean of the word's wordpiece rows under the model's own tokenizer (FVT; no word2vec needed)"
    needs_vectors = False
    vector_source = "none"

    def fit(self, ctx: FitContext) -> dict[str, Any]:
        return {"train_cosine": None, "heldout_cosine": None}

    def rows(self, ctx: RowContext) -> Iterator[np.ndarray]:
        yield from subword_mean_rows(ctx.general, ctx.words, ctx.embeddings)


def wordpiece_ids(general: GeneralTokenizer, words: Sequence[str]) -> list[list[int]]:
    """The ids T_LM gives each word in running text, without special tokens, padding (which would put [PAD]
    ids into the mean) or truncation: each family's own decomposition (``Ġ``/``▁`` pieces included)."""
    ids: list[list[int]] = []
    for start in range(0, len(words), ROW_CHUNK):
        ids.extend(e.ids for e in general.split_words(words[start : start + ROW_CHUNK]))
    return ids


def subword_mean_rows(general: GeneralTokenizer, words: Sequence[str], embeddings: np.ndarray) -> Iterator[np.ndarray]:
    import numpy as np
    import scipy.sparse

    pieces = wordpiece_ids(general, words)
    table = np.asarray(embeddings, dtype=np.float64)
    for start in range(0, len(words), ROW_CHUNK):
        chunk = pieces[start : start + ROW_CHUNK]
        lengths = np.fromiter((len(p) for p in chunk), dtype=np.int64, count=len(chunk))
        if (lengths == 0).any():
            raise ValueError(f"the model's tokenizer gives no wordpiece for {words[start + int(np.argmin(lengths))]!r}")
        flat = np.fromiter((i for p in chunk for i in p), dtype=np.int64, count=int(lengths.sum()))
        # One sparse product: row i of the averaging matrix holds 1/len at the word's piece ids (a repeated
        # piece counts twice, as in the mean over the piece sequence).
        averaging = scipy.sparse.csr_matrix(
            (np.repeat(1.0 / lengths, lengths), flat, np.concatenate(([0], np.cumsum(lengths)))),
            shape=(len(chunk), len(table)),
        )
        yield np.asarray(averaging @ table, dtype=np.float32)


SUBWORD_MEAN = SubwordMean()
