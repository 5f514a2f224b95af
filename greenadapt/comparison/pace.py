"""How long a comparison takes: the plan line before it starts, and the time left as its runs finish."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from greenadapt.comparison.ensembles import Run


def plan_line(options: Any, runs: Sequence[Run], done: Sequence[Run]) -> str:
    """``9 fine-tunings (3 finished), about 2.7 h on this machine`` (the estimate from the finished runs' wall time)."""
    left = len(runs) - len(done)
    walls = [wall_seconds(run.folder(options.out)) for run in done]
    known = [w for w in walls if w]
    head = f"{len(runs)} fine-tunings ({len(done)} finished)"
    if not left:
        return head + ": nothing to train"
    if not known:
        return head + f", {left} to run ({options.parallel} at a time): time known after the first"
    hours = sum(known) / len(known) * left / options.parallel / 3600
    return head + f", {left} to run: about {hours:.1f} h on this machine ({options.parallel} at a time)"


class RunsLeft:
    """``, about 12m30s left``: the fine-tunings still to run at the pace of those this invocation finished
    (runs at once included: the pace is finished runs over wall time)."""

    def __init__(self, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.clock, self.started, self.done = total, clock, clock(), 0

    def finished(self) -> None:
        self.done += 1

    def left(self) -> str:
        from greenadapt.progress import format_duration

        if not self.done or self.done >= self.total:
            return ""
        return f", about {format_duration((self.clock() - self.started) / self.done * (self.total - self.done))} left"


def wall_seconds(folder: Path) -> float | None:
    from greenadapt.artifacts.manifest import read_manifest

    manifest = read_manifest(folder)
    cost = (manifest or {}).get("cost") or {}
    return float(cost["wall_seconds"]) if cost.get("wall_seconds") else None
