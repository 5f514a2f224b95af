"""compare's fine-tunings as Ray tasks (``compare --ray ADDRESS``): one task per run, the compare folder the one record.

The driver (the compare process) connects to the cluster, checks up front that every node can write ``--out`` (shared
storage) or packs the inputs once into Ray's object store (local storage), submits every run with its resources, and
hands each finished run to compare as :class:`~greenadapt.comparison.workers.Outcome`, as the local workers do: a failed
run is reported with its log and the others go on; Ctrl-C cancels the outstanding tasks (each stage is written atomically,
so nothing half-written is left) and is raised again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from greenadapt.comparison.cluster import TASK_RETRIES, RayPlacement, RunResources, cluster_slots, run_resources
from greenadapt.comparison.ray_console import console_to_log, ray_lines_to_log
from greenadapt.comparison.workers import STOPPED_EXIT_CODES, Job, Outcome, train_one
from greenadapt.errors import ResourceError, StageError, UsageError

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 60.0  # how long the storage check waits for every node
CANCEL_GRACE_S = 30.0  # how long Ctrl-C waits for the cancelled tasks to end before leaving
HEAD_LOOK_S = 1.0  # how often the driver looks whether the cluster's head still answers
HEAD_LOST_S = 10.0  # how long it may not answer before compare gives up (Ray's own client gives up after 60 s)
POLL_S = 0.5  # how often the driver looks up from waiting (so Ctrl-C is taken at once)
_INPUT_KEYS = ("train", "dev", "test", "model")


@contextmanager
def ray_cluster(address: str) -> Iterator[Any]:
    """Connected to the Ray cluster at ``address`` for the block; one line when it cannot be reached."""
    problem = _unreachable(address)
    if problem:
        raise UsageError(f"cannot reach the Ray cluster at {address}: {problem}", hint=_START_HINT)
    with console_to_log("ray"):  # Ray's C++ client and its Python warnings speak while it connects: the log's, not the user's
        import ray

        try:
            ray.init(address=address, namespace="greenadapt", log_to_driver=False, logging_level=logging.WARNING,
                     configure_logging=False, runtime_env={"env_vars": forwarded_environment()})
        except Exception as error:  # ConnectionError, a version mismatch, an address that is not Ray's: one line each
            first = str(error).splitlines()[0] if str(error) else ""
            raise UsageError(f"cannot reach the Ray cluster at {address}: {type(error).__name__}: {first}", hint=_START_HINT) from None
    with ray_lines_to_log():  # its C++ core goes on speaking on fd 2 for the whole session (a head lost mid-run)
        try:
            yield ray
        finally:
            ray.shutdown()


# A run on a node must be the run compare would train here: greenadapt's own variables (the CPU precision, tracker
# timeouts, ...) and the Hub's offline switches go with every task. Ray's workers inherit the environment of the node's
# `ray start`, not the driver's.
FORWARDED_PREFIXES = ("GREENADAPT_",)
FORWARDED_NAMES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


def forwarded_environment() -> dict[str, str]:
    """The driver's variables every task runs with."""
    return {name: value for name, value in os.environ.items() if name.startswith(FORWARDED_PREFIXES) or name in FORWARDED_NAMES}


_START_HINT = ("start it with `ray start --head` (or inside your Slurm job, docs/cluster.md) and pass its address; "
               "`--ray auto` finds the cluster of this node")
CONNECT_TIMEOUT_S = 10.0


def _unreachable(address: str) -> str:
    """Why nothing answers at a ``host:port`` address, else "" (Ray itself retries an unanswered address for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return ""  # auto, or a Ray client address: Ray's own answer is quick
    try:
        with _connect(address, CONNECT_TIMEOUT_S) as connection:
            return "" if os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true") else _not_grpc(connection)
    except OSError as error:
        return f"{type(error).__name__}: {error.strerror or error}"


def _connect(address: str, timeout: float) -> socket.socket:
    """A TCP connection to a ``host:port`` address (an IPv6 host in brackets or not)."""
    host, _, port = address.rpartition(":")
    return socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)


# HTTP/2's client preface and an empty SETTINGS frame: a Ray GCS (gRPC, plain HTTP/2) answers with its SETTINGS frame.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS_FRAME = 4


def _not_grpc(connection: Any) -> str:
    """Why what answers on ``connection`` is not a Ray cluster's GCS, else "": Ray retries such an address for minutes,
    printing its C++ client's warnings, where a few bytes of HTTP/2 tell at once."""
    try:
        connection.sendall(_H2_PREFACE)
        head = b""
        while len(head) < 9:
            chunk = connection.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
    except OSError as error:
        return f"it does not answer as a Ray cluster ({type(error).__name__}: {error.strerror or error})"
    if len(head) == 9 and head[3] == _SETTINGS_FRAME:
        return ""
    shown = head.decode("ascii", errors="replace").split("\r")[0][:40]
    return "something answers there, but not Ray's GCS" + (f" (it said {shown!r})" if shown.strip() else "")


