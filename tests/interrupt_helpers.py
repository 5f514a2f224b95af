"""A run cut at a given training step, as ``kill -9`` would cut it: no handler runs, only what is on disk survives."""

from __future__ import annotations


class Crash(Exception):
    """Stands in for SIGKILL."""


class CrashAt:
    """A Progress that raises :class:`Crash` when training reports step ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def start(self, description: str, total: float | None = None, unit: str = "") -> None:
        pass

    def update(self, completed: float, **info: float | str) -> None:
        if completed == self.step and info:
            raise Crash

    def finish(self) -> None:
        pass


def hang_in_exit_then_wait(marker: str, progress: object = None) -> None:
    """A stand-in for compare's fine-tuning whose worker then hangs in its own exit: a thread that nobody ends, as a
    library's thread pool can be left when Ctrl-C lands while it starts; ``marker`` is made once the run is going."""
    import threading
    import time
    from pathlib import Path

    threading.Thread(target=threading.Event().wait, name="never-ends").start()
    Path(marker).touch()
    time.sleep(600)


def record_where_it_runs_then_wait(marker: str, progress: object = None) -> None:
    """A stand-in for compare's fine-tuning that writes its process id and its parent's command line to ``marker``
    (atomically), then waits as a long run would."""
    import json
    import os
    import time
    from pathlib import Path

    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    Path(marker + ".tmp").write_text(json.dumps({"pid": os.getpid(), "parent": parent}))
    os.replace(marker + ".tmp", marker)
    time.sleep(600)
