"""A stop signal's exception, raised where it cannot break Python's import system.

Python runs a signal handler in the main thread between two bytecodes, wherever
that thread is, and an exception the handler raises starts there. Inside
importlib's own bookkeeping that can break imports for good: in the weakref
callback of ``_get_module_lock``, between taking the global import lock and the
``try`` that releases it, the exception is swallowed ("Exception ignored in
...") and the lock stays held. The stop is lost, and every other thread that
imports waits forever; a main thread that then waits for such a thread never
ends. ``w2v`` imports gensim on a thread beside pre-tokenization and then
needs it: one ``w2v`` sent SIGINT by tests/test_reliability_kills.py (once in
about a thousand kills) was still running five minutes later.

:func:`raise_when_safe` raises at once when no importlib frame is on the main
thread's stack. Otherwise it leaves the exception pending and looks again
every :data:`RETRY_S` (a one-shot ``SIGALRM``: a timer, not a thread or a
lock, so a handler can never wait on a lock the interrupted code holds). The
same holds for ``threading.Condition.__enter__`` (a semaphore's, a queue's, a
future's), between taking its lock and the ``with`` that gives it back. A
main thread that stays inside imports is stopped anyway: after
:data:`INNER_ONLY_S` once the innermost frame is not importlib's (an
exception in a module's own code is one importlib cleans up after), after
:data:`ANYWHERE_S` wherever it is (a wait on another thread's import that
does not end). The first stop signal's exception is the one raised.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

RETRY_S = 0.005
INNER_ONLY_S = 1.0
ANYWHERE_S = 5.0
_IMPORTLIB = "<frozen importlib._bootstrap"  # _bootstrap and _bootstrap_external

# The pending stop while the main thread is inside importlib: the exception's maker, since when, and the
# SIGALRM handler to put back. A plain dict: no lock for a handler to wait on.
_pending: dict[str, Any] = {}


def raise_when_safe(frame: FrameType | None, exception: Callable[[], BaseException | None]) -> None:
    """From a signal handler: raise ``exception()`` now if the main thread is outside importlib, else once it is.

    ``exception`` is called at the moment of raising and may return None when the stop no longer applies
    (the program is already exiting, say). While a stop is pending, a later one changes nothing.
    """
    if _pending:
        return
    if not hasattr(signal, "setitimer") or _is_safe(frame, 0.0):
        _raise(exception)
        return
    _pending.update(exception=exception, since=time.monotonic(), previous=signal.getsignal(signal.SIGALRM))
    signal.signal(signal.SIGALRM, _retry)
    signal.setitimer(signal.ITIMER_REAL, RETRY_S)


def _retry(signum: int, frame: FrameType | None) -> None:
    if not _pending:
        return
    if not _is_safe(frame, time.monotonic() - _pending["since"]):
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)
        return
    exception, previous = _pending["exception"], _pending["previous"]
    _pending.clear()
    signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
    _raise(exception)


def _raise(exception: Callable[[], BaseException | None]) -> None:
    error = exception()
    if error is not None:
        raise error


def _is_safe(frame: FrameType | None, waited: float) -> bool:
    if frame is None or waited >= ANYWHERE_S:
        return True
    if _entering_a_condition(frame):
        return False
    if waited >= INNER_ONLY_S:
        return not _in_importlib(frame)
    while frame is not None:
        if _in_importlib(frame):
            return False
        frame = frame.f_back
    return True


def _in_importlib(frame: FrameType) -> bool:
    return frame.f_code.co_filename.startswith(_IMPORTLIB)


def _entering_a_condition(frame: FrameType) -> bool:
    """Whether the main thread is in ``threading.Condition.__enter__``, where it may hold the lock before the ``with``
    that gives it back has begun: raised there, the lock stays held, and a thread that needs it (a worker's
    ``Semaphore.release`` in ``ThreadPoolExecutor``, a ``Future``'s result) waits forever, as the main thread then
    waits for that thread: ``expand`` sent SIGINT by tests/test_reliability_kills.py hung in its hashing writer."""
    import threading

    here: FrameType | None = frame
    while here is not None:  # (the innermost frame, unless a tracer's runs above it)
        if here.f_code.co_name == "__enter__" and here.f_code.co_filename == threading.__file__:
            return True
        here = here.f_back
    return False


def stop_on_signals(received: list[int], exiting: Callable[[], bool]) -> None:
    """SIGINT raises KeyboardInterrupt and SIGTERM raises :class:`~greenadapt.errors.Terminated`, so stages remove their
    temporaries and locks.

    The default action would kill the process at once: the output stays safe
    (a stage folder is renamed into place whole), but nothing is said and a
    temporary folder is left for the next run. A second SIGTERM during the
    cleanup takes the default action. ``finetune`` replaces this handler
    while it trains (checkpoint, exit 99). Neither raises inside importlib's
    bookkeeping, where the exception would be lost and the import lock kept
    (:func:`raise_when_safe`). Each signal is appended to ``received``; once ``exiting()`` (the program knows
    its exit status and every result is written) a signal is only recorded.
    """
    import threading

    from greenadapt.errors import Terminated

    if threading.current_thread() is not threading.main_thread():
        return

    def terminate() -> BaseException | None:
        if exiting():
            return None
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        return Terminated()

    def interrupt() -> BaseException | None:
        return None if exiting() else KeyboardInterrupt()

    def stopped(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if not exiting():  # checked again when the exception is made: it may wait for importlib
            raise_when_safe(frame, terminate if signum == signal.SIGTERM else interrupt)

    signal.signal(signal.SIGTERM, stopped)
    # Python raises KeyboardInterrupt on SIGINT only if SIGINT was not ignored when it started.
    # A shell without job control starts background jobs (`cmd &`, cron wrappers, CI runners)
    # with SIGINT ignored, and then a `kill -INT` or a Ctrl-C relayed by a wrapper was dropped
    # without a word and the stage ran on to "success". Every SIGINT sent to greenadapt stops it.
    signal.signal(signal.SIGINT, stopped)


def end_process_within(seconds: float, code: object) -> None:
    """End the process with ``code``'s status after ``seconds``, whatever its other threads do (a daemon thread's deadline)."""
    import threading
    import time

    status = 0 if code is None else code if isinstance(code, int) else 1

    def end() -> None:
        time.sleep(seconds)
        try:
            sys.stdout.flush()
            sys.stderr.write(f"greenadapt: a library's thread kept the process from exiting for {seconds:.0f} s; "
                             f"ended it (exit {status})\n")
            sys.stderr.flush()
        finally:
            os._exit(status)

    threading.Thread(target=end, name="greenadapt-exit-deadline", daemon=True).start()
