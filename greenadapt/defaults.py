"""Defaults shared by every command and its Python function, so the CLI and the API cannot disagree."""

from __future__ import annotations

# One seed for every stage: `w2v`, `align`, `expand` and `adapt` (and the training commands)
# then name the same outputs, so `w2v --corpus X` followed by `adapt --corpus X` reuses w2v.
DEFAULT_SEED = 42
