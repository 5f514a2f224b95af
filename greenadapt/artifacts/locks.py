"""The lock of an output (``.<name>.lock`` beside it): one writer at a time, on this host or any host sharing the
folder; the kernel lets it go when its holder dies. Opened without following a link, emptied only when it is
greenadapt's own."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from greenadapt.errors import LockedError, ResourceError

log = logging.getLogger(__name__)


LOCK_HOLDER = "greenadapt pid"  # what a held lock file says (empty when free): anything else there is not greenadapt's


def take_output_lock(out: Path, kind: str, *, wait: bool, patience: Callable[[Any, str], bool] | None = None) -> Any:
    """The lock of the output ``out`` (``.<name>.lock`` beside it; the kernel lets it go when the holder dies): taken, or
    queued for with ``wait``, else a :class:`LockedError` naming the holder (exit 75). ``patience(handle, holder)`` may
    still take a busy lock (True). Returns the open handle, for :func:`release_output_lock`.

    The lock file is opened without following a link and emptied only when it is greenadapt's: a link, folder, pipe
    or hard-linked file planted at its name, or a file holding something else, is refused (exit 5) and left as it is.
    """
    from greenadapt.artifacts.files import open_own

    lock_path = out.parent / f".{out.name}.lock"
    what = f"the lock of {out.name} ({lock_path.name})"
    try:
        handle = open_own(lock_path, what, read=True)
    except ResourceError:
        raise
    except OSError as exc:
        raise ResourceError(f"cannot open {what}: {exc.strerror or exc}", path=out.parent,
                            hint="check permissions or choose another --workdir/--out") from exc
    held = handle.read(256)
    if held and not held.startswith(LOCK_HOLDER):
        handle.close()
        raise ResourceError(f"{what} holds something greenadapt did not write, so it is left as it is", path=lock_path,
                            hint="move it away (greenadapt writes this name itself), then rerun")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        if wait:
            since = datetime.fromtimestamp(os.fstat(handle.fileno()).st_mtime).astimezone().strftime("%Y-%m-%d %H:%M:%S")
            log.warning("waiting for %s, which has been writing %s (%s) since %s; Ctrl-C stops waiting (nothing is written)",
                        holder, out, kind, since)
            fcntl.flock(handle, fcntl.LOCK_EX)
        elif patience is None or not patience(handle, holder):
            handle.close()
            raise LockedError(f"{holder} is writing this {kind} output right now", path=out,
                              hint="wait for it to finish, or pass --wait to queue behind it") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{LOCK_HOLDER} {os.getpid()} on {socket.gethostname()}")
    handle.flush()
    return handle


def release_output_lock(handle: Any) -> None:
    if handle is not None:
        with contextlib.suppress(OSError):
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


@contextlib.contextmanager
def output_lock(out: Path, kind: str, *, wait: bool) -> Iterator[None]:
    """:func:`take_output_lock` for a block: one writer of ``out`` at a time (compare's folder, for a whole comparison)."""
    handle = take_output_lock(out, kind, wait=wait)
    try:
        yield
    finally:
        release_output_lock(handle)


def lock_within(handle: Any, seconds: float, holder: str, out: Path) -> bool:
    """Take the lock on ``handle`` if its holder lets it go within ``seconds``."""
    log.info("%s holds %s, whose output is up to date: waiting up to %.0f s for it", holder, out, seconds)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            continue
    return False
