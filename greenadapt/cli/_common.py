"""Helpers shared by the command modules: logging, progress, output.

Results go to stdout (a one-line summary, or JSON with ``--json``); logs and
progress go to stderr. Progress bars appear only on a TTY and never with
``--quiet``.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from greenadapt.adaptation.methods import method_help
from greenadapt.api import adapt as _adapt
from greenadapt.api import default_of
from greenadapt.progress import NULL_PROGRESS, HeartbeatProgress, Progress, format_duration, heartbeat_interval

WorkdirOption = typer.Option(
    None, "--workdir", help="Workspace for stage outputs (default: $GREENADAPT_WORKDIR, else ./greenadapt-work)."
)
ForceOption = typer.Option(False, "--force", help="Redo the stage even if an up-to-date output exists.")
WaitOption = typer.Option(False, "--wait", help="If another process is writing the same output, wait for it instead of failing.")
JsonOption = typer.Option(False, "--json", help="Print the manifest as JSON on stdout.")
QuietOption = typer.Option(False, "--quiet", "-q", help="No progress bars, warnings and errors only.")
VerboseOption = typer.Option(False, "--verbose", "-v", help="Debug logging.")

# The initialisation method and its options: names and help come from the registry (greenadapt.adaptation.methods).
MethodOption = typer.Option(
    default_of(_adapt, "method"), "--method", metavar="NAME", help=method_help()
)
FocusKOption = typer.Option(
    default_of(_adapt, "focus_k"), "--focus-k", metavar="N", help="focus: how many nearest shared words weigh into a row.")
FocusTemperatureOption = typer.Option(
    default_of(_adapt, "focus_temperature"), "--focus-temperature", metavar="FLOAT", help="focus: similarities are divided by this before sparsemax (smaller: sparser)."
)
HybridWeightOption = typer.Option(
    default_of(_adapt, "hybrid_weight"), "--hybrid-weight", metavar="FLOAT", help="hybrid: the weight of lstsq (the rest is subword-mean).")
ContextLayerOption = typer.Option(
    default_of(_adapt, "context_layer"), "--context-layer", metavar="N", help="context-mean: hidden layer of the base model (0 = embeddings, -1 = the last)."
)
ContextCapOption = typer.Option(
    default_of(_adapt, "context_cap"), "--context-cap", metavar="N", help="context-mean: occurrences averaged per word at most.")
ContextMaxTokensOption = typer.Option(
    None, "--context-max-tokens", metavar="N", help="context-mean: read at most N corpus tokens (default: until every word has --context-cap)."
)
DistillPerWordOption = typer.Option(
    default_of(_adapt, "distill_per_word"), "--distill-per-word", metavar="N", help="distill: corpus windows per new word at most.")
DistillSentencesOption = typer.Option(
    default_of(_adapt, "distill_sentences"), "--distill-sentences", metavar="N", help="distill: corpus windows in all at most (the CPU cost grows with it).")
DistillEpochsOption = typer.Option(
    default_of(_adapt, "distill_epochs"), "--distill-epochs", metavar="N", help="distill: passes over the windows.")
MatchNormOption = typer.Option(
    default_of(_adapt, "match_norm"), "--match-norm", help="Rescale each new row to the mean norm of the model's whole-word rows (any method)."
)

# Groups of options several commands share: ``api_command(..., groups=(...))`` adds them.
METHOD_OPTIONS = (
    ("method", str, MethodOption), ("focus_k", int, FocusKOption), ("focus_temperature", float, FocusTemperatureOption),
    ("hybrid_weight", float, HybridWeightOption), ("match_norm", bool, MatchNormOption),
    ("distill_per_word", int, DistillPerWordOption), ("distill_sentences", int, DistillSentencesOption), ("distill_epochs", int, DistillEpochsOption),
)
CONTEXT_OPTIONS = (("context_layer", int, ContextLayerOption), ("context_cap", int, ContextCapOption), ("context_max_tokens", int | None, ContextMaxTokensOption))


def optimizer_options(function: Callable[..., Any]) -> tuple[tuple[str, Any, Any], ...]:
    """The AdamW schedule options every training command shares, with ``function``'s defaults."""
    return (
        ("warmup", float, typer.Option(default_of(function, "warmup"), "--warmup", help="Fraction of the steps spent warming up.")),
        ("weight_decay", float, typer.Option(default_of(function, "weight_decay"), "--weight-decay", help="AdamW weight decay.")),
    )


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
            self._progress.update(self._task, total=self._total, completed=self._total, count=count_text(self._total, self._total, self._unit))
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


