"""``--match-norm`` (any method): rescale each new row to the mean norm of the model's whole-word rows.

Least-squares predictions shrink toward the mean (their norms are smaller than
those of real rows); this tests whether that matters. "Whole-word rows" are the
rows of vocabulary entries that begin a word (not a ``##`` continuation; a
``Ġ``/``▁`` piece for BPE/Unigram) and are not bracketed special tokens
(``[CLS]``, ``[unused0]``, …).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.adaptation.domain_tokenizer import GeneralTokenizer


def whole_word_ids(general: GeneralTokenizer) -> list[int]:
    family = general.family
    return sorted(
        i for token, i in general.vocab.items()
        if family.is_word_initial(token) and not (token.startswith("[") and token.endswith("]"))
    )


def whole_word_norm(embeddings: np.ndarray, general: GeneralTokenizer) -> float:
    """The mean L2 norm of the whole-word rows (float64)."""
    import numpy as np

    rows = np.asarray(embeddings[whole_word_ids(general)], dtype=np.float64)
    return float(np.linalg.norm(rows, axis=1).mean())


def rescale_rows(rows: np.ndarray, target: float) -> np.ndarray:
    """Each row scaled to norm ``target`` (a zero row stays zero)."""
    import numpy as np

    rows64 = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(rows64, axis=1, keepdims=True)
    return (rows64 * np.divide(target, norms, out=np.zeros_like(norms), where=norms > 0)).astype(np.float32)
