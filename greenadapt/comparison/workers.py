"""compare's parallel fine-tunings: a few long-lived worker processes, each training run after run.

A process per fine-tuning paid Python's, torch's and transformers' imports and, on a GPU, a CUDA context before
every run (about 14 s of a 70 s slot on an H200, docs/benchmarks.md). A worker pays that once and then trains the
runs it is given one after another, in its own process (so a crash, a CUDA error or a leak stays in it) with its
share of the cores; each run's log still goes to ``<variant>/seed-<s>.log`` beside its folder.

A worker is never a fork of compare (a forked child of a process that has touched CUDA cannot use it): the greenadapt
program, which runs one command a process, forks its workers from a server that imported torch, transformers and the
fine-tuning code once (:data:`FORKSERVER_PRELOAD`; the server touches no GPU), so a worker starts without paying the
imports (6.6 CPU-s each on a Zen 3 EPYC) and shares their ~390 MiB copy-on-write rather than building its own. A Python caller's
workers are spawned: each then reads the caller's environment and folder of the moment, which a server started for an
earlier call would not.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Future

log = logging.getLogger(__name__)

# Exit codes of a run that was stopped rather than failed: no further run is started after one.
STOPPED_EXIT_CODES = (130, 143, 99)


@dataclass(frozen=True)
class Job:
    """One fine-tuning for a worker: ``greenadapt.finetune``'s keywords and the file its log goes to."""

    label: str
    arguments: dict[str, Any]
    log_file: Path


@dataclass(frozen=True)
class Outcome:
    job: Job
    exit_code: int
    message: str  # the error's one line, empty when the run finished
    worker: int  # the process id that trained it


# How often a worker looks whether compare is still there, and how long a run stopped by its parent's death may take
# to save its checkpoint before the worker ends regardless.
PARENT_POLL_S = 0.5
ORPHAN_GRACE_S = 120.0
# How long the workers may take to end after Ctrl-C before compare kills them (a run stopped by Ctrl-C saves nothing).
INTERRUPT_GRACE_S = 30.0


# transformers imports its models lazily: after ``import transformers`` a worker still imported for 4.4 s (python -X
# importtime, a loaded Zen 3 EPYC), after BERT's module, which brings the shared ones (modeling_utils, masking_utils,
# ...), for 0.16 s; another family's own module is a worker's import.
FORKSERVER_PRELOAD = ("torch", "transformers.models.bert.modeling_bert", "greenadapt.runners.finetune.run")


_compare: tuple[int, int, int | None] | None = None  # in a worker: compare's pid, the starter's pid, compare's pidfd


def _start_worker(threads: int, compare: int, devices: Any = None) -> None:
    """In each worker, before CUDA is touched: its share of the cores, its GPU (``devices``: a queue of one id per
    worker, when compare spreads them over GPUs), and an end when ``compare``'s process ends."""
    global _compare
    _compare = (compare, os.getppid(), _pidfd(compare))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    if devices is not None:  # the worker sees its one GPU as cuda:0, NVML reads its energy
        os.environ["CUDA_VISIBLE_DEVICES"] = str(devices.get(timeout=60))
    threading.Thread(target=_end_with_compare, name="greenadapt-orphan-watch", daemon=True).start()
    import torch

    torch.set_num_threads(threads)


