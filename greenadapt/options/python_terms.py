"""A refused option, named as the caller named it: ``greenadapt.finetune(lr=-1)`` is told ``lr must be positive``, the
command line ``--lr must be positive``. The checks are written once, in the command line's words; this rewords their
line for a Python caller."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial
from typing import Any

from greenadapt.errors import UsageError

# Set while the command line runs a command through its Python function: its refusals keep the flags.
_ON_THE_COMMAND_LINE: ContextVar[bool] = ContextVar("greenadapt_on_the_command_line", default=False)

# What a message gives after a flag that is its value: a number (``--lr 5e-5``) or a placeholder (``--dev FILE``), written
# as is; one of the choices it declares (``--runtime onnx``), quoted.
_AS_IS = re.compile(r"-?\d[\d.]*(e[+-]?\d+)?|[A-Z][A-Z_]*")
# What is reworded: a flag (and a value after it). A shell command a line gives (`greenadapt align --force`, greenadapt
# qa --model M --out DIR) matches first and is left as written.
_PIECE = re.compile(r"(?P<command>`[^`]*`|greenadapt [a-z][\w-]*(?: [^,;()`]*)?)"
                    r"|(?<![\w-])(?P<flag>--[a-z][\w-]*)(?: (?P<value>'[^']*'|(?!-[a-z-])(?:[^\s,;:()]|,(?=\d))+))?")


@contextmanager
def named_for_python(settings_class: type) -> Iterator[None]:
    """Within: a UsageError about an option of ``settings_class`` (or a run keyword) names its keyword, not its flag."""
    try:
        yield
    except UsageError as error:
        if _ON_THE_COMMAND_LINE.get():
            raise
        keywords = _keywords(settings_class)
        raise type(error)(_reworded(error.message, keywords), hint=_reworded(error.hint, keywords) if error.hint else None,
                          path=error.path, line=error.line) from None


@contextmanager
def on_the_command_line() -> Iterator[None]:
    """Within: refusals name the command line's flags (``greenadapt finetune --lr -1``)."""
    token = _ON_THE_COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _ON_THE_COMMAND_LINE.reset(token)


def as_called_here(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` to hand to another process (compare's workers, Ray's tasks), naming options there as this call's
    caller does: a run of ``greenadapt compare`` refuses in flags, whichever process it trains in."""
    return partial(_called_as, _ON_THE_COMMAND_LINE.get(), function)


def _called_as(on_the_command_line: bool, function: Callable[..., Any], *args: Any, **keywords: Any) -> Any:
    token = _ON_THE_COMMAND_LINE.set(on_the_command_line)
    try:
        return function(*args, **keywords)
    finally:
        _ON_THE_COMMAND_LINE.reset(token)


def _keywords(settings_class: type) -> dict[str, tuple[str, Any]]:
    """Each long flag of the command (and a switch's off form): its keyword and its declaration, or for a switch the value
    the flag gives it."""
    from greenadapt.options import RUN_OPTIONS, declared_fields
    from greenadapt.options.values import is_switch, type_hints

    hints = type_hints(settings_class)
    keywords: dict[str, tuple[str, Any]] = {"--config": ("config", None)}
    command = getattr(settings_class, "command", "")
    if command:  # "see --help for --epochs": where a Python caller reads the same text
        keywords["--help"] = (f"help(greenadapt.{command})", None)
    for name, (kind, declaration) in RUN_OPTIONS.items():
        keywords.update({flag: (name, True if kind is bool else declaration) for flag in declaration.flags if flag.startswith("--")})
    for field, declaration in declared_fields(settings_class):
        switch = is_switch(hints[field.name])  # as the command line declares it: a --no- form (cli/_build.py)
        keywords.update({flag: (field.name, True if switch else declaration) for flag in declaration.flags if flag.startswith("--")})
        if switch:
            keywords[declaration.negated] = (field.name, False)
    return keywords


def _reworded(text: str, keywords: dict[str, tuple[str, Any]]) -> str:
    def reworded(match: re.Match[str]) -> str:
        flag, value = match["flag"], match["value"]
        if match["command"] or flag not in keywords:
            return match[0]
        name, declaration = keywords[flag]
        if isinstance(declaration, bool):  # a switch: --force, --no-both-views
            return f"{name}={declaration}" + (f" {value}" if value else "")
        if value and _AS_IS.fullmatch(value):
            return f"{name}={value}"
        if value and value.strip("'") in (getattr(declaration, "choices", None) or ()):
            return f"{name}={value.strip(chr(39))!r}"
        return name + (f" {value}" if value else "")

    return _PIECE.sub(reworded, text)
