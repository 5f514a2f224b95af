"""What Ray says on this process's console, kept off the user's terminal: its C++ parts write the file descriptors
themselves, so the streams are redirected under them, not Python's ``sys.stderr``."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)

RELAY_DRAIN_S = 5.0  # how long the end of a session waits for the last of stderr to be relayed


@contextmanager
def console_to_log(source: str) -> Iterator[None]:
    """What a library prints on this process's stdout and stderr (its C++ parts included, which write the file
    descriptors themselves) and the Python warnings it raises, while the block runs: into greenadapt's log at DEBUG
    (``-v`` shows them), scrubbed of credentials, instead of the user's terminal."""
    import sys
    import tempfile
    import warnings

    from greenadapt.redaction import scrub_secrets

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for descriptor in saved:
                os.close(descriptor)
            sink.seek(0)
            for line in sink.read().decode("utf-8", errors="replace").splitlines():
                if line.strip():
                    log.debug("%s: %s", source, scrub_secrets(line))
            for warning in caught:
                log.debug("%s: %s: %s", source, warning.category.__name__, scrub_secrets(str(warning.message)))


# Ray's C++ core writes its lines (glog's form: "[2026-11-28 16:24:52,091 E 11296 11313] task_manager.cc:...") to fd 2
# itself, whenever it likes: when the cluster's head dies mid-run, a few at once and a fatal one a minute later.
_RAY_LINE = re.compile(rb"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [DIWEF] \d+ \d+\] ")


@contextmanager
def ray_lines_to_log() -> Iterator[None]:
    """While the block runs, the lines Ray's C++ core writes on stderr go to greenadapt's log at DEBUG (``-v`` shows
    them), scrubbed; everything else written there (greenadapt's own log lines, its progress) passes through as it came.
    Through a pseudo-terminal when stderr is a terminal, so that it stays one to what asks (the progress bars)."""
    import sys
    import threading

    sys.stderr.flush()
    reader, writer = _terminal_like_stderr() if os.isatty(2) else os.pipe()
    saved = os.dup(2)
    os.dup2(writer, 2)
    os.close(writer)
    relay = threading.Thread(target=_relay_stderr, args=(reader, saved), name="greenadapt-ray-stderr", daemon=True)
    relay.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # its last writer gone, the relay reads what is left and stops (end of file; EIO for a pty)
        relay.join(timeout=RELAY_DRAIN_S)
        if not relay.is_alive():  # else a child process still holds it: the daemon thread goes with the process
            os.close(reader)
        os.close(saved)


def _terminal_like_stderr() -> tuple[int, int]:
    """A pseudo-terminal of stderr's size, raw (the bytes reach the terminal as written); a pipe where none can be had."""
    import fcntl
    import termios
    import tty

    try:
        reader, writer = os.openpty()
    except OSError:  # no pseudo-terminals here: the bars see a pipe, the lines are relayed all the same
        return os.pipe()
    tty.setraw(writer)
    try:
        fcntl.ioctl(writer, termios.TIOCSWINSZ, fcntl.ioctl(2, termios.TIOCGWINSZ, b"\0" * 8))
    except OSError:
        pass
    return reader, writer


def _relay_stderr(reader: int, terminal: int) -> None:
    """Ray's lines to the log, the rest to ``terminal`` at once (a line being drawn, a bar's "\\r", is not held back)."""
    from greenadapt.redaction import scrub_secrets

    held = b""
    while True:
        try:
            chunk = os.read(reader, 65536)
        except OSError:  # the pseudo-terminal closed
            break
        if not chunk:
            break
        held += chunk
        while held:
            end = held.find(b"\n")
            if not held.startswith(b"["):  # not Ray's: up to the line's end, or all of it now
                cut = end + 1 if end >= 0 else len(held)
                _write_all(terminal, held[:cut])
                held = held[cut:]
            elif end >= 0:
                line, held = held[:end + 1], held[end + 1:]
                if _RAY_LINE.match(line):
                    log.debug("ray: %s", scrub_secrets(line.decode("utf-8", errors="replace").rstrip()))
                else:
                    _write_all(terminal, line)
            else:
                break  # a line that may be Ray's, not yet whole
    if held:
        _write_all(terminal, held)


def _write_all(descriptor: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(descriptor, data):]
    except OSError:  # the terminal went away: nothing to show it on
        pass
