"""Defaults shared by every command and its Python function, so the CLI and the API cannot disagree."""

from __future__ import annotations

# One seed for every stage: `w2v`, `align`, `expand` and `adapt` (and the training commands)
# then name the same outputs, so `w2v --corpus X` followed by `adapt --corpus X` reuses w2v.
DEFAULT_SEED = 42

# Wordpieces per training sequence, [CLS] and [SEP] included, for every task that does not derive it from the model.
DEFAULT_MAX_LENGTH = 128

# The shortest --max-length any command takes: [CLS], [SEP] and room for a few words (and a QA question).
MIN_MAX_LENGTH = 8


def check_max_length(value: int) -> int:
    """``value`` (``--max-length``), or the one refusal every command gives for a length below :data:`MIN_MAX_LENGTH`."""
    from greenadapt.errors import UsageError

    if value < MIN_MAX_LENGTH:
        raise UsageError(f"--max-length {value} is too short", hint=f"use at least {MIN_MAX_LENGTH} (BERT models take up to 512)")
    return value
