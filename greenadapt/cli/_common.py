"""Helpers shared by the command modules: logging, progress, output.

Results go to stdout (a one-line summary, or JSON with ``--json``); logs and
progress go to stderr. Progress bars appear only on a TTY and never with
``--quiet``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import typer

from greenadapt.progress import NULL_PROGRESS, HeartbeatProgress, Progress, format_duration, heartbeat_interval

JsonOption = typer.Option(False, "--json", help="Print the result as JSON on stdout (a stage's: its manifest).")
QuietOption = typer.Option(False, "--quiet", "-q", help="No progress bars, warnings and errors only.")
VerboseOption = typer.Option(False, "--verbose", "-v", help="Debug logging.")

def stderr_console() -> Any:
    """The one rich console on stderr that log lines and the live progress display share."""
    global _CONSOLE
    if _CONSOLE is None or _CONSOLE.file is not sys.stderr:
        from rich.console import Console

        _CONSOLE = Console(stderr=True)
    return _CONSOLE


_CONSOLE: Any = None


def setup_logging(*, quiet: bool = False, verbose: bool = False) -> None:
    """Log lines to stderr: through the live display's console on a terminal (printed above the bars,
    never into them), as plain timestamped lines in a log (cron, CI, ``nohup``)."""
    from greenadapt.redaction import scrub_every_log_record

    scrub_every_log_record()
    logging.captureWarnings(True)  # a library's warnings become log records: scrubbed, and shown as ours are
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_greenadapt", False):
            root.removeHandler(old)
    handler: logging.Handler
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        handler = RichHandler(console=stderr_console(), show_path=False, log_time_format="%H:%M:%S", markup=False, rich_tracebacks=False)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname).1s %(name)s: %(message)s", "%H:%M:%S"))
    setattr(handler, "_greenadapt", True)  # noqa: B010  # marks ours, so a second setup replaces it
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("greenadapt").setLevel(level)
    # Libraries are chatty at INFO; their progress is shown by our own bars.
    for noisy in ("gensim", "smart_open", "urllib3", "httpx", "huggingface_hub", "transformers"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose else logging.WARNING)
    # transformers' load report (a table of MISSING/UNEXPECTED weights) is a warning on its own handler: greenadapt
    # checks the weights it loads itself and says what matters in one line.
    # transformers sets its own level when it is imported (from TRANSFORMERS_VERBOSITY), after this runs.
    import os

    logging.getLogger("transformers").setLevel(logging.DEBUG if verbose else logging.ERROR)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "debug" if verbose else "error")
    # and so are their bars (transformers' "Loading weights", "Writing model shards"): read when it is imported.
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()


class RichProgress:
    """The rich-backed implementation of :class:`greenadapt.progress.Progress`: one row per phase.

    A phase started again under the same name (align and expand both read the word2vec vectors) reuses its
    row. Counts read ``3.2/10.5 MB`` (no ``0/0`` for a corpus under 1 MB); a phase of unknown length shows
    its count alone, or nothing when it counts nothing, and ends as a full bar.
    """

    def __init__(self) -> None:
        from rich.progress import BarColumn, TextColumn
        from rich.progress import Progress as _RichProgress

        self._progress = _RichProgress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TextColumn("{task.fields[info]}"),
            _time_column(),
            console=stderr_console(),
            transient=False,
        )
        self._task: Any = None
        self._total: float | None = None
        self._unit = ""
        self._completed = 0.0
        self._rows: dict[str, Any] = {}
        self._progress.start()

    def start(self, description: str, total: float | None = None, unit: str = "") -> None:
        self.finish()
        # The phase's own total: rich's reset() keeps a row's old total when given None.
        self._total, self._unit, self._completed = total, unit, 0.0
        count = count_text(0, total, unit)
        if description in self._rows:
            self._task = self._rows[description]
            self._progress.reset(self._task, total=total, info="", count=count)
        else:
            self._task = self._rows[description] = self._progress.add_task(description, total=total, info="", count=count)

    def update(self, completed: float, **info: float | str) -> None:
        if self._task is None:
            return
        self._completed = completed
        text = "  ".join(_format_info(k, v) for k, v in info.items())
        self._progress.update(self._task, completed=completed, info=text, count=count_text(completed, self._total, self._unit))

    def finish(self) -> None:
        if self._task is None:
            return
        if self._total is not None:
            self._progress.update(self._task, total=self._total, completed=self._total,
                                  count=count_text(self._total, self._total, self._unit))
        else:
            end = max(self._completed, 1.0)
            self._progress.update(self._task, total=end, completed=end)
        self._task = None

    def close(self) -> None:
        self.finish()
        self._progress.stop()


def _time_column() -> Any:
    """``ETA 1m35s`` while a phase runs (``3.2 s`` so far while its length is unknown), ``done in 12s`` once it ends."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class PhaseTime(ProgressColumn):
        def render(self, task: Any) -> Text:
            if task.finished:
                return Text(f"done in {format_duration(task.finished_time or task.elapsed or 0)}", style="green")
            if task.total is None or task.time_remaining is None:
                return Text(format_duration(task.elapsed or 0), style="cyan")
            return Text(f"ETA {format_duration(task.time_remaining)}", style="cyan")

    return PhaseTime()


