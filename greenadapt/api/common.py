"""What every API function shares: path arguments and reading a function's defaults."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

PathLike = str | os.PathLike[str]


def default_of(function: Callable[..., Any], name: str) -> Any:
    """The default of ``function``'s parameter ``name``: what a CLI option of the same meaning defaults to."""
    default = inspect.signature(function).parameters[name].default
    if default is inspect.Parameter.empty:
        raise KeyError(f"{function.__name__}() has no default for {name!r}")
    return default


def as_path(value: PathLike | None) -> Path | None:
    return None if value is None else Path(value)