def resources_on(ray: Any, placement: RayPlacement, device: str) -> RunResources:
    nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    cpus = [float(node.get("CPU", 0)) for node in nodes]
    cluster_gpus = sum(float(node.get("GPU", 0)) for node in nodes)
    resources = run_resources(placement, device, cluster_gpus, max(cpus, default=0.0))
    resources = replace(resources, slots=cluster_slots(resources, nodes))
    log.info("Ray cluster: %d node(s), %g CPU(s), %g GPU(s); each run asks for %d CPU(s)%s: %d at once", len(nodes),
             sum(cpus), cluster_gpus,
             resources.cpus, f" and {resources.gpus:g} GPU" if resources.gpus else "", resources.slots)
    return resources


# -- shared storage: every node must write --out ------------------------------------------------------------------

def _probe_storage(marker: str, token: str, answer: str) -> str:
    """On one node: "" when it reads the driver's marker and writes its answer beside it, else what went wrong."""
    try:
        if Path(marker).read_text(encoding="utf-8") != token:
            return f"{marker} holds something else than this compare wrote (another machine's folder of the same name?)"
        _write_new(Path(answer), token)
        Path(answer).unlink()
        return ""
    except OSError as error:
        return f"{type(error).__name__}: {error.strerror or error}"


def _write_new(path: Path, text: str) -> None:
    """A probe file of a fresh random name: created here or not at all (never through something already there)."""
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "w", encoding="utf-8") as handle:
        handle.write(text)


def check_shared_storage(ray: Any, out: Path) -> None:
    """Every alive node reads a file the driver wrote under ``out`` and writes one there: else one line naming the node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    out.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    marker = out / f".ray-probe-{token[:12]}.tmp"
    _write_new(marker, token)
    try:
        probe = ray.remote(_probe_storage)
        asked = {}
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            answer = str(out / f".ray-probe-{token[:12]}-{node['NodeID'][:8]}.tmp")
            ref = probe.options(num_cpus=0, scheduling_strategy=strategy, max_retries=0).remote(str(marker), token, answer)
            asked[ref] = node.get("NodeManagerAddress", node["NodeID"][:8])
        ready, late = ray.wait(list(asked), num_returns=len(asked), timeout=PROBE_TIMEOUT_S)
        if late:
            raise StageError(f"Ray node {asked[late[0]]} did not answer the storage check in {PROBE_TIMEOUT_S:.0f} s", path=out,
                             hint="check the node is up (ray status); or --ray-storage local")
        for ref in ready:
            problem = ray.get(ref)
            if problem:
                raise StageError(f"Ray node {asked[ref]} cannot write the compare folder: {problem}", path=out,
                                 hint="put --out on storage every node mounts at the same path, or pass --ray-storage local "
                                      "(runs are sent back to this machine)")
        log.info("every node of the Ray cluster writes %s", out)
    finally:
        marker.unlink(missing_ok=True)


# -- local storage: inputs shipped, run folders sent back ---------------------------------------------------------

@dataclass(frozen=True)
class ShippedPath:
    """A file or folder of the driver's, in Ray's object store: its driver path, a digest of its content and its files."""

    driver_path: str
    digest: str
    is_folder: bool
    files: Any  # an ObjectRef of [(relative path, bytes, mtime_ns, mode)]


def _read_tree(path: Path) -> list[tuple[str, bytes, int, int]]:
    """A file (".") or a folder's files as (relative path, bytes, mtime_ns, mode): what goes through the object store."""
    entries = [(path, ".")] if path.is_file() else [(p, p.relative_to(path).as_posix()) for p in sorted(path.rglob("*")) if p.is_file()]
    return [(rel, p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode & 0o777) for p, rel in entries]


def _write_tree(files: Sequence[tuple[str, bytes, int, int]], root: Path) -> None:
    """What :func:`_read_tree` read, written under ``root`` (a file read as "." becomes ``root`` itself) with the same
    sizes, times and modes: a manifest's identities of them hold on the other side."""
    for rel, data, mtime, mode in files:
        target = root if rel == "." else root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        os.chmod(target, mode)
        os.utime(target, ns=(mtime, mtime))


