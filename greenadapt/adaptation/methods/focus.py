"""``focus``: FOCUS-style initialisation (Dobler & de Melo, 2023).

For each new word: its ``k`` nearest shared words in word2vec space (cosine), the
weights ``sparsemax(cosines / temperature)`` over those k, and the row the weighted
sum of those shared words' embedding rows. The weights are non-negative, sum to 1
and are sparse (sparsemax sets every weight whose score is more than about
``temperature`` below the best to exactly 0), so a row is a convex combination of
a few known rows and keeps their scale. Defaults: k = 10, temperature = 0.1 (not
tuned; see docs/study.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from greenadapt.adaptation.methods.base import FitContext, MethodDefaults, ROW_CHUNK, RowContext
from greenadapt.adaptation.methods.lstsq import mean_cosine
from greenadapt.adaptation.vectors import VectorRows

if TYPE_CHECKING:
    import numpy as np

_QUERY_CHUNK = 1024  # queries x shared words of similarities at a time


class Focus(MethodDefaults):
    name = "focus"
    summary = "sparsemax-weighted mean of the rows of the k most similar shared words in word2vec space (FOCUS)"
    needs_shared_vectors = True
    options: tuple[str, ...] = ("focus_k", "focus_temperature")

    def fit(self, ctx: FitContext) -> dict[str, Any]:
        """No parameters to fit; the held-out figure is how well the rule rebuilds held-out shared words' rows."""
        import numpy as np

        if not len(ctx.held):
            return {"train_cosine": None, "heldout_cosine": None}
        rows = np.concatenate(list(focus_rows(VectorRows(ctx.X[ctx.held]), ctx.X[ctx.train], ctx.Y[ctx.train], ctx.options.focus_k,
                                              ctx.options.focus_temperature)))
        return {"train_cosine": None, "heldout_cosine": mean_cosine(rows, ctx.Y[ctx.held])}

    def rows(self, ctx: RowContext) -> Iterator[np.ndarray]:
        assert ctx.vectors is not None and ctx.shared_vectors is not None and ctx.shared_ids is not None
        yield from focus_rows(ctx.vectors, ctx.shared_vectors, ctx.embeddings[ctx.shared_ids], ctx.options.focus_k,
                              ctx.options.focus_temperature)


def sparsemax(scores: np.ndarray) -> np.ndarray:
    """Row-wise sparsemax (Martins & Astudillo, 2016): the Euclidean projection onto the probability simplex."""
    import numpy as np

    z = np.asarray(scores, dtype=np.float64)
    ordered = -np.sort(-z, axis=1)
    cumulative = np.cumsum(ordered, axis=1)
    k = np.arange(1, z.shape[1] + 1)
    support = 1 + k * ordered > cumulative
    size = support.sum(axis=1)
    tau = (cumulative[np.arange(len(z)), size - 1] - 1) / size
    return np.maximum(z - tau[:, None], 0.0)


def focus_weights(queries: np.ndarray, shared: np.ndarray, k: int, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """(indices into ``shared`` (n, k), weights (n, k)) for each query vector."""
    import numpy as np

    def unit(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, dtype=np.float32)
        return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)

    k = min(k, len(shared))
    sims = unit(queries) @ unit(shared).T
    top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    top_sims = np.take_along_axis(sims, top, axis=1)
    order = np.argsort(-top_sims, axis=1, kind="stable")
    top, top_sims = np.take_along_axis(top, order, axis=1), np.take_along_axis(top_sims, order, axis=1)
    return top, sparsemax(top_sims / temperature)


def focus_rows(queries: VectorRows, shared_vectors: np.ndarray, shared_rows: np.ndarray, k: int,
               temperature: float) -> Iterator[np.ndarray]:
    import numpy as np

    shared_rows64 = np.asarray(shared_rows, dtype=np.float64)
    for start in range(0, len(queries), min(ROW_CHUNK, _QUERY_CHUNK)):
        top, weights = focus_weights(queries.chunk(start, start + _QUERY_CHUNK), shared_vectors, k, temperature)
        yield np.einsum("nk,nkd->nd", weights, shared_rows64[top]).astype(np.float32)


FOCUS = Focus()