def count_text(completed: float, total: float | None, unit: str) -> str:
    """``1,200/5,000 words``, ``0.4/0.9 MB``, ``1,200 words`` (length unknown), or nothing for a phase that counts nothing."""
    if total is None:
        return f"{_count(completed, completed)} {unit}".strip() if completed or unit else ""
    return f"{_count(completed, total)}/{_count(total, total)} {unit}".strip()


def _count(value: float, scale: float) -> str:
    """Whole numbers with thousands separators, one decimal where the phase's size is under 100 (MB of a small corpus)."""
    if float(value).is_integer() and float(scale).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}" if abs(scale) < 100 else f"{value:,.0f}"


def _format_info(key: str, value: float | str) -> str:
    if isinstance(value, float | int) and key.endswith("_per_s"):
        return f"{value:,.0f} {key[: -len('_per_s')]}/s"
    return f"{key}={value}"


class progress_for:
    """``with progress_for(quiet) as progress:`` — a bar on a TTY, a heartbeat line every 30 s in a log, nothing with --quiet."""

    def __init__(self, quiet: bool) -> None:
        self._quiet = quiet
        self._bar: RichProgress | None = None

    def __enter__(self) -> Progress:
        if self._quiet:
            return NULL_PROGRESS
        if sys.stderr.isatty():
            self._bar = RichProgress()
            return self._bar
        interval = heartbeat_interval()
        return HeartbeatProgress(interval, sys.stderr) if interval > 0 else NULL_PROGRESS

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


def emit(manifest: Mapping[str, Any], summary: str, *, as_json: bool) -> None:
    """The stage's result on stdout: JSON for machines, else one summary line."""
    if as_json:
        sys.stdout.write(json.dumps(dict(manifest), indent=2, default=str) + "\n")
    else:
        sys.stdout.write(summary.rstrip("\n") + "\n")
    sys.stdout.flush()


def what_changed(expand_stats: Mapping[str, Any]) -> str:
    """One line that shows the method at work at any corpus size: new words one token each under T̂."""
    change = expand_stats.get("tokenization") or {}
    if not change.get("words_measured"):
        return ""
    examples = "; ".join(f"{e['word']}: {' '.join(e['general'])}" for e in change.get("examples", [])[:3])
    return (f"\nwhat changed: {expand_stats.get('n_new', 0):,} domain words are one token each in the domain tokenizer; the model's own "
            f"split them into {change['general_pieces_mean']:.2f} wordpieces on average (e.g. {examples})")


def neighbours_lines(rows: Sequence[Mapping[str, Any]], *, shown: int = 3) -> str:
    """The align report's most frequent new words: their word2vec neighbours, and the wordpieces nearest their new row."""
    rows = [row for row in rows if row.get("in_w2v") and row.get("within")][:shown]
    if not rows:
        return ""
    lines = [f"  {row['word']}: {', '.join(word for word, _ in row['within'][:3])}"
             + (f" | {', '.join(token for token, _ in row['cross'][:3])}" if row.get("cross") else "") for row in rows]
    return "\nneighbours (in word2vec | wordpieces nearest the new row; more: greenadapt align --probe WORD):\n" + "\n".join(lines)


def show_stage(summary: Callable[[Any], str]) -> Callable[[Any, bool], None]:
    """``show`` for a command whose result is a stage outcome: its manifest as JSON, or ``summary(outcome)``.

    Under torchrun only rank 0 reports: the other ranks' outcomes carry no manifest.
    """

    def show(outcome: Any, as_json: bool) -> None:
        if outcome.manifest:
            emit(outcome.manifest, summary(outcome), as_json=as_json)

    return show
