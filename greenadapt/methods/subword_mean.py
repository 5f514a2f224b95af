"""``subword-mean``: Fast Vocabulary Transfer (Gee et al., 2022).

A new word's row is the mean of the base model's input-embedding rows of the
wordpieces the general tokenizer T_LM splits it into (computed in float64, stored
as float32). It needs no word vectors: ``adapt --method subword-mean`` counts the
corpus words and skips word2vec training.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from greenadapt.methods.base import ROW_CHUNK, FitContext, RowContext
from greenadapt.methods.lstsq import mean_cosine

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.domain_tokenizer import GeneralTokenizer


class SubwordMean:
    name = "subword-mean"
    summary = "mean of the word's wordpiece rows under the model's own tokenizer (FVT; no word2vec needed)"
    needs_vectors = False
    needs_shared_vectors = False
    options: tuple[str, ...] = ()

    def fit(self, ctx: FitContext) -> dict[str, Any]:
        return {"train_cosine": None, "heldout_cosine": None}

    def rows(self, ctx: RowContext) -> Iterator[np.ndarray]:
        yield from subword_mean_rows(ctx.general, ctx.words, ctx.embeddings)


def wordpiece_ids(general: GeneralTokenizer, words: Sequence[str]) -> list[list[int]]:
    """The ids T_LM gives each word, without special tokens (one call into the Rust tokenizer per chunk)."""
    ids: list[list[int]] = []
    for start in range(0, len(words), ROW_CHUNK):
        encodings = general.backend.encode_batch(list(words[start : start + ROW_CHUNK]), add_special_tokens=False)
        ids.extend(e.ids for e in encodings)
    return ids


def subword_mean_rows(general: GeneralTokenizer, words: Sequence[str], embeddings: np.ndarray) -> Iterator[np.ndarray]:
    import numpy as np

    for start in range(0, len(words), ROW_CHUNK):
        pieces = wordpiece_ids(general, words[start : start + ROW_CHUNK])
        lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
        flat = np.fromiter((i for p in pieces for i in p), dtype=np.int64, count=int(lengths.sum()))
        owner = np.repeat(np.arange(len(pieces)), lengths)
        sums = np.zeros((len(pieces), embeddings.shape[1]), dtype=np.float64)
        np.add.at(sums, owner, embeddings[flat].astype(np.float64))
        yield (sums / np.maximum(lengths, 1)[:, None]).astype(np.float32)


def subword_mean_cosine(general: GeneralTokenizer, words: Sequence[str], targets: np.ndarray, embeddings: np.ndarray) -> float:
    """How close subword means come to the rows ``targets`` the model has for ``words`` (a diagnostic)."""
    import numpy as np

    return mean_cosine(np.concatenate(list(subword_mean_rows(general, words, embeddings))), targets)


SUBWORD_MEAN = SubwordMean()
