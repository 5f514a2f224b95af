"""NER labels (O, or B/I/E/S with an optional -TYPE) and the entity type ``--entity-type`` gives bare ones."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from greenadapt.errors import DataError, UsageError

NER_LABEL = re.compile(r"^(O|[BIES](-.+)?)$")
_SCHEME_PREFIXES = ("B-", "I-", "E-", "S-", "L-", "U-")
MAX_ENTITY_TYPE = 64  # a type names a kind of thing (Disease); every label and prediction repeats it


def check_entity_type(entity_type: str | None) -> str | None:
    if entity_type is not None and (not entity_type or len(entity_type) > MAX_ENTITY_TYPE or any(c.isspace() for c in entity_type)):
        shown = repr(entity_type) if len(entity_type) <= MAX_ENTITY_TYPE else f"of {len(entity_type):,} characters"
        raise UsageError(f"--entity-type {shown} must be one word of at most {MAX_ENTITY_TYPE} characters",
                         hint="e.g. --entity-type Disease")
    if entity_type is not None and (entity_type == "O" or entity_type[:2].upper() in _SCHEME_PREFIXES):
        bare = entity_type[2:] if entity_type != "O" else "Disease"
        raise UsageError(f"--entity-type {entity_type!r} is a label, not a type: labels would read B-{entity_type}",
                         hint=f"name the type alone, e.g. --entity-type {bare or 'Disease'}")
    return entity_type


def untyped(label: str) -> bool:
    return label != "O" and "-" not in label


def untyped_labels(labels: Sequence[str]) -> list[str]:
    """The NER labels that name no entity type (bare B, I, E, S)."""
    return [label for label in labels if untyped(label)]


def check_ner_label(label: str, path: Path, line: int) -> None:
    if not NER_LABEL.match(label):
        raise DataError(
            f"label {label!r} is not O or B/I/E/S with an optional -TYPE",
            path=path,
            line=line,
            hint="NER labels use BIO or BIOES tagging, e.g. O, B, I-Disease, S-Chemical; the label is the last column",
        )
