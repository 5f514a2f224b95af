"""The ``greenadapt`` command line.

One module per command (``greenadapt/cli/<command>.py``); each parses its
options and calls a plain library function that knows nothing of typer.
Heavy libraries (torch, transformers, gensim) are imported inside the
commands, so ``greenadapt --help`` stays instant.
"""

from __future__ import annotations

import inspect
import os
import signal
import sys
from types import FrameType
from typing import Any

import typer

from greenadapt.version import __version__

app = typer.Typer(
    name="greenadapt",
    help="Cheap domain adaptation of BERT-style models: w2v -> align -> expand on CPU, then finetune.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"greenadapt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
    co2_intensity: float | None = typer.Option(
        None, "--co2-intensity", min=0, metavar="G",
        help="Grid carbon intensity in g CO2/kWh for the manifests' CO2 figures (default: $GREENADAPT_CO2_INTENSITY, else world average).",
    ),
    country: str | None = typer.Option(
        None, "--country", metavar="XX", help="Take the grid carbon intensity of this country (ISO code, e.g. DE; Ember 2023 averages)."
    ),
    heartbeat: float | None = typer.Option(
        None, "--heartbeat", min=0, metavar="SECONDS",
        help="When stderr is not a terminal (cron, CI, nohup): a progress line every SECONDS (default: $GREENADAPT_HEARTBEAT, else 30; 0: none).",
    ),
) -> None:
    """greenadapt: domain vocabulary on CPUs in hours, the GPU only for fine-tuning."""
    if heartbeat is not None:
        from greenadapt.progress import HEARTBEAT_ENV

        os.environ[HEARTBEAT_ENV] = str(heartbeat)
    if co2_intensity is not None or country is not None:
        from greenadapt.machine.intensity import configure

        configure(intensity=co2_intensity, country=country)


# The root options that take a value (every one of _root's but the flags): the word after one is its value, not the command.
# An annotation is the string "bool" under `from __future__ import annotations`, the type bool without it.
ROOT_OPTIONS_WITH_VALUE = frozenset(
    name for p in inspect.signature(_root).parameters.values() if p.annotation not in ("bool", bool)
    for name in p.default.param_decls
)


def _invoked_command(argv: list[str]) -> str | None:
    """The command word of a command line: the first word that is neither a root option nor its value; None
    when the root's help comes first (``greenadapt --help w2v`` lists every command)."""
    words = iter(argv)
    for word in words:
        if word in ROOT_OPTIONS_WITH_VALUE:
            next(words, None)
        elif word in ("-h", "--help"):
            return None
        elif not word.startswith("-"):
            return word
    return None


def refuse_repeated_options(root: Any, argv: list[str]) -> None:
    """A single-value option given twice (``predict -m a -m b``) is refused: click would keep the last silently."""
    from greenadapt.errors import UsageError

    name = _invoked_command(argv)
    sub = getattr(root, "commands", {}).get(name) if name else None
    if sub is None or name is None:
        return
    single = {opt: param for param in sub.params if getattr(param, "opts", None) and not getattr(param, "multiple", True)
              and not getattr(param, "count", False) and not getattr(param, "is_flag", False) for opt in param.opts}
    seen: dict[str, list[str]] = {}
    words = argv[argv.index(name) + 1:]
    position = 0
    while position < len(words):
        word = words[position]
        if word == "--":
            break
        flag = word.partition("=")[0] if word.startswith("--") else word
        if flag in single:
            seen.setdefault(single[flag].name, []).append(flag)
            position += 0 if "=" in word else 1  # its value
        position += 1
    for flags in seen.values():
        if len(flags) > 1:
            raise UsageError(f"{flags[0]} was given {len(flags)} times", hint=f"give {flags[0]} once: only one value is used")


def _register(argv: list[str] | None = None) -> None:
    """Import the command modules, each for its @app.command side effect (each keeps heavy imports local).

    Given the command line, only the command it names, when it names one: the other modules' imports cost
    a tenth of a second a run. Otherwise (no command, a typo, shell completion) all of them; pkgutil lists
    them sorted, so commands are listed alphabetically."""
    import importlib
    import pkgutil

    names = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_") and m.name != "help"]
    invoked = _invoked_command(argv) if argv is not None and "_GREENADAPT_COMPLETE" not in os.environ else None
    for name in [invoked] if invoked in names else names:
        importlib.import_module(f"{__name__}.{name}")


def command(argv: list[str] | None = None) -> Any:
    """The command tree as click builds it from the typer app, with its help dressed (cli/help.py): every
    command, or with ``argv`` the one it invokes (see :func:`_register`)."""
    import typer.main

    from greenadapt.cli.help import dress

    _register(argv)
    return dress(typer.main.get_command(app))


