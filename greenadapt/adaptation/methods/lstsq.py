"""``lstsq``: the paper's least-squares map W from word2vec space into the embedding space (Poerner et al., 2020).

W (d_model × d_w2v) minimises ``||X Wᵀ - Y||²`` over the shared words. Solved by the
normal equations in float64 with a ridge of ``1e-9 × mean eigenvalue`` (a few times
faster than an SVD-based solver, equally accurate when well conditioned); when ``XᵀX``
is ill conditioned (condition number above 1e10) or there are fewer shared words than
dimensions, ``numpy.linalg.lstsq`` instead. A new row is ``float32(v) @ float32(W)ᵀ``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from greenadapt.adaptation.methods.base import FitContext, MethodDefaults, ROW_CHUNK, RowContext
from greenadapt.errors import StageError

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

MAP_FILE = "map.npy"
RIDGE = 1e-9
MAX_CONDITION = 1e10


class Lstsq(MethodDefaults):
    name = "lstsq"
    summary = "the paper's least-squares map from word2vec space (default)"

    def fit(self, ctx: FitContext) -> dict[str, Any]:
        import numpy as np

        W_train, _ = fit_linear_map(ctx.X[ctx.train], ctx.Y[ctx.train])
        report: dict[str, Any] = {
            "train_cosine": mean_cosine(ctx.X[ctx.train] @ W_train.T, ctx.Y[ctx.train]),
            "heldout_cosine": mean_cosine(ctx.X[ctx.held] @ W_train.T, ctx.Y[ctx.held]) if len(ctx.held) else None,
        }
        W, info = fit_linear_map(ctx.X, ctx.Y)
        np.save(ctx.dest / MAP_FILE, W)
        return {**report, **info, "map_file": MAP_FILE, "map_dtype": "float64"}

    def rows(self, ctx: RowContext) -> Iterator[np.ndarray]:
        assert ctx.vectors is not None
        W32t = load_map(ctx, ctx.vectors.dim)
        for start in range(0, len(ctx.vectors), ROW_CHUNK):
            yield ctx.vectors.chunk(start, start + ROW_CHUNK) @ W32t


def load_map(ctx: RowContext, d_w2v: int) -> np.ndarray:
    """W of the align folder, checked against the shapes, as float32 Wᵀ."""
    import numpy as np

    path = ctx.align_dir / MAP_FILE
    try:
        W = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise StageError(f"unreadable {MAP_FILE}: {exc}", path=path, hint="rerun `greenadapt align --force`") from None
    dim = ctx.embeddings.shape[1]
    if W.shape != (dim, d_w2v):
        raise StageError(
            f"{MAP_FILE} has shape {W.shape}, but the model's embeddings have {dim} dimensions and the "
            f"word2vec vectors {d_w2v}",
            path=path,
            hint="rerun `greenadapt align --force` for this model and w2v output",
        )
    return np.ascontiguousarray(W.T, dtype=np.float32)


def fit_linear_map(X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """W (d_y × d_x) minimising ``||X Wᵀ - Y||²``, in float64; see the module docstring for the solver."""
    import numpy as np
    import scipy.linalg

    X64 = np.asarray(X, dtype=np.float64)
    Y64 = np.asarray(Y, dtype=np.float64)
    n, d = X64.shape
    gram = X64.T @ X64
    eigenvalues = np.linalg.eigvalsh(gram)
    smallest, largest = float(eigenvalues[0]), float(eigenvalues[-1])
    condition = largest / smallest if smallest > 0 else float("inf")
    if n >= d and condition <= MAX_CONDITION:
        ridge = RIDGE * float(np.trace(gram)) / d
        gram[np.diag_indices(d)] += ridge
        Wt = scipy.linalg.solve(gram, X64.T @ Y64, assume_a="pos")
        solver = "normal_equations"
    else:
        log.info("XᵀX condition number %.3g: falling back to lstsq", condition)
        Wt = np.linalg.lstsq(X64, Y64, rcond=None)[0]
        solver = "lstsq"
    return np.ascontiguousarray(Wt.T), {"solver": solver, "condition_number": condition if condition < 1e300 else None}


def mean_cosine(A: np.ndarray, B: np.ndarray) -> float:
    """Mean row-wise cosine of two equally shaped matrices (zero rows count as cosine 0)."""
    import numpy as np

    A64, B64 = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    dots = np.einsum("ij,ij->i", A64, B64)
    norms = np.sqrt(np.einsum("ij,ij->i", A64, A64) * np.einsum("ij,ij->i", B64, B64))
    return float(np.mean(np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)))


LSTSQ = Lstsq()