# An override that leaves an option out of the API call (an option the CLI has and the API does not).
DROP: Any = object()


def given(name: str) -> bool:
    """Whether the running command's option ``name`` was given (on the command line or in the environment), not defaulted."""
    from typer._click.globals import get_current_context  # typer vendors click: its context, not click's

    ctx = get_current_context(silent=True)
    source = ctx.get_parameter_source(name) if ctx is not None else None
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def api_command(
    name: str,
    function: Callable[..., Any],
    show: Callable[[Any, bool], None],
    *,
    renames: Mapping[str, str] | None = None,
    groups: tuple[tuple[tuple[str, Any, Any], ...], ...] = (),
    example: str | None = None,
    **command_settings: Any,
) -> Callable[[Callable[..., dict[str, Any] | None]], Callable[..., None]]:
    """Register ``greenadapt NAME`` as the Python API's ``function`` (spaCy's ``spacy/cli`` shape).

    The decorated function declares the command's options (its parameters: typer options whose
    defaults come from ``function``'s signature) and its help (the docstring); each option goes to
    the API parameter of its name (``renames``: the ones spelled otherwise). Its body checks what
    the API cannot (it runs before anything else) and returns None, or overrides for options that
    need parsing (``--seeds 1,2,3``; :data:`DROP` leaves one out). Every command gets ``--json``,
    ``--quiet`` and ``--verbose``, and ``--workdir``, ``--force`` and ``--wait`` where ``function`` takes them
    (each declared by the function instead when its body needs it or its help differs), and the
    options of each of ``groups`` (:data:`METHOD_OPTIONS`, :data:`CONTEXT_OPTIONS`); logging to
    stderr and progress; ``show(result, as_json)`` prints the result. ``example``: the command line
    its ``--help`` ends on.
    """
    from greenadapt.cli import app
    from greenadapt.cli.help import EXAMPLES

    if example is not None:
        EXAMPLES[name] = example

    def register(options: Callable[..., dict[str, Any] | None]) -> Callable[..., None]:
        signature = inspect.signature(options, eval_str=True)
        api_parameters = inspect.signature(function).parameters
        shared = [*(spec for group in groups for spec in group), *(spec for spec in _RUN_CONTROL if spec[0] in api_parameters)]
        control = [  # the shared groups, and the run-control options of every command whose API function takes them
            inspect.Parameter(flag, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
            for flag, annotation, default in shared
            if flag not in signature.parameters
        ]
        output = [
            inspect.Parameter(flag, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=bool)
            for flag, default in (("as_json", JsonOption), ("quiet", QuietOption), ("verbose", VerboseOption))
            if flag not in signature.parameters
        ]

        @functools.wraps(options)
        def command(**values: Any) -> None:
            setup_logging(quiet=values["quiet"], verbose=values["verbose"])
            overrides = options(**{key: value for key, value in values.items() if key in signature.parameters}) or {}
            arguments = {key: value for key, value in values.items() if key not in _OUTPUT_FLAGS} | overrides
            arguments = {(renames or {}).get(key, key): value for key, value in arguments.items() if value is not DROP}
            with progress_for(values["quiet"]) as progress:
                result = function(**arguments, **({"progress": progress} if "progress" in api_parameters else {}))
            show(result, values["as_json"])

        command.__signature__ = signature.replace(parameters=[*signature.parameters.values(), *control, *output])  # type: ignore[attr-defined]
        app.command(name, **command_settings)(command)
        return command

    return register


_OUTPUT_FLAGS = ("as_json", "quiet", "verbose")
_RUN_CONTROL = (("workdir", Path | None, WorkdirOption), ("force", bool, ForceOption), ("wait", bool, WaitOption))


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
