"""``identity``: W = I, the paper's "no alignment" ablation (word2vec vectors used as rows as they are)."""

from __future__ import annotations

from typing import Any

from greenadapt.adaptation.methods.base import FitContext
from greenadapt.adaptation.methods.lstsq import MAP_FILE, Lstsq, mean_cosine
from greenadapt.errors import InputError


class Identity(Lstsq):
    """W = I written as lstsq's map, so the rows are lstsq's ``v @ Wᵀ`` (= v)."""

    name = "identity"
    summary = "no alignment: word2vec vectors as rows (ablation; needs --dim = the model's hidden size)"
    vectors_are_rows = True

    def fit(self, ctx: FitContext) -> dict[str, Any]:
        import numpy as np

        d_w2v, d_model = ctx.X.shape[1], ctx.Y.shape[1]
        if d_w2v != d_model:
            raise InputError(
                f"--method identity needs word2vec vectors of the model's embedding size {d_model}, they have {d_w2v}",
                hint=f"use --method lstsq, or rerun w2v with --dim {d_model}",
            )
        np.save(ctx.dest / MAP_FILE, np.eye(d_model))
        return {
            "train_cosine": mean_cosine(ctx.X[ctx.train], ctx.Y[ctx.train]),
            "heldout_cosine": mean_cosine(ctx.X[ctx.held], ctx.Y[ctx.held]) if len(ctx.held) else None,
            "map_file": MAP_FILE,
            "map_dtype": "float64",
        }


IDENTITY = Identity()
