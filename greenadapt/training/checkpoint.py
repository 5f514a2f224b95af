"""Resumable checkpoints and pre-emption, shared by ``finetune`` and ``pretrain``.

A checkpoint folder is written atomically (temporary folder, files, a manifest
with their checksums last, then a rename) and verified when read back; the
random states of every process go with it, so a resumed run takes the same
steps with the same numbers. SIGTERM (:class:`StopSignal`) becomes "save a
checkpoint before the next step, then raise :class:`Preempted`".
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import random
import shutil
import signal
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from greenadapt.errors import EXIT_PREEMPTED, GreenAdaptError, StageError
from greenadapt.machine.cost import CostMeter
from greenadapt.machine.stop_signals import raise_when_safe
from greenadapt.compute.distributed import DistContext

log = logging.getLogger(__name__)

CHECKPOINT_MANIFEST = "checkpoint.json"
CHECKPOINT_FORMAT = 1


class Preempted(GreenAdaptError):
    """SIGTERM stopped fine-tuning; ``--resume`` continues from the checkpoint it saved."""

    exit_code = EXIT_PREEMPTED


class StopBeforeTraining(BaseException):
    """SIGTERM before training, on its way out of library code to :meth:`StopSignal.__exit__`."""


class StopSignal:
    """SIGTERM as a request to stop, honoured where nothing is lost.

    Until training starts there is nothing to save, so the handler raises
    :class:`Preempted` at once, or as soon as the main thread is out of
    importlib (:mod:`greenadapt.machine.stop_signals`); StageRun then removes
    the temporary output as for any error. From the first training step on (:meth:`defer`) it only
    records the request: the loop saves a checkpoint before its next step and
    raises; a request that arrives after the last step lets the run finish
    evaluating and saving, which is shorter than training again.
    """

    def __init__(self, checkpoints: Path | None = None) -> None:
        self.checkpoints = checkpoints
        self.received = False
        self._deferred = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> StopSignal:
        # Python delivers signals to the main thread only; elsewhere (a library caller's worker) leave SIGTERM alone.
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False
        # Once SIGTERM has arrived before training, whatever ends the block is that stop: the handler's own
        # exception, or what a library made of it (torch's shape inference turns any exception into a ValueError).
        if exc is not None and self.received and not self._deferred and not isinstance(exc, Preempted):
            raise self.stopped("before training started") from None

    def defer(self) -> None:
        self._deferred = True

    def requested(self, ctx: DistContext) -> bool:
        """Whether any process got SIGTERM (all processes must call this at the same points)."""
        if ctx.world == 1:
            return self.received
        import torch

        flag = torch.tensor([int(self.received)], device=ctx.device)
        return bool(ctx.all_reduce_sum(flag).item())

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = True
        if not self._deferred:
            raise_when_safe(frame, self._stop_before_training)

    def _stop_before_training(self) -> BaseException | None:
        if self._deferred:
            return None
        # A BaseException on its way out, as KeyboardInterrupt is, so that no library's `except Exception` wraps
        # it (transformers' lazy imports turn any Exception into ModuleNotFoundError); __exit__ makes it Preempted.
        return StopBeforeTraining() if self._installed else self.stopped("before training started")

    def stopped(self, when: str, saved: Path | None = None) -> Preempted:
        resume = "rerun the same command with --resume to continue"
        if saved is not None:
            return Preempted(f"stopped by SIGTERM {when}; checkpoint saved", path=saved, hint=resume)
        if self.checkpoints is not None and self.checkpoints.is_dir():
            return Preempted(f"stopped by SIGTERM {when}", path=self.checkpoints, hint=f"{resume} from the checkpoints here")
        return Preempted(f"stopped by SIGTERM {when}; nothing to save yet", hint="rerun the same command")


@dataclass(frozen=True)
class RunIdentity:
    """What a checkpoint must share with the run that resumes it.

    ``fingerprint`` is the run's stage fingerprint, which names a data file by
    path, size and modification time. A copy, a checkout or a refreshed data
    folder gives a file a new time and the same bytes: such a run is still the
    one that saved the checkpoint. So a checkpoint records the run's options
    and inputs (each local file with its SHA-256) as a stage's manifest does,
    and is judged as a finished stage is
    (:func:`greenadapt.artifacts.differences.run_difference`).
    """

    kind: str
    config: Mapping[str, Any]
    inputs: Sequence[Mapping[str, Any]]

    @functools.cached_property
    def fingerprint(self) -> str:
        from greenadapt.artifacts.manifest import fingerprint

        return fingerprint(self.kind, self.config, self.inputs)

    def recorded(self, folder: Path) -> dict[str, Any]:
        """The fields a checkpoint's manifest holds about the run (the files' digests: one read per file per process)."""
        from greenadapt.artifacts.differences import canonical
        from greenadapt.artifacts.manifest import recorded_inputs

        return {"fingerprint": self.fingerprint, "config": canonical(self.config), "inputs": recorded_inputs(self.inputs, folder)}

    def difference(self, manifest: Mapping[str, Any]) -> tuple[str, list[str]]:
        """Why a checkpoint is not this run's ('' when it is) and the files whose modification time alone changed."""
        from greenadapt.artifacts.differences import run_difference

        if manifest.get("fingerprint") == self.fingerprint:
            return "", []
        if not isinstance(manifest.get("config"), dict) or not isinstance(manifest.get("inputs"), list):
            return "other inputs or options", []  # an older greenadapt's checkpoint: its fingerprint alone
        return run_difference(self.kind, manifest["config"], manifest["inputs"], self.config, self.inputs)