def ship_inputs(ray: Any, jobs: Sequence[Job]) -> dict[str, ShippedPath]:
    """Each local input of ``jobs`` (task files, model folders) put once into the object store, by its driver path."""
    shipped: dict[str, ShippedPath] = {}
    for job in jobs:
        for key in _INPUT_KEYS:
            value = job.arguments.get(key)
            if not value or str(value) in shipped or not Path(str(value)).exists():
                continue  # a Hub id or the bundled model: each node resolves it itself
            path = Path(str(value))
            files = _read_tree(path)
            digest = hashlib.sha256()
            for rel, data, mtime, mode in files:
                digest.update(f"{rel}\0{len(data)}\0{mtime}\0{mode}\0".encode())
                digest.update(hashlib.sha256(data).digest())
            shipped[str(value)] = ShippedPath(str(value), digest.hexdigest()[:24], path.is_dir(), ray.put(files))
            log.info("sending %s to the cluster's object store (%.1f MB)", value, sum(len(f[1]) for f in files) / 1e6)
    return shipped


def _node_root() -> Path:
    return Path(tempfile.gettempdir()) / f"greenadapt-ray-{os.getuid()}"


def _materialize(ray: Any, item: ShippedPath) -> str:
    """On a node: the shipped file or folder under a path of its own, written once per node (same size and times)."""
    from greenadapt.artifacts.stage import beside

    name = Path(item.driver_path).name or "input"
    place = _node_root() / "inputs" / item.digest / name
    if not place.exists():
        staging = beside(place.parent, "tmp")
        _write_tree(ray.get(item.files), staging / name)
        try:
            os.rename(staging, place.parent)
        except OSError:  # another task on this node was first: its copy is the same
            shutil.rmtree(staging, ignore_errors=True)
    return str(place)


@dataclass
class RunSentBack:
    """What a task on local storage returns: its outcome, the node, its log, and (finished) the run folder's files."""

    outcome: Outcome
    node: str
    log_text: str = ""
    files: list[tuple[str, bytes, int, int]] = field(default_factory=list)
    moves: dict[str, str] = field(default_factory=dict)  # node path -> driver path, for the manifest


def _train_task(finetune: Callable[..., Any], job: Job, threads: int, shipped: dict[str, ShippedPath] | None) -> RunSentBack:
    """One fine-tuning on a Ray worker (CUDA_VISIBLE_DEVICES and OMP_NUM_THREADS are Ray's, from the task's resources)."""
    import ray
    import torch

    torch.set_num_threads(threads)
    node = ray.util.get_node_ip_address()
    if shipped is None:  # shared storage: the run writes its folder and log under --out itself
        return RunSentBack(train_one(finetune, job), node)
    arguments = dict(job.arguments)
    moves = {}
    for key in _INPUT_KEYS:
        if arguments.get(key) in shipped:
            local = _materialize(ray, shipped[arguments[key]])
            moves[local] = arguments[key]
            arguments[key] = local
    work = _node_root() / "runs" / uuid.uuid4().hex[:12]
    out = work / Path(arguments["out"]).name
    moves[str(out)] = arguments["out"]
    arguments["out"] = str(out)
    work.mkdir(parents=True)
    try:
        outcome = train_one(finetune, replace(job, arguments=arguments, log_file=work / "run.log"))
        files = _read_tree(out) if outcome.exit_code == 0 else []
        log_text = (work / "run.log").read_text(encoding="utf-8", errors="replace") if (work / "run.log").is_file() else ""
        return RunSentBack(replace(outcome, job=job), node, log_text, files, moves)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the node keeps nothing: a rerun trains again what did not come back


