"""``GREENADAPT_*`` variables: one reader for the switches and one for the numbers, anything else refused in one line.

A cron line that sets ``GREENADAPT_KEEP_GOING=yes`` means it: every switch takes 1/true/yes/on and 0/false/no/off (any
case), and a value that is neither is refused before any work rather than read as off. A number
(``GREENADAPT_WORKERS``, ``GREENADAPT_HEARTBEAT``, ...) goes through the checks its command-line counterpart has: a
number of its kind, finite, in its bounds. The CLI checks them all when it starts (:func:`check_environment`), so the
reads deeper down, where a command first needs one, never meet a bad value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")

DEBUG_ENV = "GREENADAPT_DEBUG"  # tracebacks instead of one-line errors
KEEP_GOING_ENV = "GREENADAPT_KEEP_GOING"  # every compare goes on past a run that learned nothing, as --keep-going
CODECARBON_ENV = "GREENADAPT_CODECARBON"  # on, off, or auto (the default): see greenadapt.machine.codecarbon_meter
SWITCHES = {DEBUG_ENV: False, KEEP_GOING_ENV: False, CODECARBON_ENV: True}  # name: whether it also takes "auto"


def switch(name: str, default: bool | None = False, environ: Mapping[str, str] | None = None) -> bool | None:
    """The switch ``$name``: True or False, ``default`` when unset or empty, None for ``auto`` where a switch takes it."""
    from greenadapt.errors import UsageError

    raw = (os.environ if environ is None else environ).get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in ON:
        return True
    if raw in OFF:
        return False
    if raw == "auto" and SWITCHES.get(name):
        return None
    takes = "1/true/yes/on, 0/false/no/off" + (" or auto" if SWITCHES.get(name) else "")
    raise UsageError(f"${name}={raw!r} is neither on nor off", hint=f"set it to {takes}, or unset it")


WORKERS_ENV = "GREENADAPT_WORKERS"  # processes/threads of every stage (default: the cores this process may use)
HEARTBEAT_ENV = "GREENADAPT_HEARTBEAT"  # seconds between progress lines in a log (0: none)
TRACKER_TIMEOUT_ENV = "GREENADAPT_TRACKER_TIMEOUT"  # seconds a tracker's store may take to answer
WATTS_ENV = "GREENADAPT_CPU_WATTS_PER_CORE"  # the energy estimate's watts per busy core
MAX_SPOOL_ENV = "GREENADAPT_MAX_SPOOL_MB"  # what predict may spool of a compressed task file or stdin
# name: (kind, least value, what it takes, an example) for the one line that refuses a bad value
NUMBERS: dict[str, tuple[type, float, str, str]] = {
    WORKERS_ENV: (int, 1, "a whole number of at least 1", "GREENADAPT_WORKERS=4"),
    HEARTBEAT_ENV: (float, 0, "a number of seconds", "GREENADAPT_HEARTBEAT=60, or 0 for none"),
    TRACKER_TIMEOUT_ENV: (int, 1, "a whole number of seconds", "10"),
    WATTS_ENV: (float, 0, "watts per busy core", "10"),
    MAX_SPOOL_ENV: (int, 1, "a whole number of megabytes", "4096"),
}


def env_number(name: str, default: float | None = None, environ: Mapping[str, str] | None = None) -> Any:
    """``$name`` as its kind (:data:`NUMBERS`): ``default`` when unset or empty; a value that is not a finite number of
    that kind at or above its least is refused in one line."""
    import math

    from greenadapt.errors import UsageError

    kind, least, what, example = NUMBERS[name]
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw) if kind is float else int(raw)
    except ValueError:  # (also an integer past Python's digit limit)
        value = math.nan
    hint = f"{what}, e.g. {example}; or unset it"
    if isinstance(value, int) and value.bit_length() > 31:  # no count of workers or seconds is this large
        raise UsageError(f"${name} is {len(raw):,} characters long, not {what}", hint=hint)
    if not math.isfinite(value):
        raise UsageError(f"${name}={raw!r} is not {what}", hint=hint)
    if value < least:
        raise UsageError(f"${name}={raw!r} is below {least:g}", hint=hint)
    return value


def check_switches(environ: Mapping[str, str] | None = None) -> None:
    """Every switch read once, so a misspelt one is refused before the command starts."""
    for name in SWITCHES:
        switch(name, environ=environ)


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Every ``GREENADAPT_*`` switch and number read once, before the command starts."""
    check_switches(environ)
    for name in NUMBERS:
        env_number(name, environ=environ)


def debugging() -> bool:
    """``$GREENADAPT_DEBUG``: tracebacks instead of one-line errors; a value that is not a switch is off here, so that its
    own refusal (:func:`check_switches`) is the one line."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() in ON
