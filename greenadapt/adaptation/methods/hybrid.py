"""``hybrid``: ``w · lstsq + (1 − w) · subword-mean`` (``--hybrid-weight`` w, default 0.5).

The least-squares map carries what word2vec learned of the word's contexts; the
subword mean carries what the model already knows of its pieces.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from greenadapt.adaptation.methods.base import FitContext, MethodDefaults, RowContext
from greenadapt.adaptation.methods.lstsq import LSTSQ
from greenadapt.adaptation.methods.subword_mean import subword_mean_rows

if TYPE_CHECKING:
    import numpy as np


class Hybrid(MethodDefaults):
    name = "hybrid"
    summary = "--hybrid-weight x lstsq + (1 - weight) x subword-mean"
    options: tuple[str, ...] = ("hybrid_weight",)

    def fit(self, ctx: FitContext) -> dict[str, Any]:
        return LSTSQ.fit(ctx)

    def rows(self, ctx: RowContext) -> Iterator[np.ndarray]:
        import numpy as np

        w = ctx.options.hybrid_weight
        for mapped, pieces in zip(LSTSQ.rows(ctx), subword_mean_rows(ctx.general, ctx.words, ctx.embeddings), strict=True):
            yield (w * mapped.astype(np.float64) + (1 - w) * pieces.astype(np.float64)).astype(np.float32)


HYBRID = Hybrid()