def _pidfd(pid: int) -> int | None:
    """A handle on process ``pid`` that turns readable once it has ended, zombie or not, whoever gets its pid next
    (Linux 5.3 and newer); None elsewhere, or if it has already ended."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _compare_ended(wait: float = 0.0) -> bool:
    """Whether compare's process has ended (waiting up to ``wait`` seconds to see). A spawned worker's parent is
    compare; a forked worker's is the fork server, which outlives compare while its workers do (they hold its end of
    the pipe that would end it), so compare itself is watched."""
    if _compare is None:  # not a worker (a Ray task, or in process)
        return False
    compare, starter, handle = _compare
    if handle is not None:
        import select

        return bool(select.select([handle], [], [], wait)[0])
    time.sleep(wait)
    try:
        os.kill(compare, 0)
    except ProcessLookupError:
        return True
    return os.getppid() != starter


def _end_with_compare() -> None:
    """A worker outlives a compare killed with SIGKILL: nothing tells it (its task queue's writing end is its own too), so
    it would train on, holding run locks and the output pipe. Once compare is gone: SIGTERM to itself, which a
    training run honours by saving a checkpoint (the rerun resumes from it) and anything else by ending; then an exit
    after :data:`ORPHAN_GRACE_S` whatever it is doing."""
    while not _compare_ended(PARENT_POLL_S):
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(ORPHAN_GRACE_S)
    os._exit(143)


def train_one(finetune: Callable[..., Any], job: Job) -> Outcome:
    """In a worker: ``finetune(**job.arguments)`` (the API's function, passed by its caller: this module sits below
    the API), its log lines (INFO and up) written to ``job.log_file``."""
    from greenadapt.errors import EXIT_INTERNAL, GreenAdaptError

    from greenadapt.artifacts.files import open_own

    try:
        stream = open_own(job.log_file, f"{job.log_file.name}, the run's log,")
    except GreenAdaptError as error:  # a link or other planted thing at the log's name: this run is not started
        return Outcome(job, error.exit_code, error.one_line(), os.getpid())
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname).1s %(name)s: %(message)s", "%H:%M:%S"))
    package = logging.getLogger("greenadapt")
    package.addHandler(handler)
    package.setLevel(logging.INFO)
    package.propagate = False  # the worker's stderr is the terminal compare runs in: the log file is the run's place
    try:
        gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
        log.info("worker %d: %s%s", os.getpid(), job.label, f" on GPU {gpu}" if gpu else "")
        finetune(**job.arguments, progress=False)  # the run's log file has its lines; no bars from N workers
        return Outcome(job, 0, "", os.getpid())
    except GreenAdaptError as error:
        log.error("%s", error.one_line())
        return Outcome(job, error.exit_code, error.one_line(), os.getpid())
    except Exception as error:  # a bug: its traceback in the run's log, the next run still starts
        log.exception("fine-tuning failed")
        return Outcome(job, EXIT_INTERNAL, f"{type(error).__name__}: {error}", os.getpid())
    finally:
        package.removeHandler(handler)
        handler.close()
        stream.close()
        if _compare_ended():  # nobody will read the outcome or send another run
            os._exit(143)


def _end_stragglers(children: Sequence[Any]) -> None:
    """Kill the workers still there :data:`INTERRUPT_GRACE_S` after the interrupt. A worker can hang in its own exit:
    when Ctrl-C lands while a library is starting a thread pool, the pool's thread may never be told to end, and the
    interpreter waits for it forever (seen in tests/test_reliability_round5_compare.py); compare would wait with it.
    Its run loses nothing a rerun needs: writes are atomic and the rerun resumes from the last checkpoint."""
    deadline = time.monotonic() + INTERRUPT_GRACE_S
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            log.warning("worker %d did not end within %.0f s of the interrupt: killed", child.pid, INTERRUPT_GRACE_S)
            child.kill()


def worker_slots(devices: Sequence[str], workers: int) -> list[str]:
    """The GPU of each of ``workers`` workers: the ``devices`` in turn (several workers per GPU when there are more workers)."""
    return [str(devices[k % len(devices)]) for k in range(workers)]


def run_jobs(finetune: Callable[..., Any], jobs: Sequence[Job], workers: int, threads: int,
             on_done: Callable[[Outcome], bool | None] | None = None, devices: Sequence[str] = ()) -> list[Outcome]:
    """Every job on ``workers`` processes (``threads`` cores each), in order of submission; returns their outcomes.
    ``finetune`` is :func:`greenadapt.finetune` (a module-level function: workers import it by its name).

    A run stopped by a signal stops the rest (none is started after it), and so does ``on_done`` returning True (the runs
    already training finish); Ctrl-C in the parent is passed on to the
    workers, so each running fine-tuning stops as it would in the foreground, and the interrupt is raised again.
    """
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    from greenadapt.comparison import worker_start_method

    outcomes: list[Outcome] = []
    context = multiprocessing.get_context(worker_start_method)
    if worker_start_method == "forkserver":  # (a server already running, e.g. pretokenize's, keeps its own imports)
        context.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    n_workers = max(1, min(workers, len(jobs)))
    slots = None
    if devices:
        slots = context.Queue()
        for device in worker_slots(devices, n_workers):
            slots.put(device)
    executor = ProcessPoolExecutor(max_workers=n_workers, mp_context=context, initializer=_start_worker,
                                   initargs=(threads, os.getpid(), slots))
    pending: dict[Future[Outcome], Job] = {executor.submit(train_one, finetune, job): job for job in jobs}
    try:
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                job = pending.pop(future)
                if future.cancelled():  # after a stopped run
                    continue
                try:
                    outcome = future.result()
                except BrokenProcessPool:  # a worker was killed (out of memory, SIGKILL): this run and those queued
                    outcome = Outcome(job, 137, "its worker process died (out of memory, or killed)", 0)
                outcomes.append(outcome)
                stop = on_done(outcome) if on_done is not None else None
                if outcome.exit_code in STOPPED_EXIT_CODES or stop:
                    for queued in pending:
                        queued.cancel()
        return outcomes
    except BaseException:
        children = [child for child in multiprocessing.active_children() if child.pid is not None]
        for child in children:
            os.kill(child.pid, signal.SIGINT)  # type: ignore[arg-type]
        executor.shutdown(wait=False, cancel_futures=True)  # each worker ends once its run has stopped
        _end_stragglers(children)
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
