"""The registry of initialisation methods: how the rows of new words are made.

Each method is one module of this package with one object satisfying
:class:`greenadapt.adaptation.methods.base.InitMethod`. ``align`` fits it on the shared
words (the vocabulary entries word2vec also learned) and writes what it
learned; ``expand`` asks it for the new rows. The command-line choices, their
help and the report's description are read from :data:`METHODS`, so adding a
method is one module here plus its tests (CONTRIBUTING shows the recipe).

This module imports no numpy: ``greenadapt --help`` reads the names from it.
"""

from __future__ import annotations

from greenadapt.adaptation.methods.base import CorpusAccess, FitContext, InitMethod, RowContext, options_for
from greenadapt.adaptation.methods.context_mean import CONTEXT_MEAN
from greenadapt.adaptation.methods.distill import DISTILL
from greenadapt.adaptation.methods.focus import FOCUS
from greenadapt.adaptation.methods.hybrid import HYBRID
from greenadapt.adaptation.methods.identity import IDENTITY
from greenadapt.adaptation.methods.lstsq import LSTSQ
from greenadapt.adaptation.methods.random import RANDOM
from greenadapt.adaptation.methods.subword_mean import SUBWORD_MEAN
from greenadapt.errors import UsageError

METHODS: dict[str, InitMethod] = {m.name: m for m in (LSTSQ, IDENTITY, RANDOM, SUBWORD_MEAN, FOCUS, HYBRID, CONTEXT_MEAN, DISTILL)}
DEFAULT_METHOD = "lstsq"


def get_method(name: str) -> InitMethod:
    try:
        return METHODS[name]
    except KeyError:
        raise UsageError(f"unknown --method {name!r}", hint=f"choose one of {', '.join(METHODS)}") from None


def method_help() -> str:
    """The ``--method`` help text: every registered method with its one-line summary."""
    return "How new rows are initialised: " + "; ".join(f"{m.name}: {m.summary}" for m in METHODS.values()) + "."


__all__ = ["DEFAULT_METHOD", "METHODS", "CorpusAccess", "FitContext", "InitMethod", "RowContext", "options_for", "get_method",
           "method_help"]
