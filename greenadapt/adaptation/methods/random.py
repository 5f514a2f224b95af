"""``random``: the paper's random-vector ablation, rows drawn from N(mean, cov) of the embedding matrix.

``align`` stores the Gaussian (``gaussian_mean.npy``, ``gaussian_cov.npy``); ``expand``
draws the rows with its ``--seed`` (the same seed gives the same rows).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from greenadapt.adaptation.methods.base import FitContext, MethodDefaults, RowContext
from greenadapt.adaptation.methods.lstsq import mean_cosine
from greenadapt.errors import StageError

if TYPE_CHECKING:
    import numpy as np

_SAMPLE_CHUNK = 65536
MEAN_FILE = "gaussian_mean.npy"
COV_FILE = "gaussian_cov.npy"


class Random(MethodDefaults):
    name = "random"
    summary = "random rows from the embeddings' Gaussian (ablation)"
    needs_vectors = False
    vector_source = "none"
    seeded = True  # the only method that draws random numbers: its output depends on --seed

    def fit(self, ctx: FitContext) -> dict[str, Any]:
        import numpy as np

        mean = ctx.embeddings.mean(axis=0, dtype=np.float64)
        cov = np.cov(ctx.embeddings, rowvar=False, dtype=np.float64)
        np.save(ctx.dest / MEAN_FILE, mean)
        np.save(ctx.dest / COV_FILE, cov)
        n_held = len(ctx.held)
        if not n_held:
            return {"train_cosine": None, "heldout_cosine": None}
        draws = np.concatenate(list(gaussian_rows(mean, cov, n_held, ctx.seed)))
        return {"train_cosine": None, "heldout_cosine": mean_cosine(draws, ctx.Y[ctx.held])}

    def rows(self, ctx: RowContext) -> Iterator[np.ndarray]:
        import numpy as np

        def load(name: str) -> np.ndarray:
            try:
                return np.load(ctx.align_dir / name, allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise StageError(f"unreadable {name}: {exc}", path=ctx.align_dir / name, hint="rerun `greenadapt align --force`") from None

        mean, cov = load(MEAN_FILE), load(COV_FILE)
        dim = ctx.embeddings.shape[1]
        if mean.shape != (dim,) or cov.shape != (dim, dim):
            raise StageError(
                f"the Gaussian has dimension {mean.shape[0]}, the embeddings {dim}",
                path=ctx.align_dir,
                hint="rerun `greenadapt align --force` for this model",
            )
        yield from gaussian_rows(mean, cov, len(ctx.words), ctx.seed)


def gaussian_rows(mean: np.ndarray, cov: np.ndarray, n: int, seed: int) -> Iterator[np.ndarray]:
    """``n`` float32 draws from N(mean, cov) in chunks; the same seed gives the same rows."""
    import numpy as np

    eigenvalues, eigenvectors = np.linalg.eigh(cov)
    # A symmetric square root tolerates the rank-deficient covariances of
    # small vocabularies, where a Cholesky factor would fail.
    factor = eigenvectors * np.sqrt(np.clip(eigenvalues, 0.0, None))
    rng = np.random.default_rng(seed)
    for start in range(0, n, _SAMPLE_CHUNK):
        z = rng.standard_normal((min(_SAMPLE_CHUNK, n - start), len(mean)))
        yield (mean + z @ factor.T).astype(np.float32)


RANDOM = Random()
