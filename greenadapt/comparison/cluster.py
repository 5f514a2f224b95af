"""compare on a Ray cluster: the options and their checks (Ray itself is imported only by :mod:`.ray_runs`).

Each fine-tuning is one Ray task with the resources it asks for (``--run-gpus``, ``--run-cpus``); the compare folder
stays the one source of truth. Either every node sees ``--out`` (``--ray-storage shared``, the default: checked up front
on every node) or none needs to (``--ray-storage local``: the driver ships each task its input files and model folders,
and each task returns its run folder and log, which the driver writes under ``--out``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from greenadapt.errors import UsageError

STORAGES = ("shared", "local")
EXTRA = "greenadapt[cluster]"
# A task whose worker died (SIGKILL, out of memory, a lost node) is tried once more: on shared storage it resumes
# from the run's last checkpoint. A second death is reported like any failed run, and a rerun of compare retries it.
TASK_RETRIES = 1
DEFAULT_CPU_RUN_CPUS = 4  # a CPU fine-tuning's threads when --run-cpus is not given (at most the largest node's CPUs)


@dataclass(frozen=True)
class RayPlacement:
    """Where compare's fine-tunings run on a Ray cluster, and what each asks for."""

    address: str  # a Ray address (host:port, ray://host:port) or "auto": the cluster this node belongs to
    storage: str = "shared"
    run_cpus: int | None = None  # None: 1 beside a GPU, else DEFAULT_CPU_RUN_CPUS capped at the largest node
    run_gpus: float | None = None  # None: 1 when the cluster has GPUs and --device allows them, else 0

    def check(self, *, parallel: int, devices: tuple[str, ...]) -> None:
        """Every Ray option, before the cluster is reached; and Ray itself installed."""
        if not self.address.strip():
            raise UsageError("--ray needs an address", hint="e.g. --ray auto (the cluster of this node) or --ray 10.0.0.5:6379")
        if self.storage not in STORAGES:
            raise UsageError(f"--ray-storage {self.storage!r} is not one of {', '.join(STORAGES)}",
                             hint="shared: every node sees --out; local: runs are sent back to this machine")
        if parallel != 1:
            raise UsageError("--parallel is for one machine; on a Ray cluster the runs' resources decide how many train at once",
                             hint="leave --parallel out; --run-cpus/--run-gpus set each run's share of a node")
        if devices:
            raise UsageError("--devices is for one machine; on a Ray cluster Ray gives each run its GPU",
                             hint="leave --devices out; --run-gpus 0.5 puts two runs on a GPU")
        if self.run_cpus is not None and self.run_cpus < 1:
            raise UsageError(f"--run-cpus {self.run_cpus}: a run needs at least one CPU")
        if self.run_gpus is not None and (self.run_gpus < 0 or (self.run_gpus > 1 and not float(self.run_gpus).is_integer())):
            raise UsageError(f"--run-gpus {self.run_gpus:g}: 0, a fraction of one GPU (e.g. 0.5) or a whole number of GPUs")
        check_ray_installed()


def check_ray_installed() -> None:
    if importlib.util.find_spec("ray") is None:
        raise UsageError("--ray needs Ray, which is not installed", hint=f"pip install '{EXTRA}' (on every node of the cluster)")


@dataclass(frozen=True)
class RunResources:
    """What one fine-tuning task asks the cluster for, and the device finetune is told to use there."""

    cpus: int
    gpus: float
    device: str
    slots: int = 1  # runs the cluster can train at once with these shares (its nodes' CPUs and GPUs)


def cluster_slots(resources: RunResources, nodes: list[dict[str, float]]) -> int:
    """How many runs of ``resources`` fit on the alive ``nodes`` at once (each node's CPUs, and GPUs where asked)."""
    slots = 0
    for node in nodes:
        fit = int(float(node.get("CPU", 0)) // resources.cpus)
        if resources.gpus > 0:
            fit = min(fit, int(float(node.get("GPU", 0)) // resources.gpus))
        slots += fit
    return max(1, slots)


def run_resources(placement: RayPlacement, device: str, cluster_gpus: float, largest_node_cpus: float) -> RunResources:
    """Each task's share of a node: chosen from the options and what the cluster has; one line if it cannot fit."""
    kind = device.partition(":")[0]
    gpus = placement.run_gpus if placement.run_gpus is not None else (1.0 if cluster_gpus > 0 and kind in ("auto", "cuda") else 0.0)
    if gpus > 0 and kind not in ("auto", "cuda"):
        raise UsageError(f"--run-gpus {gpus:g} with --device {device}", hint="leave --device out (auto) or set --device cuda")
    if gpus > 0 and cluster_gpus < gpus:
        raise UsageError(f"--run-gpus {gpus:g}: the Ray cluster has {cluster_gpus:g} GPU(s)",
                         hint="add GPU nodes, or --run-gpus 0 to fine-tune on the nodes' CPUs")
    cpus = placement.run_cpus if placement.run_cpus is not None else (1 if gpus > 0
                                                                      else max(1, min(DEFAULT_CPU_RUN_CPUS, int(largest_node_cpus))))
    if cpus > largest_node_cpus:
        raise UsageError(f"--run-cpus {cpus}: no node of the Ray cluster has that many CPUs (the largest has {largest_node_cpus:g})",
                         hint=f"--run-cpus {max(1, int(largest_node_cpus))} or fewer")
    if kind == "cuda" and gpus == 0:
        raise UsageError(f"--device {device} with --run-gpus 0", hint="--run-gpus 1 (or a fraction) gives each run a GPU")
    return RunResources(cpus=cpus, gpus=gpus, device="cuda" if gpus > 0 else "cpu")
