"""A minimal progress interface so library code never imports rich.

Library functions take a ``progress: Progress`` argument (default
:data:`NULL_PROGRESS`); the CLI passes a rich-backed implementation when
stderr is a TTY, a :class:`HeartbeatProgress` (a plain line every 30 s) when
it is not, and nothing with ``--quiet``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TextIO

from greenadapt.switches import HEARTBEAT_ENV, env_number

DEFAULT_HEARTBEAT_SECONDS = 30.0
FIRST_LINE_SECONDS = 5.0  # a phase's first heartbeat line comes this soon, whatever the interval


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


class HeartbeatProgress:
    """Progress for logs and pipes (cron, CI, ``nohup``): one plain line per phase every ``interval`` seconds.

    A bar means nothing in a log file, and silence for minutes looks like a
    hang; so when stderr is not a terminal the CLI prints, at most every
    ``interval`` seconds, what is running, how far it is, its rate and ETA:
    ``12:00:31 finetune: 120/600 steps (20%), 3.1 steps/s, ETA 2m35s, loss=0.412``.
    """

    def __init__(self, interval: float, stream: TextIO, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.stream = stream
        self.clock = clock
        self._description = ""
        self._total: float | None = None
        self._unit = ""
        self._started = self._last = 0.0
        self._said = False

    def start(self, description: str, total: float | None = None, unit: str = "") -> None:
        self._description, self._total, self._unit = description, total, unit
        self._started = self._last = self.clock()
        self._said = False

    def update(self, completed: float, **info: float | str) -> None:
        now = self.clock()
        # a phase's first line within FIRST_LINE_SECONDS (a 30 s job is not silent for its whole life), then every interval
        if now - self._last < (self.interval if self._said else min(self.interval, FIRST_LINE_SECONDS)):
            return
        self._last, self._said = now, True
        self.stream.write(self.line(completed, now - self._started, info) + "\n")
        self.stream.flush()

    def finish(self) -> None:
        pass

    def line(self, completed: float, elapsed: float, info: dict[str, float | str]) -> str:
        unit = f" {self._unit}" if self._unit else ""
        done = _number(completed)
        parts = [f"{done}/{_number(self._total)}{unit} ({100 * completed / self._total:.0f}%)" if self._total else f"{done}{unit}"]
        # The caller's own rate in this phase's unit wins: it knows about steps done before a resume.
        given = info.get(f"{self._unit}_per_s")
        rate = float(given) if isinstance(given, int | float) else completed / elapsed if elapsed > 0 else 0.0
        if rate > 0:
            parts.append(f"{_number(rate)} {self._unit or 'items'}/s")
            if self._total:
                parts.append(f"ETA {format_duration((self._total - completed) / rate)}")
        parts += [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items() if not k.endswith("_per_s")]
        return f"{time.strftime('%H:%M:%S')} {self._description}: " + ", ".join(parts)


def _number(value: float) -> str:
    """Counts as people read them: ``1,234,567``, ``934,206``, ``12.3``, ``0.512``."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def format_duration(seconds: float) -> str:
    """``95`` → ``1m35s``; ``4000`` → ``1h06m``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def heartbeat_interval() -> float:
    """Seconds between heartbeat lines: ``$GREENADAPT_HEARTBEAT`` (0 switches them off), else 30."""
    return float(env_number(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_SECONDS))


class AnnouncingProgress(HeartbeatProgress):
    """Heartbeat lines, and one line as each phase starts: in a notebook or a script, a run that has not yet
    been going for ``interval`` seconds still says what it is doing."""

    def start(self, description: str, total: float | None = None, unit: str = "") -> None:
        super().start(description, total, unit)
        self.stream.write(f"{time.strftime('%H:%M:%S')} {description}\n")
        self.stream.flush()


class BarProgress:
    """Progress bars through ``tqdm.auto``: widgets in a Jupyter notebook, a text bar on a terminal (the Python
    API's default where someone is watching; tqdm comes with transformers)."""

    def __init__(self) -> None:
        self._bar: Any = None

    def start(self, description: str, total: float | None = None, unit: str = "") -> None:
        from tqdm.auto import tqdm

        self.finish()
        self._bar = tqdm(total=total, desc=description, unit=f" {unit}" if unit else "it", leave=True, dynamic_ncols=True)

    def update(self, completed: float, **info: float | str) -> None:
        if self._bar is None:
            return
        self._bar.update(completed - self._bar.n)
        shown = {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in info.items() if not k.endswith("_per_s")}
        if shown:
            self._bar.set_postfix(shown, refresh=False)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def watched(stream: TextIO | None = None) -> bool:
    """Whether a person is likely watching: a Jupyter/IPython kernel, or a terminal on ``stream`` (stderr)."""
    if "ipykernel" in sys.modules:
        return True
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def as_progress(progress: Progress | bool | None, *, interval: float = 10.0) -> Progress:
    """What the Python API's ``progress=`` means: a :class:`Progress` as given; False for none; True for plain
    lines on stderr (each phase as it starts, then every ``interval`` seconds: a script's log); None (the default)
    for bars where someone is watching (a notebook or a terminal, :func:`watched`) and plain lines elsewhere."""
    if progress is False:
        return NULL_PROGRESS
    if progress is None:
        return BarProgress() if watched() else AnnouncingProgress(interval, sys.stderr)
    if progress is True:
        return AnnouncingProgress(interval, sys.stderr)
    return progress


class StepRate:
    """Steps per second since a (re)start, for the progress line of a training loop."""

    def __init__(self, first_step: int, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.first_step = first_step
        self.clock = clock
        self.started = clock()

    def per_second(self, step: int) -> float:
        return (step - self.first_step) / max(self.clock() - self.started, 1e-9)


@contextlib.contextmanager
def said_once(logger_name: str = "greenadapt") -> Iterator[None]:
    """While a long job runs (a cron job's predict): each warning is said the first time, its repeats only counted and
    said once at the end with their number, so that a log of 60,000 sentences is not 600 copies of one line."""
    import logging

    counts: dict[tuple[str, Any], list[Any]] = {}  # (logger, message template) -> [records seen, the first record]
    last: list[Any] = [None]  # a record passes every handler in turn: counted at the first, known by identity

    def first_only(record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        seen = counts.setdefault((record.name, record.msg), [0, record])
        if record is not last[0]:
            last[0] = record
            seen[0] += 1
        return record is seen[1]

    logger = logging.getLogger(logger_name)
    handlers = [*logger.handlers, *logging.getLogger().handlers]
    for handler in handlers:
        handler.addFilter(first_only)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(first_only)
        for (name, _), (times, record) in list(counts.items()):
            if times > 1:
                logging.getLogger(name).warning("%s (said %d times in all)", record.getMessage(), times)


@contextlib.contextmanager
def said_scoring(log: Any, split: str, size: str) -> Iterator[None]:
    """A runner's scoring of ``split``, minutes on a CPU for a real file: said in ``log`` when it starts, with its
    ``size`` ("940 examples, 941 sequences"), and when it ends, with its time (README's promise of a line a phase)."""
    started = time.perf_counter()
    log.info("scoring %s: %s", split, size)
    yield
    log.info("scored %s in %.1f s", split, time.perf_counter() - started)
