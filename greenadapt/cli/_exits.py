"""How the ``greenadapt`` program ends: errors as one line and an exit code, stop signals, an exit that cannot hang.

The command tree (:mod:`greenadapt.cli`) parses and runs a command; this module runs the program around it:
:func:`main` maps what a command raised to its line and exit code, :func:`entry_point` (the console script)
also bounds how long library threads may keep a finished process alive.
"""

from __future__ import annotations

import signal
import sys

import typer

from greenadapt.errors import is_disk_full
from greenadapt.machine.stop_signals import end_process_within as _end_process_within
from greenadapt.machine.stop_signals import stop_on_signals


def main() -> None:
    """Console entry point: run the app, map errors to one line and an exit code."""
    from greenadapt.errors import EXIT_INTERRUPTED, EXIT_RESOURCE, GreenAdaptError, Terminated

    global _EXITING
    from greenadapt.switches import check_environment, debugging

    debug = debugging()
    stop_on_signals(_STOP_SIGNALS, lambda: _EXITING)
    try:
        # Without standalone mode click returns what it would have exited with,
        # e.g. 130 after it caught a KeyboardInterrupt itself.
        from greenadapt import cli

        check_environment()
        tree = cli.command(sys.argv[1:])
        cli.refuse_repeated_options(tree, sys.argv[1:])
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
        _fail_for_error(exc, debug)
    if returned == EXIT_INTERRUPTED:
        _fail_for_signal(signal.SIGINT)
    sys.exit(returned if isinstance(returned, int) else 0)


def _fail_for_error(exc: Exception, debug: bool) -> None:
    """The line and exit code of an error no greenadapt code raised: a stop signal's, click's, the system's, or a bug's."""
    from greenadapt.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_RESOURCE

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
        raise exc
    if is_disk_full(exc):
        _fail("error: disk full (free space or choose another --workdir/--out)", EXIT_RESOURCE)
    if isinstance(exc, OSError) and exc.filename:
        _fail(f"error: {exc.filename}: {exc.strerror or exc}", EXIT_RESOURCE)
    _fail(
        f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]} "
        "(a bug in greenadapt; rerun with GREENADAPT_DEBUG=1 for the traceback and report it)",
        EXIT_INTERNAL,
    )


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
    from greenadapt.comparison import fork_workers_from_a_server
    from greenadapt.errors import EXIT_INTERRUPTED, Terminated

    fork_workers_from_a_server()  # one command a process: compare's workers may share one import of the libraries
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
    """How to continue, and exactly what a rerun keeps: a training run that saves checkpoints is refused on a plain
    rerun until ``--resume``; word2vec keeps its pre-tokenization but not a cut training."""
    from greenadapt.cli import invoked_command

    command = invoked_command(argv)
    if command in ("finetune", "multitask", "pretrain") and "--resume" not in argv:  # CheckpointSettings' commands
        return ("rerun with --resume to continue from its last checkpoint (one every --save-minutes, 10 by default, "
                "and every --save-every steps)")
    if command in ("w2v", "adapt"):
        return ("rerun to continue: finished stages and the corpus's pre-tokenization (cached) are kept; a cut word2vec "
                "training starts again from its first epoch")
    if command == "compare":
        from greenadapt.artifacts.compare_result import how_to_finish

        return how_to_finish(force="--force" in argv)
    if command in ("predict", "qa", "evaluate", "export"):  # they write their output at the end, whole
        return f"rerun to start again: a cut {command} keeps no partial output"
    return "rerun to continue"


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


def _fail(message: str, code: int) -> None:
    from greenadapt.errors import scrubbed

    message = scrubbed(message)  # an internal error's text is a library's, and may quote a URL with its password
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    sys.exit(code)
