"""``context-mean``: the paper's least-squares map, fitted on the base model's own contextual vectors.

The word vectors come from :mod:`greenadapt.adaptation.context_vectors` (a forward pass of
the base model over the corpus: each word's mean wordpiece state at one layer,
averaged over up to ``--context-cap`` occurrences) instead of word2vec; the map
into the input-embedding space and the new rows are lstsq's. ``adapt --method
context-mean`` makes those vectors in place of training word2vec.
"""

from __future__ import annotations

from greenadapt.adaptation.methods.lstsq import Lstsq


class ContextMean(Lstsq):
    name = "context-mean"
    summary = "least-squares map from the base model's own contextual word vectors (no word2vec)"
    vector_source = "context"


CONTEXT_MEAN = ContextMean()
