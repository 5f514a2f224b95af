"""JSON and TOML from files a user hands over, parsed defensively.

Python's parsers recurse: a JSON line nested 100,000 deep, or a TOML value of 5,000 brackets, ends in a
``RecursionError`` (the round-5 probe found it in ``--config``, task files, ``multitask --tasks`` and corpus
recipes), and a value just shallow enough to parse still recurses in whatever reads it next. Every reader of
such a file parses through here and turns :class:`NestedTooDeeply` into its own one-line error.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
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


# A line longer than this is refused, not held: a document of 10,000 tokens is about 70,000 characters, and no
# task file or JSON record comes near; a line without end (a decompression bomb, a file with no newline) would
# otherwise be read whole into memory. The corpus readers cut such lines instead (greenadapt.corpus.lines).
MAX_LINE_CHARS = 16 << 20


def bounded_lines(handle: Any, path: Any, *, limit: int | None = None) -> Any:
    """The lines of the text ``handle`` (newlines kept), each at most ``limit`` characters: memory stays bounded
    whatever the input holds; a longer line is a :class:`~greenadapt.errors.DataError` naming ``path``, the line
    and the bound."""
    from greenadapt.errors import DataError

    limit = MAX_LINE_CHARS if limit is None else limit
    number = 0
    while line := handle.readline(limit + 1):
        number += 1
        if len(line) > limit:
            raise DataError(f"a line longer than {limit:,} characters (greenadapt reads a line whole, up to that bound)",
                            path=path, line=number, hint="split it into documents of at most that size, one per line")
        yield line


def options_document(text: str, path: Path) -> dict[str, Any]:
    """A config file's text (``--config``: TOML by its ``.toml`` name, else JSON) as its object of options; anything
    else, a syntax error, nesting past the bound or a number past Python's digit limit, is one line naming the file."""
    import tomllib

    from greenadapt.errors import UsageError

    toml = path.suffix == ".toml"
    try:
        document = loads_toml(text) if toml else loads_json(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})", hint="fix the file, or write it as TOML (.toml)") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})", hint="fix the file, or give a run folder's options.json") from None
    except NestedTooDeeply as exc:
        raise UsageError(f"{path}: {exc}", hint="options are plain values and lists") from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise UsageError(f"{path}: a value cannot be read ({exc})", hint="options are plain values of ordinary size") from None
    if not isinstance(document, dict):
        raise UsageError(f"{path}: a config file holds an object of options, not {type(document).__name__}")
    return document
