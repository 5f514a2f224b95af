"""How long a comparison takes: the plan line before it starts, and the time left as its runs finish."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from greenadapt.comparison.ensembles import Run


def plan_line(options: Any, runs: Sequence[Run], done: Sequence[Run], at_once: int) -> str:
    """``9 fine-tunings (3 finished), 6 to run: about 2.7 h here (2 at a time)`` (from the finished runs' wall time);
    ``at_once``: the runs that really train at the same time (1 in compare's own process, the workers, the cluster's slots)."""
    left = len(runs) - len(done)
    walls = [wall_seconds(run.folder(options.out)) for run in done]
    known = [w for w in walls if w]
    head = f"{len(runs)} fine-tunings ({len(done)} finished)"
    where = "on the Ray cluster" if getattr(options, "ray", None) is not None else "here"
    if not left:
        return head + ": nothing to train"
    if not known:
        return head + f", {left} to run {where} ({at_once} at a time): time known after the first"
    hours = sum(known) / len(known) * left / max(1, at_once) / 3600
    return head + f", {left} to run: about {hours:.1f} h {where} ({at_once} at a time)"


class RunsLeft:
    """``, about 12m30s left``: the fine-tunings still to run, at the mean wall time of those finished so far, ``at_once``
    at a time. Each run's own duration is what counts: the first runs of N at once finish together, and their
    elapsed time over one finished run would count every one of the rest as if it ran alone."""

    def __init__(self, total: int, at_once: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.at_once, self.clock, self.started, self.done = total, max(1, at_once), clock, clock(), 0
        self.walls: list[float] = []

    def finished(self, wall: float | None = None) -> None:
        """One more run finished, that took ``wall`` seconds (None: unknown, the pace so far is used)."""
        self.done += 1
        if wall:
            self.walls.append(wall)

    def left(self) -> str:
        from greenadapt.progress import format_duration

        if not self.done or self.done >= self.total:
            return ""
        each = sum(self.walls) / len(self.walls) if self.walls else (self.clock() - self.started) / self.done * self.at_once
        return f", about {format_duration(each * (self.total - self.done) / min(self.at_once, self.total - self.done))} left"


def wall_seconds(folder: Path) -> float | None:
    from greenadapt.artifacts.manifest import read_manifest

    manifest = read_manifest(folder)
    cost = (manifest or {}).get("cost") or {}
    return float(cost["wall_seconds"]) if cost.get("wall_seconds") else None
