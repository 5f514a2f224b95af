"""How torch's CPU threads wait, chosen by what else the machine is running (issue 94, item 3).

torch's OpenMP threads spin between parallel regions by default (``OMP_WAIT_POLICY=active``), which is the fastest on an
idle machine. On one where other work runs at full priority, the spinning takes the cores from that work and from the
other threads: a bf16 MiniLM training step with two threads beside two busy processes on the 2-core EPYC took 0.71
CPU-seconds and 0.72 s, against 0.27 and 0.32 with passive waiting (and 0.25 and 0.38 with one thread); idle, passive
waiting costs 12% of the speed (0.198 against 0.177 s a step) for 17% less CPU (docs/benchmarks.md, "torch's CPU
threads"). So a command that runs a model looks at the machine for a tenth of a second before torch starts: when
other work at full priority keeps at least a quarter of the machine busy, its threads wait passively. Niced work
(a background study, ``nice -n 19``) yields its cores and does not count; an ``OMP_WAIT_POLICY`` set by the user is
kept; once torch is imported (a caller's own Python) nothing can change, and nothing is tried.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, MutableMapping
from functools import cache
from pathlib import Path

log = logging.getLogger(__name__)

PROC_STAT = Path("/proc/stat")
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
BUSY_SHARE = 0.25  # other full-priority work's share of the machine's CPU time above which threads wait passively
SAMPLE_S = 0.1


def cpu_times(stat: Path = PROC_STAT) -> tuple[int, int] | None:
    """(full-priority busy, total) CPU ticks of the whole machine so far, from /proc/stat's ``cpu`` line: busy is user,
    system, irq and softirq (not nice, idle, iowait or steal); None where it cannot be read."""
    try:
        with open(stat, encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if len(fields) < 8 or fields[0] != "cpu":
        return None
    user, nice, system, idle, iowait, irq, softirq = (int(value) for value in fields[1:8])
    steal = int(fields[8]) if len(fields) > 8 else 0
    return user + system + irq + softirq, user + nice + system + idle + iowait + irq + softirq + steal


def busy_share(sample_s: float = SAMPLE_S, read: Callable[[], tuple[int, int] | None] = cpu_times,
               sleep: Callable[[float], None] = time.sleep) -> float | None:
    """The share of the machine's CPU time spent at full priority over ``sample_s`` seconds (this process sleeps
    meanwhile); None where /proc/stat cannot be read."""
    first = read()
    sleep(sample_s)
    second = read()
    if first is None or second is None or second[1] <= first[1]:
        return None
    return (second[0] - first[0]) / (second[1] - first[1])


@cache
def busy_share_once() -> float | None:
    """:func:`busy_share`, sampled once a process: a command's settings and its process set-up both ask."""
    return busy_share()


def choose_wait_policy(environ: MutableMapping[str, str] | None = None, modules: Mapping[str, object] | None = None,
                       share: Callable[[], float | None] = busy_share_once) -> str | None:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` in ``environ`` (the process's) before torch is imported, when the machine is busy
    with other full-priority work; returns what was set (None: nothing). See the module docstring."""
    environ = os.environ if environ is None else environ
    loaded: Mapping[str, object] = sys.modules if modules is None else modules
    if WAIT_POLICY_ENV in environ or "torch" in loaded:
        return None
    measured = share()
    if measured is None or measured < BUSY_SHARE:
        return None
    environ[WAIT_POLICY_ENV] = "PASSIVE"
    # debug, not info: a command that then refuses its options says one line, whatever the machine is doing
    log.debug("other work keeps %.0f%% of the CPU busy: torch's threads wait passively (OMP_WAIT_POLICY=PASSIVE)", 100 * measured)
    return "PASSIVE"
