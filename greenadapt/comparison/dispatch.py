"""Where compare's fine-tunings train when not one after another in its own process: worker processes on this machine
(``--parallel N``, spread over its GPUs) or tasks on a Ray cluster (``--ray ADDRESS``). Either way each run's log lies
beside its folder, the first run that learned nothing stops the queued ones, and failures are reported together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from greenadapt.comparison.ensembles import Run
from greenadapt.comparison.pace import RunsLeft, wall_seconds
from greenadapt.errors import StageError

if TYPE_CHECKING:
    from greenadapt.comparison.cluster import RunResources
    from greenadapt.comparison.recipe import Comparison
    from greenadapt.comparison.workers import Job, Outcome

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cluster:
    """A Ray cluster compare is connected to, and what each of its runs asks for there."""

    ray: Any
    resources: RunResources
    storage: str


@contextmanager
def cluster_for(options: Comparison) -> Iterator[Cluster | None]:
    """Connected to ``--ray``'s cluster for the block, its storage checked (None without ``--ray``): before any adaptation
    or fine-tuning, so a cluster that cannot take the runs costs a line, not an hour."""
    if options.ray is None:
        yield None
        return
    from greenadapt.comparison.ray_runs import check_shared_storage, ray_cluster, resources_on

    with ray_cluster(options.ray.address) as ray:
        resources = resources_on(ray, options.ray, options.device)
        if options.ray.storage == "shared":
            check_shared_storage(ray, options.out)
        yield Cluster(ray, resources, options.ray.storage)


def runs_elsewhere(options: Comparison, todo: Sequence[Run], cluster: Cluster | None) -> bool:
    """Whether the runs still to train go to workers or a cluster (else compare trains them itself, one by one)."""
    return bool(todo) and (cluster is not None or (options.parallel > 1 and len(todo) > 1))


def runs_at_once(options: Comparison, todo: Sequence[Run], cluster: Cluster | None) -> int:
    """How many of ``todo`` train at the same time elsewhere: the workers (``--parallel``), or the slots the cluster's
    nodes have for each run's share (``--run-cpus``, ``--run-gpus``)."""
    slots = cluster.resources.slots if cluster is not None else options.parallel
    return max(1, min(slots, len(todo)))


def worker_devices(options: Comparison) -> list[str]:
    """The GPUs compare's workers are spread over: ``--devices``, else the one ``--device cuda:N`` names, else every
    visible GPU (``--device auto`` or ``cuda``); none on a machine without one, or with ``--device cpu``."""
    if options.devices:
        return list(options.devices)
    kind, _, index = options.device.partition(":")
    if kind == "cuda" and index:
        return [index]
    if kind not in ("auto", "cuda"):
        return []
    from greenadapt.machine.devices import cuda_device_count

    return [str(i) for i in range(cuda_device_count())]


def finetune_elsewhere(options: Comparison, todo: Sequence[Run], finetune: Callable[..., Any], cluster: Cluster | None) -> None:
    """Every run of ``todo`` on worker processes (each with its share of the cores, training run after run, so the
    libraries' start-up is paid once per worker) or as tasks on ``cluster``."""
    from greenadapt.comparison.health import keeps_going, learned_nothing, stopped_error
    from greenadapt.comparison.recipe import finetune_arguments
    from greenadapt.comparison.workers import Job

    devices = worker_devices(options) if cluster is None else []
    if devices:
        log.info("%d worker(s) over GPU(s) %s", min(options.parallel, len(todo)), ", ".join(devices))
    jobs = []
    for run in todo:
        out = run.folder(options.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        member = f" member {run.member + 1}" if run.member else ""
        arguments = finetune_arguments(options, run.spec, run.train_seed, out, name=run.name)
        if devices and options.device.startswith("cuda:"):
            arguments["device"] = "cuda"  # each worker sees its own GPU as the only one: cuda:N is its cuda:0
        jobs.append(Job(f"{run.name} seed {run.seed}{member}", arguments, out.parent / f"{out.name}.log"))
    clock = RunsLeft(len(jobs), runs_at_once(options, todo, cluster))
    by_label = {job.label: run for job, run in zip(jobs, todo, strict=True)}
    stopped: list[str] = []

    def done(outcome: Outcome) -> bool:
        clock.finished(wall_seconds(by_label[outcome.job.label].folder(options.out)) if outcome.exit_code == 0 else None)
        log.info("%s %s (%d/%d%s)", "finished" if outcome.exit_code == 0 else "failed:", outcome.job.label, clock.done,
                 len(jobs), clock.left())
        run = by_label[outcome.job.label]
        why = learned_nothing(options, run) if outcome.exit_code == 0 and not keeps_going(options) and not stopped else None
        if why is not None:
            stopped.append(f"{run.name} seed {run.seed} {why}")
        return why is not None  # the queued runs are not started

    outcomes = _run(options, finetune, jobs, devices, cluster, done)
    if stopped and len(outcomes) < len(jobs):
        raise stopped_error(stopped[0], len(jobs) - len(outcomes), options.out, options.max_steps)
    failed = [f"{o.job.label} (exit {o.exit_code}, {o.job.log_file}: {o.message})" for o in outcomes if o.exit_code != 0]
    if len(outcomes) < len(jobs) and not failed:
        failed.append(f"{len(jobs) - len(outcomes)} not started")
    if failed:
        raise StageError(f"{len(failed)} fine-tuning(s) failed: " + "; ".join(failed), path=options.out,
                         hint="read the logs named; rerun the same command to retry them (finished runs are kept)")


def _run(options: Comparison, finetune: Callable[..., Any], jobs: Sequence[Job], devices: Sequence[str], cluster: Cluster | None,
         done: Callable[[Outcome], bool]) -> list[Outcome]:
    if cluster is not None:
        from greenadapt.comparison.ray_runs import run_jobs_on_ray

        return run_jobs_on_ray(cluster.ray, finetune, jobs, cluster.resources, storage=cluster.storage, on_done=done)
    from greenadapt.comparison.workers import run_jobs
    from greenadapt.machine.cores import available_cores

    threads = max(1, available_cores() // options.parallel)
    return run_jobs(finetune, jobs, options.parallel, threads, done, devices=devices)
