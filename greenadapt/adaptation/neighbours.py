"""The nearest-neighbour table of the align report (cf. Poerner et al. 2020, Table 2): frequent new words, their
neighbours within word2vec space and the wordpieces nearest to their mapped vectors."""

from __future__ import annotations

import heapq
import itertools
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from greenadapt.adaptation.methods.lstsq import MAP_FILE, fit_linear_map, mean_cosine  # noqa: E402,F401
from greenadapt.adaptation.methods.random import COV_FILE, MEAN_FILE, gaussian_rows  # noqa: E402,F401

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.adaptation.domain_tokenizer import GeneralTokenizer


N_FREQUENT = 10
N_NEIGHBOURS = 5
MIN_TABLE_WORD_LEN = 6


def nearest_neighbours(
    words: Sequence[str], vectors: np.ndarray, counts: Mapping[str, int], embeddings: np.ndarray,
    general: GeneralTokenizer, W: np.ndarray | None, probes: Sequence[str],
) -> list[dict[str, Any]]:
    """The neighbour table of the most frequent new words and the probes."""
    table_words = frequent_new_words(general, words, counts) + [general.normalize(p).strip() for p in probes]
    kinds = ["frequent"] * (len(table_words) - len(probes)) + ["probe"] * len(probes)
    return neighbour_table(words, vectors, counts, embeddings, general, W, table_words, kinds)


def frequent_new_words(general: GeneralTokenizer, words: Sequence[str], counts: Mapping[str, int]) -> list[str]:
    """The most frequent new words that look like domain words (alphabetic, at least 6 letters)."""
    def candidates() -> Iterator[str]:
        return (w for w in words if len(w) >= MIN_TABLE_WORD_LEN and w.isalpha() and not general.is_known(w))

    if not counts:
        return list(itertools.islice(candidates(), N_FREQUENT))
    in_file_order = list(counts) == list(words)
    values = list(counts.values()) if in_file_order else []
    if in_file_order and all(map(operator.ge, values, values[1:])):
        # w2v writes its words most frequent first: the table's words are the first candidates, plus any tied
        # with the last of them, found without looking at the rest of a million words.
        head: list[str] = []
        for word in candidates():
            if len(head) >= N_FREQUENT and counts[word] < counts[head[N_FREQUENT - 1]]:
                break
            head.append(word)
        return sorted(head, key=lambda w: (-counts[w], w))[:N_FREQUENT]
    # The first N_FREQUENT of (-count, word) order without sorting a million words.
    return heapq.nsmallest(N_FREQUENT, candidates(), key=lambda w: (-counts.get(w, 0), w))


def neighbour_table(
    words: Sequence[str],
    vectors: np.ndarray,
    counts: Mapping[str, int],
    embeddings: np.ndarray,
    general: GeneralTokenizer,
    W: np.ndarray | None,
    table_words: Sequence[str],
    kinds: Sequence[str],
) -> list[dict[str, Any]]:
    """Within-space word2vec neighbours and cross-space wordpiece neighbours of W·v (paper, Table 2)."""
    import numpy as np

    wanted = set(table_words)
    index = {w: i for i, w in enumerate(words) if w in wanted}
    present = [w for w in table_words if w in index]
    rows: list[dict[str, Any]] = []
    within: dict[str, list[list[Any]]] = {}
    cross: dict[str, list[list[Any]]] = {}
    if present:
        queries = vectors[[index[w] for w in present]].astype(np.float32)
        norms = np.maximum(np.sqrt(np.einsum("ij,ij->i", vectors, vectors)), 1e-12)
        # Divided in place: a million words × the queries of cosines exist once, not three times.
        sims = vectors @ queries.T
        sims /= norms[:, None]
        sims /= norms[[index[w] for w in present]]
        for j, word in enumerate(present):
            sims[index[word], j] = -np.inf
            within[word] = _top(sims[:, j], lambda i: words[i])
        if W is not None:
            id_to_token = {i: t for t, i in general.vocab.items()}
            usable = np.array([not _is_bracketed(id_to_token.get(i, "[]")) for i in range(len(embeddings))])
            unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
            mapped = queries @ W.T.astype(np.float32)
            mapped /= np.maximum(np.linalg.norm(mapped, axis=1, keepdims=True), 1e-12)
            cross_sims = unit @ mapped.T
            cross_sims[~usable] = -np.inf
            for j, word in enumerate(present):
                cross[word] = _top(cross_sims[:, j], lambda i: general.family.readable(id_to_token[i]))
    for word, kind in zip(table_words, kinds):
        rows.append(
            {
                "word": word,
                "kind": kind,
                "count": counts.get(word),
                "in_w2v": word in index,
                "in_vocab": general.is_known(word),
                "within": within.get(word, []),
                "cross": cross.get(word, []),
            }
        )
    return rows


def _top(scores: np.ndarray, name: Any) -> list[list[Any]]:
    import numpy as np

    k = min(N_NEIGHBOURS, int(np.isfinite(scores).sum()))
    if k == 0:
        return []
    best = np.argpartition(-scores, k - 1)[:k]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [[name(int(i)), round(float(scores[i]), 4)] for i in best]


def _is_bracketed(token: str) -> bool:
    """A special token (``[CLS]``, ``<s>``, ``<mask>``): never a neighbour worth showing."""
    return (token.startswith("[") and token.endswith("]")) or (token.startswith("<") and token.endswith(">") and len(token) > 2)
