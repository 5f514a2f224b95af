"""JSON and TOML from files a user hands over, parsed defensively.

Python's parsers recurse: a JSON line nested 100,000 deep, or a TOML value of 5,000 brackets, ends in a
``RecursionError`` (the round-5 probe found it in ``--config``, task files, ``multitask --tasks`` and corpus
recipes), and a value just shallow enough to parse still recurses in whatever reads it next. Every reader of
such a file parses through here and turns :class:`NestedTooDeeply` into its own one-line error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

# Deeper than any options file, task record or recipe greenadapt reads (they nest 2 to 4 levels).
MAX_DEPTH = 100


class NestedTooDeeply(ValueError):
    """A document whose values nest deeper than :data:`MAX_DEPTH` levels (or deeper than Python's parser can go)."""

    def __init__(self) -> None:
        super().__init__(f"nested more than {MAX_DEPTH} levels deep")


def loads_json(text: str | bytes, *, max_depth: int | None = MAX_DEPTH) -> Any:
    """``json.loads(text)``; raises :class:`NestedTooDeeply` instead of a ``RecursionError``, and past ``max_depth``
    (None: only what the parser itself cannot take)."""
    return _parsed(json.loads, text, max_depth)


def loads_toml(text: str, *, max_depth: int | None = MAX_DEPTH) -> dict[str, Any]:
    """``tomllib.loads(text)``, with :func:`loads_json`'s guard against deep nesting."""
    import tomllib

    return _parsed(tomllib.loads, text, max_depth)


def _parsed(parse: Callable[[Any], Any], text: str | bytes, max_depth: int | None) -> Any:
    try:
        value = parse(text)
    except RecursionError:
        raise NestedTooDeeply() from None
    if max_depth is not None:
        check_depth(value, max_depth)
    return value


def check_depth(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Raise :class:`NestedTooDeeply` if ``value``'s lists and mappings nest deeper than ``max_depth`` (iteratively: a
    deep value must not recurse here either)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > max_depth:
            raise NestedTooDeeply()
        stack.extend((child, depth + 1) for child in children)