def main() -> None:
    """Console entry point: run the app, map errors to one line and an exit code."""
    from greenadapt.errors import (
        EXIT_INTERNAL,
        EXIT_INTERRUPTED,
        EXIT_RESOURCE,
        GreenAdaptError,
        Terminated,
    )

    global _EXITING
    debug = os.environ.get("GREENADAPT_DEBUG", "") not in ("", "0")
    _stop_on_signals()
    try:
        # Without standalone mode click returns what it would have exited with,
        # e.g. 130 after it caught a KeyboardInterrupt itself.
        tree = command(sys.argv[1:])
        refuse_repeated_options(tree, sys.argv[1:])
        returned = tree.main(prog_name="greenadapt", standalone_mode=False)
    except GreenAdaptError as exc:
        if debug:
            raise
        _fail(f"error: {exc.one_line()}", exc.exit_code)
    except KeyboardInterrupt:
        _EXITING = True  # the first stop signal says how the run ends; one during its line is only recorded
        _fail_for_signal(signal.SIGINT)
    except Terminated:
        _EXITING = True
        _fail_for_signal(signal.SIGTERM)
    except MemoryError:
        if debug:
            raise
        _fail("error: out of memory (try fewer --workers, a smaller --max-new or a machine with more RAM)", EXIT_RESOURCE)
    except SystemExit:
        raise
    except Exception as exc:
        # A signal handler's exception raised inside a C extension's callback can come out as another
        # error (torch turns a KeyboardInterrupt during shape inference into a ValueError): once a stop
        # signal has arrived, whatever ends the run is that signal.
        if _STOP_SIGNALS and not debug:
            _fail_for_signal(_STOP_SIGNALS[0])
        # typer vendors click; reach its exception types through typer itself.
        if isinstance(exc, typer.Abort):
            _fail("interrupted", EXIT_INTERRUPTED)
        if isinstance(exc, typer.Exit):
            sys.exit(exc.exit_code)
        code = getattr(exc, "exit_code", None)
        if hasattr(exc, "format_message") and isinstance(code, int):
            _fail(f"error: {_usage_error_line(exc)}", code)  # click's own usage errors, exit 2
        if debug:
            raise
        if _disk_full(exc):
            _fail("error: disk full (free space or choose another --workdir/--out)", EXIT_RESOURCE)
        if isinstance(exc, OSError) and exc.filename:
            _fail(f"error: {exc.filename}: {exc.strerror or exc}", EXIT_RESOURCE)
        _fail(
            f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]} "
            "(a bug in greenadapt; rerun with GREENADAPT_DEBUG=1 for the traceback and report it)",
            EXIT_INTERNAL,
        )
    if returned == EXIT_INTERRUPTED:
        _fail_for_signal(signal.SIGINT)
    sys.exit(returned if isinstance(returned, int) else 0)


def entry_point() -> None:
    """The ``greenadapt`` program (console script and ``python -m greenadapt``): :func:`main`, then an exit that cannot hang.

    Python joins a library's non-daemon threads at exit, and one that waits
    forever keeps a finished run from ending (seen: codecarbon's executor
    importing pandas after a stop signal's exception, raised inside
    importlib's bookkeeping, had kept the import lock; the handlers no longer
    raise there, :mod:`greenadapt.machine.stop_signals`). Once the exit status
    is known every result is written, so the process ends within
    :data:`EXIT_DEADLINE_S` with that status whatever its other threads do.
    :func:`main` alone, for a caller in the same process, leaves the process
    alone.
    """
    global _EXITING
    from greenadapt.errors import EXIT_INTERRUPTED, Terminated

    try:
        try:
            main()
        # A stop signal that lands once main knows how it ends (while it writes its last line, say) is raised
        # outside main's own handlers: it ends the run as that signal, not as a traceback.
        except Terminated:
            _EXITING = True
            _fail_for_signal(signal.SIGTERM)
        except KeyboardInterrupt:
            _EXITING = True
            _fail_for_signal(signal.SIGINT)
    except SystemExit as exc:
        # First, before any call: Python runs signal handlers only at calls and loops, so none runs between
        # knowing the status and this. From here on a stop signal changes nothing (seen: a SIGTERM raised
        # inside the deadline thread's start, after a finished expand, ended it with a traceback and exit 1).
        _EXITING = True
        _end_process_within(EXIT_DEADLINE_S, exc.code)
        raise
    except KeyboardInterrupt:  # a second Ctrl-C while the first one's message was being written
        _EXITING = True
        _end_process_within(EXIT_DEADLINE_S, EXIT_INTERRUPTED)
        raise


EXIT_DEADLINE_S = 10.0