@dataclass
class Checkpointing:
    """Where and when :func:`train` saves its state, and whether it resumes from it.

    ``folder`` (one per seed) holds ``ckpt-<n>/`` folders; one counts only
    once its ``checkpoint.json`` (written last, with checksums of the other
    files) is there, and only the newest is kept. ``run`` says which run
    saved it: a checkpoint of other inputs or options is never resumed.
    """

    folder: Path
    run: RunIdentity
    save_every: int | None = None
    # and by time: a kill on a slow CPU then costs at most these seconds, not the run (one process only: the ranks of a
    # distributed run would each read their own clock and could disagree on when to save)
    save_seconds: float | None = None
    resume: bool = False
    save_final: bool = False  # after the last step too: several seeds, so a finished seed survives an interruption
    writer: bool = True  # under torchrun only rank 0 writes; every rank reads
    # the stage's CostMeter (rank 0): each checkpoint records what the run has spent, and a resumed run counts it
    meter: CostMeter | None = None


def latest_checkpoint(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest complete checkpoint in ``folder`` and its manifest; damaged ones are skipped with a warning."""
    from greenadapt.artifacts.files import NotARegularFile, read_own_text
    from greenadapt.artifacts.manifest import verify_files

    for candidate in sorted(folder.glob("ckpt-*"), key=_checkpoint_order, reverse=True):
        try:
            manifest = json.loads(read_own_text(candidate / CHECKPOINT_MANIFEST))
        except NotARegularFile as exc:
            log.warning("ignoring checkpoint %s: its %s is %s", candidate, CHECKPOINT_MANIFEST, exc.kind)
            continue
        except (OSError, ValueError, RecursionError):
            continue  # no manifest: a save that was interrupted before its last write
        problem = verify_files(candidate, manifest) if isinstance(manifest, dict) else "unreadable manifest"
        if problem is None and manifest.get("format") == CHECKPOINT_FORMAT:
            return candidate, manifest
        log.warning("ignoring damaged checkpoint %s: %s", candidate, problem or "unknown format")
    return None


def _python_rng_json() -> list[Any]:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def _numpy_rng_json() -> list[Any]:
    state: Any = np.random.get_state(legacy=True)  # (name, keys, pos, has_gauss, cached) with legacy=True
    name, keys, pos, has_gauss, cached = state
    return [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]


def gather_rng_states(ctx: DistContext) -> list[dict[str, Any]]:
    """Every process's random states (torch CPU and CUDA, Python, NumPy), in rank order; a collective under torchrun.

    Each process draws its own dropout masks (seeded ``seed + rank``), so a
    resumed run matches an uninterrupted one only if every rank gets its own
    generators back, not just rank 0 (which alone writes the checkpoint).
    """
    import torch

    mine: dict[str, Any] = {"torch": torch.get_rng_state(), "python": _python_rng_json(), "numpy": _numpy_rng_json()}
    if ctx.device.type == "cuda":
        mine["cuda"] = torch.cuda.get_rng_state(ctx.device)
    if ctx.world == 1:
        return [mine]
    generators = ("torch", "cuda")  # byte tensors: sent as base64 inside the JSON every rank contributes
    sent = {key: base64.b64encode(value.numpy().tobytes()).decode("ascii") if key in generators else value for key, value in mine.items()}
    return [
        {key: torch.frombuffer(bytearray(base64.b64decode(value)), dtype=torch.uint8) if key in generators else value
         for key, value in got.items()}
        for got in ctx.all_gather_json(sent)
    ]


def rng_checkpoint_entries(ctx: DistContext, rank_rng: list[dict[str, Any]] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The random states a checkpoint holds: tensors (for ``optimizer.pt``) and the JSON-able rest (``state.json``).

    The writer's (rank 0's) states are also kept under the keys checkpoints
    of an older greenadapt held alone (``torch_rng``, ``python_rng``, ...):
    :func:`restore_rng_states` reads them there both for such checkpoints and
    when a run resumes with another number of processes.
    """
    import torch

    tensors: dict[str, Any] = {"torch_rng": torch.get_rng_state()}
    if ctx.device.type == "cuda":
        tensors["cuda_rng"] = torch.cuda.get_rng_state(ctx.device)
    state: dict[str, Any] = {"python_rng": _python_rng_json(), "numpy_rng": _numpy_rng_json()}
    if rank_rng is not None:
        tensors["rank_rng"] = [{k: v for k, v in r.items() if k in ("torch", "cuda")} for r in rank_rng]
        state["rank_rng"] = [{"python": r["python"], "numpy": r["numpy"]} for r in rank_rng]
    return tensors, state


def restore_rng_states(tensors: dict[str, Any], state: dict[str, Any], ctx: DistContext, path: Path, *, seed: int, step: int) -> None:
    """Give this rank its generators back from a checkpoint.

    A checkpoint of as many processes as this run restores every rank's own
    states. One from an older greenadapt (rank 0's states alone) or of another
    number of processes restores rank 0's, and the other ranks get a fresh
    stream per resume point: their dropout masks then differ from an
    uninterrupted run's, their weights do not diverge (DDP averages them).
    """
    import torch

    ranks, rank_json = tensors.get("rank_rng"), state.get("rank_rng")
    if ranks is not None and rank_json is not None and len(ranks) == len(rank_json) == ctx.world:
        torch.set_rng_state(ranks[ctx.rank]["torch"])
        if ctx.device.type == "cuda" and "cuda" in ranks[ctx.rank]:
            torch.cuda.set_rng_state(ranks[ctx.rank]["cuda"], ctx.device)
        _set_python_numpy_rng(rank_json[ctx.rank]["python"], rank_json[ctx.rank]["numpy"])
        return
    if ctx.world > 1:
        saved = "only rank 0's" if ranks is None else f"those of {len(ranks)} processes"
        log.warning("%s holds %s random states, this run has %d processes: the other ranks' dropout starts afresh", path, saved, ctx.world)
    if ctx.rank != 0:
        torch.manual_seed(seed + ctx.rank + 1_000_003 * step)
        return
    torch.set_rng_state(tensors["torch_rng"])
    if ctx.device.type == "cuda" and "cuda_rng" in tensors:
        torch.cuda.set_rng_state(tensors["cuda_rng"], ctx.device)
    if "python_rng" in state:  # pretrain checkpoints of an older greenadapt held torch's alone
        _set_python_numpy_rng(state["python_rng"], state["numpy_rng"])


def _set_python_numpy_rng(python_rng: list[Any], numpy_rng: list[Any]) -> None:
    random.setstate((python_rng[0], tuple(python_rng[1]), python_rng[2]))
    np.random.set_state((numpy_rng[0], np.array(numpy_rng[1], dtype=np.uint32), *numpy_rng[2:]))


def write_checkpoint(checkpoint: Checkpointing, step: int, fill: Callable[[Path], None], *, complete: bool) -> Path:
    """Write one checkpoint folder atomically and drop the older ones; ``fill(tmp)`` writes its files.

    The files go into a temporary folder, then a manifest with their checksums
    (what :func:`latest_checkpoint` verifies), then the folder is renamed to the
    next ``ckpt-NNNNNN`` and the rename made durable. Shared by ``finetune`` and
    ``pretrain``, whose checkpoints hold different state.
    """
    from greenadapt.artifacts.files import fsync_directory, refuse_planted, sha256_file, write_json
    from greenadapt.artifacts.stage import resource_errors

    folder = checkpoint.folder
    for place in (folder.parent, folder):
        refuse_planted(place, f"{place.name}, a checkpoints folder greenadapt writes,", kind="folder")
    with resource_errors(folder):
        folder.mkdir(parents=True, exist_ok=True)
        older = sorted((c for c in folder.glob("ckpt-*") if c.is_dir() and not c.is_symlink()), key=_checkpoint_order)
        # Named by the step it holds (a second save of the same step, e.g. SIGTERM right after a periodic one, gets -2).
        final = folder / f"ckpt-{step:06d}"
        repeat = 1
        while final.exists():
            repeat += 1
            final = folder / f"ckpt-{step:06d}-{repeat}"
        tmp = folder / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            fill(tmp)
            files = {p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(tmp.iterdir())}
            manifest = {"format": CHECKPOINT_FORMAT, **checkpoint.run.recorded(folder), "step": step}
            write_json(tmp / CHECKPOINT_MANIFEST, {**manifest, "complete": complete, "files": files})
            os.rename(tmp, final)
            fsync_directory(folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for stale in [*older, *(t for t in folder.glob(".tmp-*") if t.is_dir() and not t.is_symlink())]:
            _remove_checkpoint(stale)
    log.info("checkpoint at step %d saved in %s", step, final)
    return final


def discard_checkpoints(folder: Path) -> None:
    """Remove a run's checkpoints folder so that each checkpoint in it is whole or gone at every moment.

    A kill inside ``shutil.rmtree`` stops it between two files: the checkpoint
    it was deleting would stay visible without its manifest, or with a manifest
    whose files are gone (seen in the kill test: ``ckpt-000008`` without its
    manifest). Each checkpoint is first renamed to a hidden temporary, which
    the next save or clean-up removes.

    A ``<out>.checkpoint`` folder may also be a user's own (it is only a name beside the output): only what
    greenadapt writes there (``ckpt-*``, ``.tmp-*``, the ``seed-N`` folders holding them) is removed, and a
    folder is removed only once nothing else is left in it.
    """
    places = checkpoint_places(folder)
    for place in places:
        for checkpoint in place.glob("ckpt-*"):
            if checkpoint.is_dir() and not checkpoint.is_symlink():
                _hide(checkpoint)
    for place in reversed(places):  # seed-N before the folder that holds them
        for hidden in place.glob(".tmp-*"):
            if hidden.is_dir() and not hidden.is_symlink():
                shutil.rmtree(hidden, ignore_errors=True)
        try:
            place.rmdir()
        except OSError:
            log.info("kept %s: it holds files greenadapt did not write", place)


def checkpoint_places(folder: Path) -> list[Path]:
    """The folders of a run's checkpoints folder that hold ``ckpt-*``: pretrain keeps them in the folder itself,
    finetune one subfolder per seed."""
    if folder.is_symlink() or not folder.is_dir():
        return []  # a link at the name is never followed (the run refuses it before training: training/job.py)
    return [folder, *sorted(place for place in folder.glob("seed-*") if place.is_dir() and not place.is_symlink())]


def _remove_checkpoint(checkpoint: Path) -> None:
    shutil.rmtree(_hide(checkpoint), ignore_errors=True)


def _hide(checkpoint: Path) -> Path:
    if checkpoint.name.startswith(".tmp-"):
        return checkpoint
    hidden = checkpoint.parent / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(checkpoint, hidden)
    except FileNotFoundError:
        return checkpoint
    return hidden


def _checkpoint_order(path: Path) -> tuple[int, int]:
    """``ckpt-<step>[-<repeat>]`` in the order they were written (numbers, not text: step 1000000 follows 999999)."""
    parts = path.name.split("-")[1:]
    numbers = [int(p) if p.isdigit() else -1 for p in parts] + [1]
    return numbers[0], numbers[1]


def matching_checkpoint(checkpoint: Checkpointing) -> Path | None:
    """The newest verified checkpoint to resume from; None when there is none; an error when it was
    made with other inputs or options (resuming it would silently mix two runs)."""
    found = latest_checkpoint(checkpoint.folder)
    if found is None:
        log.info("no checkpoint in %s: training from the start", checkpoint.folder)
        return None
    path, manifest = found
    changed, retimed = checkpoint.run.difference(manifest)
    if changed:
        raise StageError(
            f"this checkpoint was made with other inputs or options ({changed})", path=path, hint=f"delete {path.parent} to start over"
        )
    if retimed:
        log.info("resuming %s: its inputs have the SHA-256 they had when it was saved (%s: a new modification time or path)",
                 path, ", ".join(retimed))
    return path
