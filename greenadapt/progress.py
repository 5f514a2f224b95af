"""A minimal progress interface so library code never imports rich.

Library functions take a ``progress: Progress`` argument (default
:data:`NULL_PROGRESS`); the CLI passes a rich-backed implementation when
stderr is a TTY and ``--quiet`` is not given.
"""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def start(self, description: str, total: float | None = None, unit: str = "") -> None:
        """Begin a phase; ``total`` in ``unit`` (None: unknown length)."""

    def update(self, completed: float, **info: float | str) -> None:
        """Absolute position within the current phase, plus extra fields (e.g. words_per_s)."""

    def finish(self) -> None:
        """End the current phase."""


class NullProgress:
    def start(self, description: str, total: float | None = None, unit: str = "") -> None:
        pass

    def update(self, completed: float, **info: float | str) -> None:
        pass

    def finish(self) -> None:
        pass


NULL_PROGRESS: Progress = NullProgress()