def _end_process_within(seconds: float, code: object) -> None:
    import threading
    import time

    status = 0 if code is None else code if isinstance(code, int) else 1

    def end() -> None:
        time.sleep(seconds)
        try:
            sys.stdout.flush()
            sys.stderr.write(f"greenadapt: a library's thread kept the process from exiting for {seconds:.0f} s; ended it (exit {status})\n")
            sys.stderr.flush()
        finally:
            os._exit(status)

    threading.Thread(target=end, name="greenadapt-exit-deadline", daemon=True).start()


_STOP_SIGNALS: list[int] = []  # the stop signals this process has received, in order
_EXITING = False  # the program knows its exit status and every result is written: a stop signal is only recorded


def _fail_for_signal(signum: int) -> None:
    """End the run as stopped by ``signum``: its one line and exit code; a later stop signal is only recorded.

    Callers set ``_EXITING`` themselves where they can before any call (see :func:`entry_point`); this sets it
    again for the paths that reach here otherwise.
    """
    global _EXITING
    _EXITING = True
    from greenadapt.errors import EXIT_INTERRUPTED, EXIT_TERMINATED

    rerun = _rerun_advice(sys.argv[1:])
    if signum == signal.SIGTERM:
        _fail(f"terminated by SIGTERM: nothing was left half-written; {rerun}", EXIT_TERMINATED)
    _fail(f"interrupted: nothing was left half-written; {rerun}", EXIT_INTERRUPTED)


def _rerun_advice(argv: list[str]) -> str:
    """How to continue: a training run that saves checkpoints is refused on a plain rerun until ``--resume``."""
    saves = any(word == "--save-every" or word.startswith("--save-every=") for word in argv)
    if _invoked_command(argv) in ("finetune", "pretrain") and saves and "--resume" not in argv:
        return "rerun with --resume to continue from its last checkpoint"
    return "rerun to continue"


def _stop_on_signals() -> None:
    """SIGINT raises KeyboardInterrupt and SIGTERM raises :class:`~greenadapt.errors.Terminated`, so stages remove their temporaries and locks.

    The default action would kill the process at once: the output stays safe
    (a stage folder is renamed into place whole), but nothing is said and a
    temporary folder is left for the next run. A second SIGTERM during the
    cleanup takes the default action. ``finetune`` replaces this handler
    while it trains (checkpoint, exit 99). Neither raises inside importlib's
    bookkeeping, where the exception would be lost and the import lock kept
    (:mod:`greenadapt.machine.stop_signals`).
    """
    import threading

    from greenadapt.errors import Terminated
    from greenadapt.machine.stop_signals import raise_when_safe

    if threading.current_thread() is not threading.main_thread():
        return

    def terminate() -> BaseException | None:
        if _EXITING:
            return None
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        return Terminated()

    def interrupt() -> BaseException | None:
        return None if _EXITING else KeyboardInterrupt()

    def stopped(signum: int, frame: FrameType | None) -> None:
        _STOP_SIGNALS.append(signum)
        if not _EXITING:  # checked again when the exception is made: it may wait for importlib
            raise_when_safe(frame, terminate if signum == signal.SIGTERM else interrupt)

    signal.signal(signal.SIGTERM, stopped)
    # Python raises KeyboardInterrupt on SIGINT only if SIGINT was not ignored when it started.
    # A shell without job control starts background jobs (`cmd &`, cron wrappers, CI runners)
    # with SIGINT ignored, and then a `kill -INT` or a Ctrl-C relayed by a wrapper was dropped
    # without a word and the stage ran on to "success". Every SIGINT sent to greenadapt stops it.
    signal.signal(signal.SIGINT, stopped)


def _usage_error_line(exc: Exception) -> str:
    """click's usage error (three lines: usage, help pointer, message) as one line that says where help is.

    An option of ``greenadapt`` itself given after the command (``greenadapt adapt --country DE``)
    is unknown to the command; the line then says where it goes.
    """
    message = " ".join(str(exc.format_message()).split())  # type: ignore[attr-defined]
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "greenadapt"
    option = getattr(exc, "option_name", None)
    if option and ctx is not None and ctx.parent is not None:
        own = {name for param in ctx.find_root().command.params for name in getattr(param, "opts", [])}
        if option in own:
            return f"{option} is an option of greenadapt itself, not of {ctx.info_name}: put it before the command" \
                   f" (greenadapt {option} ... {ctx.info_name} ...)"
    return f"{message} (see '{where} -h')"


def _disk_full(exc: BaseException) -> bool:
    """A full disk, as Python reports it (ENOSPC, EDQUOT) or as a native writer does (safetensors: ``StorageFull``)."""
    import errno

    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "StorageFull" in str(exc) or "No space left on device" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


def _fail(message: str, code: int) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    sys.exit(code)
