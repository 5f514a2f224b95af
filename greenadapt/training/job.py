"""A training stage under torchrun: every process trains, rank 0 alone writes the stage folder.

:func:`training_stage` owns what ``finetune`` and ``pretrain`` share around
their training: the process group (:func:`init_distributed`), SIGTERM handling
(:class:`StopSignal`), the stage folder on rank 0 (:class:`StageRun`; every
rank learns whether it is up to date), and the checkpoint folder beside the
output: an interrupted run's checkpoints are never dropped unasked (without
``--resume`` the run stops and says so) nor resumed when they were made with
other inputs or options. :meth:`TrainingStage.commit` writes the manifest and
then removes the checkpoints.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from greenadapt.artifacts.stage import StageOutcome, StageRun
from greenadapt.errors import StageError
from greenadapt.training.checkpoint import (
    Checkpointing,
    RunIdentity,
    StopSignal,
    checkpoint_places,
    discard_checkpoints,
    latest_checkpoint,
)
from greenadapt.compute.distributed import DistContext, init_distributed

if TYPE_CHECKING:
    from greenadapt.options import Run

log = logging.getLogger(__name__)

LIBRARIES = ("torch", "transformers", "tokenizers")  # their versions go into the manifest


def checkpoint_folder(out: str | os.PathLike[str]) -> Path:
    """Where a run writing ``out`` keeps its checkpoints: a sibling, so they outlive the run's temporary folder."""
    path = Path(out).absolute()
    return path.parent / f"{path.name}.checkpoint"


class StageOptions(Protocol):
    """What a training stage reads of its command's settings (CheckpointSettings and DeviceSettings declare them)."""

    @property
    def device(self) -> str: ...

    @property
    def resume(self) -> bool: ...

    @property
    def save_every(self) -> int | None: ...

    @property
    def save_minutes(self) -> float | None: ...


@dataclass
class TrainingStage:
    """One training stage's process, stage folder (rank 0) and checkpoints."""

    ctx: DistContext
    stop: StopSignal
    stage: StageRun | None  # rank 0 only
    out: Path
    run: RunIdentity  # the run's options and inputs: a checkpoint of another run is never resumed
    checkpoints: Path
    options: StageOptions
    up_to_date: StageOutcome | None = None  # set when the output is up to date: nothing to train

    @property
    def tmp(self) -> Path | None:
        """The folder rank 0 writes the output into; None on the other ranks."""
        return self.stage.tmp if self.stage is not None else None

    def checkpointing(self, *, save_final: bool = False) -> Checkpointing:
        """The run's checkpoints as its options ask (--save-every, --save-minutes, --resume); ``save_final``: one after
        the last step too (a run of several seeds resumes at the next seed)."""
        options = self.options
        return Checkpointing(
            self.checkpoints, self.run, save_every=options.save_every, resume=options.resume, save_final=save_final,
            writer=self.ctx.is_main, save_seconds=options.save_minutes * 60 if options.save_minutes and self.ctx.world == 1 else None,
            meter=self.stage.meter if self.stage is not None else None,
        )

    def commit(self, stats: dict[str, Any], cost: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> StageOutcome:
        """Rank 0: write the manifest (the output is complete from here on), then drop the checkpoints; ``cost``: figures
        for the manifest's cost block beside the measured ones."""
        if self.stage is None:
            return StageOutcome(self.out, {}, False)
        manifest = self.stage.commit(stats=stats, cost=cost, extra=extra)
        discard_checkpoints(self.checkpoints)
        if self.stop.received:
            log.warning("SIGTERM arrived after the last training step; the run was finished and saved first")
        return StageOutcome(self.stage.out, manifest, False)


@contextlib.contextmanager
def training_stage(
    kind: str,
    out: str | os.PathLike[str],
    config: Mapping[str, Any],
    inputs: list[dict[str, Any]],
    options: StageOptions,
    run: Run,
) -> Iterator[TrainingStage]:
    """Open a training stage writing ``out`` on ``options.device``; its ``up_to_date`` is set when there is nothing to
    train. ``run``: --force and --wait."""
    from greenadapt.artifacts.files import refuse_planted

    checkpoints = checkpoint_folder(out)
    refuse_planted(checkpoints, f"{checkpoints.name}, the checkpoints folder greenadapt keeps beside {Path(out).name},", kind="folder")
    ctx = init_distributed(options.device)
    try:
        with contextlib.ExitStack() as stack:
            stop = stack.enter_context(StopSignal(checkpoints))
            made = StageRun(kind, out, config, inputs, force=run.force, wait=run.wait, libraries=LIBRARIES) if ctx.is_main else None
            stage = stack.enter_context(made) if made is not None else None
            identity = RunIdentity(kind, config, inputs)
            job = TrainingStage(ctx, stop, stage, Path(out), identity, checkpoints, options)
            if ctx.broadcast_int(int(stage.skipped) if stage is not None else 0):
                if stage is None:
                    job.up_to_date = StageOutcome(Path(out), {}, True)
                else:
                    _drop_finished_checkpoints(checkpoints, identity)
                    job.up_to_date = StageOutcome(stage.out, stage.manifest or {}, True, stage.skip_reason)
            elif stage is not None:
                _check_checkpoints(checkpoints, identity, resume=options.resume, force=run.force)
            yield job
    finally:
        ctx.close()


def _latest_checkpoints(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    return [found for found in (latest_checkpoint(place) for place in checkpoint_places(folder)) if found is not None]


def _check_checkpoints(folder: Path, run: RunIdentity, *, resume: bool, force: bool = False) -> None:
    """Never discard an interrupted run's checkpoints unasked, nor resume from another run's; ``--force`` asks: it starts
    over (saying so), unless ``--resume`` asks to continue from checkpoints of this very run."""
    if not folder.is_dir():
        return
    found = _latest_checkpoints(folder)
    if not found:
        log.info("removing %s: it holds no complete checkpoint", folder)
        discard_checkpoints(folder)
        return
    differences = [run.difference(manifest)[0] for _, manifest in found]
    same = not any(differences)
    if force and not (resume and same):
        steps = ", ".join(str(manifest.get("step")) for _, manifest in found)
        log.warning("--force: starting over; removing the checkpoints an interrupted run left in %s (step %s%s)", folder, steps,
                    "" if same else ", made with other inputs or options")
        discard_checkpoints(folder)
        return
    if not resume:
        steps = ", ".join(str(manifest.get("step")) for _, manifest in found)
        raise StageError(
            f"an interrupted run left checkpoints here (step {steps})",
            path=folder,
            hint="pass --resume to continue from them, or --force to start over",
        )
    for (path, _), changed in zip(found, differences, strict=True):
        if changed:
            raise StageError(
                f"this checkpoint was made with other inputs or options ({changed})",
                path=path,
                hint="rerun with the options of the interrupted run, or pass --force to start over",
            )


def _drop_finished_checkpoints(folder: Path, run: RunIdentity) -> None:
    # A run killed between its commit and removing its checkpoints leaves them behind; the output supersedes them.
    found = _latest_checkpoints(folder)
    if folder.is_dir() and not any(run.difference(manifest)[0] for _, manifest in found):
        discard_checkpoints(folder)