def publish_run(sent: RunSentBack) -> None:
    """On the driver: the log and (finished) run folder a node sent back, written under --out as a local run writes them."""
    from greenadapt.artifacts.files import atomic_write_text
    from greenadapt.artifacts.relocation import relocate_stage
    from greenadapt.artifacts.stage import TEMPORARY_MARKER, beside, swap_into_place, written_by_greenadapt

    job = sent.outcome.job
    atomic_write_text(job.log_file, sent.log_text)
    if not sent.files:
        return
    final = Path(job.arguments["out"])
    if (final.exists() or final.is_symlink()) and not written_by_greenadapt(final):  # an earlier try's leftovers are ours
        raise StageError("refusing to replace a folder greenadapt did not write", path=final,
                         hint="move it away; the run's result came back and is written on the rerun")
    staging = beside(final, "tmp")
    staging.mkdir(parents=True)
    try:
        (staging / TEMPORARY_MARKER).write_text(f"greenadapt run sent back from {sent.node}\n", encoding="utf-8")
        _write_tree(sent.files, staging)
        relocate_stage(staging, final, sent.moves)
        (staging / TEMPORARY_MARKER).unlink()
        swap_into_place(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


# -- the runs -----------------------------------------------------------------------------------------------------

def _failure(ray: Any, error: BaseException) -> tuple[int, str]:
    """A task that did not return: the exit code compare reports and its one line."""
    if isinstance(error, ray.exceptions.WorkerCrashedError | ray.exceptions.NodeDiedError | ray.exceptions.OutOfMemoryError):
        return 137, f"its Ray worker died (out of memory, killed, or its node lost) {TASK_RETRIES + 1} time(s)"
    if isinstance(error, ray.exceptions.TaskCancelledError):
        return 130, "cancelled"
    return 1, f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


class ClusterLostError(ResourceError):
    """The cluster's head stopped answering while runs were out: the driver cannot get them back."""


@dataclass
class HeadWatch:
    """Whether the cluster's head (its GCS) still answers, looked at as the driver waits. Ray's own client, once the GCS
    is gone, retries for a minute and then ends the process from C++ (exit 1, its lines only): compare sees it first and
    ends with one line of its own."""

    address: str
    answered: float = field(default_factory=time.monotonic)
    looked: float = 0.0

    def check(self, outstanding: int) -> None:
        now = time.monotonic()
        if now - self.looked < HEAD_LOOK_S:
            return
        self.looked = now
        try:
            with _connect(self.address, HEAD_LOOK_S):
                self.answered = now
                return
        except OSError:
            if now - self.answered < HEAD_LOST_S:
                return
        raise ClusterLostError(f"the Ray cluster's head at {self.address} stopped answering ({HEAD_LOST_S:.0f} s without its GCS) "
                               f"with {outstanding} run(s) not finished",
                               hint="the finished runs are kept: start the cluster again and rerun the same compare to train the rest")


def run_jobs_on_ray(ray: Any, finetune: Callable[..., Any], jobs: Sequence[Job], resources: RunResources, *, storage: str,
                    on_done: Callable[[Outcome], bool | None] | None = None) -> list[Outcome]:
    """Every job as a Ray task; their outcomes in the order they finished. A stopped run, or ``on_done`` returning True,
    cancels the runs not finished; Ctrl-C cancels them all and is raised again."""
    shipped = ship_inputs(ray, jobs) if storage == "local" else None
    task = ray.remote(_train_task).options(num_cpus=resources.cpus, num_gpus=resources.gpus, max_retries=TASK_RETRIES,
                                           retry_exceptions=False)
    pending = {task.remote(finetune, replace(job, arguments={**job.arguments, "device": resources.device}), resources.cpus, shipped): job
               for job in jobs}
    outcomes: list[Outcome] = []
    head = HeadWatch(ray.get_runtime_context().gcs_address)
    try:
        while pending:
            head.check(len(pending))
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            for ref in ready:
                job = pending.pop(ref)
                try:
                    sent = ray.get(ref)
                except Exception as error:  # the task did not return: its worker or node died, or it was cancelled
                    code, message = _failure(ray, error)
                    if code == 130:
                        continue
                    sent = RunSentBack(Outcome(job, code, message, 0), "?")
                if storage == "local":
                    publish_run(sent)
                log.info("%s trained on %s", job.label, sent.node)
                outcomes.append(sent.outcome)
                stop = on_done(sent.outcome) if on_done is not None else None
                if sent.outcome.exit_code in STOPPED_EXIT_CODES or stop:
                    _cancel(ray, pending)
                    pending.clear()
        return outcomes
    except ClusterLostError:
        raise  # nothing left to cancel them with: the driver's end ends them (their owner gone)
    except BaseException:
        _cancel(ray, pending)
        raise


def _cancel(ray: Any, pending: dict[Any, Job]) -> None:
    """Cancel every outstanding task and wait (a while) for them to end, so no run goes on writing after compare."""
    for ref in pending:
        ray.cancel(ref, force=False)
    deadline = time.monotonic() + CANCEL_GRACE_S
    left = list(pending)
    while left and time.monotonic() < deadline:
        _, left = ray.wait(left, num_returns=len(left), timeout=min(POLL_S * 4, max(0.0, deadline - time.monotonic())))
