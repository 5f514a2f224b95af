"""``GREENADAPT_*`` switches: one reader, one spelling of on and off, anything else refused in one line.

A cron line that sets ``GREENADAPT_KEEP_GOING=yes`` means it: every switch takes 1/true/yes/on and 0/false/no/off (any
case), and a value that is neither is refused before any work rather than read as off. The CLI checks them all when
it starts (:func:`check_switches`), so the reads deeper down never meet a bad value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

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


def check_switches(environ: Mapping[str, str] | None = None) -> None:
    """Every switch read once, so a misspelt one is refused before the command starts."""
    for name in SWITCHES:
        switch(name, environ=environ)


def debugging() -> bool:
    """``$GREENADAPT_DEBUG``: tracebacks instead of one-line errors; a value that is not a switch is off here, so that its
    own refusal (:func:`check_switches`) is the one line."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() in ON
