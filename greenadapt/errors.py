"""Typed errors, each mapped by the CLI to one line and an exit code.

Library code raises these with *what* went wrong, *where* (file and line
when there is one) and *how to fix it*; the CLI prints
``error: <where>: <what> (<fix>)`` and exits with ``exit_code``. Anything
else that escapes is a bug and is reported as such.
"""

from __future__ import annotations

import os

# Exit codes are part of the interface: shell pipelines and cron wrappers
# branch on them. Keep them stable and documented in the README.
EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_STAGE_CONFLICT = 4
EXIT_RESOURCE = 5
EXIT_LOCKED = 75  # EX_TEMPFAIL: try again later
# SIGTERM stopped `finetune` after it saved a checkpoint; `--resume` continues.
# 99 is what Grid Engine reads as "requeue this job".
EXIT_PREEMPTED = 99
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT): 128 + 2, as a shell reports it
# SIGTERM to any command but a training `finetune` (which saves a checkpoint
# and exits 99): 128 + 15, what a shell reports for a process SIGTERM killed.
EXIT_TERMINATED = 143


class GreenAdaptError(Exception):
    """Base class: a failure the user can act on."""

    exit_code = EXIT_INTERNAL

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        path: str | os.PathLike[str] | None = None,
        line: int | None = None,
    ) -> None:
        message, hint = scrubbed(message), scrubbed(hint) if hint is not None else None
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.path = os.fspath(path) if path is not None else None
        self.line = line

    def one_line(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
            where += ": "
        text = f"{where}{self.message}"
        if self.hint:
            text += f" ({self.hint})"
        return escape_controls(" ".join(text.split()))  # one line, whatever the parts held; no terminal controls

    def __str__(self) -> str:
        return self.one_line()


# Control characters (C0 but the tab, DEL, C1) as visible escapes: text read from a file and shown in a terminal must
# not move its cursor, clear it or set its title (an edited compare.json's recommendation, a quoted value).
_CONTROL_ESCAPES = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if code != 0x09}


def escape_controls(text: str) -> str:
    """``text`` with every control character but the tab written as ``\\xNN``."""
    return text.translate(_CONTROL_ESCAPES)


def scrubbed(text: str) -> str:
    """An error's words without a credential: a refused value may be a URL with ``user:password@`` in it (a config's
    ``corpus = {url=...}``, ``--train https://...``), and the line is shown, logged and written to run logs."""
    from greenadapt.redaction import scrub_secrets

    return scrub_secrets(text)


class UsageError(GreenAdaptError):
    """Options that contradict each other or name nothing usable."""

    exit_code = EXIT_USAGE


class InputError(GreenAdaptError):
    """An input file, corpus, model or task file that cannot be used."""

    exit_code = EXIT_BAD_INPUT


class CorpusError(InputError):
    """A corpus source that is missing, empty, binary or unreadable."""


class ModelError(InputError):
    """A model that is missing or not a BERT-style WordPiece model."""


class DataError(InputError):
    """A labelled task file with a malformed line or unknown label."""


class StageError(GreenAdaptError):
    """A stage folder that is of the wrong kind, incomplete or corrupt."""

    exit_code = EXIT_STAGE_CONFLICT


class OutputExistsError(StageError):
    """An output folder exists and was made with other inputs or options."""


class ResourceError(GreenAdaptError):
    """Disk full, unwritable folder, out of memory."""

    exit_code = EXIT_RESOURCE


class LockedError(GreenAdaptError):
    """Another greenadapt process is writing the same output."""

    exit_code = EXIT_LOCKED


class Terminated(BaseException):
    """SIGTERM arrived; raised by the CLI's handler so that cleanup runs.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception``
    in library code can swallow it on the way out.
    """

    exit_code = EXIT_TERMINATED


def is_disk_full(exc: BaseException) -> bool:
    """A full disk, as Python reports it (ENOSPC, EDQUOT) or as a native writer does (safetensors: ``StorageFull``)."""
    import errno

    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "StorageFull" in str(exc) or "No space left on device" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False
