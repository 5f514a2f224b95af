"""An option's value as its field's type, within its declared bounds and choices: one line naming the option and the
fix for a value that is not."""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from greenadapt.defaults import MAX_OPTION_INT
from greenadapt.errors import UsageError
from greenadapt.options.declaration import Declaration

def type_hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


_HINTS: dict[type, dict[str, Any]] = {}


def _members(hint: Any) -> tuple[Any, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def is_switch(hint: Any) -> bool:
    """An option of type ``bool`` (or ``bool | None``, None leaving it to the model): on the command line a flag with a
    ``--no-`` form, from Python ``name=True`` or ``False``."""
    return [member for member in _members(hint) if member is not type(None)] == [bool]


def coerced(value: Any, hint: Any, declared: Declaration) -> Any:
    """``value`` as the field's type: paths as Path, sequences as tuples; a value of another type is refused."""
    if value is None:
        if type(None) in _members(hint):
            return None
        raise UsageError(f"{declared.flag} needs a value", hint=f"see --help for {declared.flag}")
    for member in _members(hint):
        if member is type(None):
            continue
        try:
            return _as(value, member)
        except (TypeError, ValueError):
            continue
    if declared.parse is not None and _command_line_form(value):
        # a config file may spell a value as the command line does: models = ["base=bert", "green=models/green"]
        text = [value] if isinstance(value, str) and typing.get_origin(declared.cli_type) is list else value
        return coerced(declared.parse(text), hint, dataclasses.replace(declared, parse=None))
    raise UsageError(f"{declared.flag} must be {_type_words(hint)}, not {value!r}", hint=f"see --help for {declared.flag}")


def _command_line_form(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list | tuple) and all(isinstance(item, str) for item in value))


def _as(value: Any, kind: Any) -> Any:
    origin = typing.get_origin(kind)
    if origin is tuple:
        args = typing.get_args(kind)
        if isinstance(value, Mapping):  # {"green": "models/green"}: its (name, value) pairs
            value = tuple(value.items())
        items = (value,) if isinstance(value, str | os.PathLike) or not hasattr(value, "__iter__") else tuple(value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_as(item, args[0]) for item in items)
        if len(items) != len(args):
            raise ValueError(f"{len(args)} values")
        return tuple(_as(item, arg) for item, arg in zip(items, args, strict=True))
    if kind is Path:
        if isinstance(value, str | os.PathLike):
            return Path(os.fspath(value))
        raise TypeError("a path")
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise TypeError("true or false")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError("an integer")
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer past float's range (300-odd digits)
                raise ValueError("a number within range") from None
        raise TypeError("a number")
    if kind is str:
        if isinstance(value, str | os.PathLike):  # a model folder given as a Path
            return os.fspath(value)
        raise TypeError("text")
    if kind is Any:
        return value
    if isinstance(kind, type) and isinstance(value, kind):
        return value
    raise TypeError(f"a {getattr(kind, '__name__', kind)}")


def _type_words(hint: Any) -> str:
    words = {int: "an integer", float: "a number", str: "text", bool: "true or false", Path: "a path"}
    parts = []
    for member in _members(hint):
        if member is type(None):
            continue
        origin = typing.get_origin(member)
        parts.append("a list" if origin is tuple else words.get(member, getattr(member, "__name__", str(member))))
    return " or ".join(parts)


def checked(value: Any, declared: Declaration) -> Any:
    if value is None:
        return value
    for item in value if isinstance(value, tuple) and declared.choices else (value,):
        if declared.choices is not None and item not in declared.choices:
            raise UsageError(f"unknown {declared.flag} {item!r}", hint=f"choose one of {', '.join(declared.choices)}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):  # nan passes every bound: refused whatever its source
            raise UsageError(f"{declared.flag} must be a finite number, not {value}")
        if declared.minimum is not None and value < declared.minimum:
            raise UsageError(f"{declared.flag} must be at least {declared.minimum:g}, not {_shown(value)}")
        if declared.maximum is not None and value > declared.maximum:
            raise UsageError(f"{declared.flag} must be at most {declared.maximum:g}, not {_shown(value)}")
        if isinstance(value, int) and abs(value) > MAX_OPTION_INT:  # (an option with no bound of its own)
            raise UsageError(f"{declared.flag} must be at most {MAX_OPTION_INT:,}, not {_shown(value)}")
    return declared.check(value) if declared.check is not None else value


def _shown(value: int | float) -> str:
    """A number for a message: a huge integer by its size (as a float it overflows, as text it may pass Python's digit limit)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"a number of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    return f"{value:g}"


def plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value.absolute())
    if isinstance(value, tuple | list):
        return [plain(item) for item in value]
    return value
