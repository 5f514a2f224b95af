"""How many CPU cores this process may use: the default worker count of every stage.

``os.cpu_count()`` is the machine's count, which oversubscribes a job that a
scheduler or container gave fewer: a batch system pins it to some cores (CPU
affinity, ``taskset``, Slurm's ``--cpus-per-task``), a container runtime caps
its CPU time (``docker --cpus 4``, a Kubernetes CPU limit: a cgroup quota).
Twice as many busy threads as the quota allows run no faster and stall each
other, so the default is the smallest of:

* the cores in the process's affinity mask (``os.sched_getaffinity``);
* the cgroup CPU quota, rounded up to whole cores: cgroup v2 ``cpu.max``
  (``"400000 100000"`` = 4 cores; ``"max ..."`` = none) of the process's own
  cgroup and each parent up to the root, and cgroup v1
  ``cpu.cfs_quota_us / cpu.cfs_period_us`` (``-1`` = none);
* ``$GREENADAPT_WORKERS`` when set, as an explicit choice for every stage.

An explicit ``--workers`` always wins over all of these.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path

from greenadapt.switches import WORKERS_ENV, env_number

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def affinity_cores() -> int:
    """Cores in this process's affinity mask (the machine's count where the OS has no masks)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cgroup_quota(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The tightest CPU quota of this process's cgroups, in cores; None when there is none or it cannot be read."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2: one unified tree
            limits += _v2_limits(cgroup_root, path)
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's tree
            for mount in (cgroup_root / "cpu", cgroup_root / "cpu,cpuacct", cgroup_root / controllers):
                if mount.is_dir():
                    limits += _v1_limits(mount, path)
                    break
    return min(limits) if limits else None


def _ancestors(root: Path, path: str) -> list[Path]:
    """The cgroup folder of ``path`` and each parent up to ``root`` (a container sees its own cgroup as ``/``)."""
    parts = [p for p in path.strip("/").split("/") if p]
    return [root.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _v2_limits(root: Path, path: str) -> list[float]:
    limits = []
    for folder in _ancestors(root, path):
        try:
            quota, _, period = (folder / "cpu.max").read_text().strip().partition(" ")
        except OSError:
            continue
        if quota != "max":
            try:
                limits.append(int(quota) / int(period or "100000"))
            except (ValueError, ZeroDivisionError):
                log.debug("unreadable %s: %r", folder / "cpu.max", quota)
    return limits


def _v1_limits(mount: Path, path: str) -> list[float]:
    limits = []
    for folder in _ancestors(mount, path):
        try:
            quota = int((folder / "cpu.cfs_quota_us").read_text())
            period = int((folder / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        if quota > 0 and period > 0:
            limits.append(quota / period)
    return limits


def available_cores(*, environ: Mapping[str, str] | None = None, cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """The default worker count: ``$GREENADAPT_WORKERS``, else min(affinity mask, cgroup quota rounded up), at least 1."""
    workers = env_number(WORKERS_ENV, environ=environ)
    return int(workers) if workers is not None else usable_cores(cgroup_root=cgroup_root, proc_cgroup=proc_cgroup)


def usable_cores(*, cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """min(affinity mask, cgroup quota rounded up), at least 1: what the machine lets this process use."""
    cores = affinity_cores()
    quota = cgroup_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota - 1e-9)))
    return max(1, cores)
