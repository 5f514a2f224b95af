"""The one training runtime: fine-tuning, QA, masked-LM pretraining and multitask all run here.

Two owners:

- :class:`Trainer`, one optimizer step: seeds dropout per process, puts the
  model on its device (and in DDP under torchrun), builds the optimizers
  (AdamW, no decay on biases and norms, the row-wise optimizer for added rows
  trained sparsely) and the warm-up + linear decay schedule, then runs a
  step: this process's micro-batches under autocast, with DDP's gradient
  sync only on the last, the fp16 loss scaler, and :func:`optimizer_step`
  (unscale, clip, step, schedule).
- :func:`run_training`, the loop: epochs of batches, a JSON-lines log with
  one record per step, progress with the step rate and the last dev score, a
  non-finite loss stop, the dev evaluation at each epoch's end with the best
  epoch's weights kept, training-health warnings, checkpoints every
  ``save_every`` steps, ``--resume``, and SIGTERM (save, then stop).

A kind of training is a :class:`TrainingTask`: the batches of an epoch, the
loss of a micro-batch, and what it adds to the log and to checkpoints.

Batch arithmetic: ``batch_size`` is the *global* batch of one optimizer step.
With W processes and ``grad_accum`` A, each global batch is cut into W × A
micro-batches; process r runs micro-batches r·A … r·A + A − 1
(:meth:`Trainer.my_parts`). Every process builds the same global batches, and
a task's loss divides each micro-batch's summed loss by the size of the whole
global batch (times W, which DDP's gradient averaging divides out again), so
the gradient is that of the mean loss over the global batch whatever W and A.

Why not accelerate's ``Accelerator``: the parts it would own (device, DDP
wrap, autocast, scaler) are a few lines here, while what it does not cover is
most of this module: the loss normalised over the labelled targets of the
*global* batch (its accumulation averages micro-batch means), the row-wise
optimizer state of sparsely trained added rows, and checkpoints that hold the
best-on-dev weights, the position in the epoch and every rank's random states
in safetensors and JSON so a resumed run takes the same steps with the same
numbers. ``accelerate launch`` still starts the processes (its environment is
torchrun's, read by :func:`~greenadapt.compute.distributed.init_distributed`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greenadapt.errors import DataError, UsageError
from greenadapt.progress import NULL_PROGRESS, Progress, StepRate
from greenadapt.training.checkpoint import (
    CHECKPOINT_FORMAT,
    Checkpointing,
    StopSignal,
    gather_rng_states,
    rng_checkpoint_entries,
    write_checkpoint,
)
from greenadapt.compute.distributed import DistContext
from greenadapt.compute.health import TrainingHealth
from greenadapt.training.resume import BEST_FILE, LOG_FILE, STATE_FILE, TENSORS_FILE, WEIGHTS_FILE, Position, load_checkpoint
from greenadapt.training.config import LoopSettings
from greenadapt.training.trainer import Trainer

log = logging.getLogger(__name__)

# On a GPU, how often the loop reads its steps' losses off the device (see _Loop).
SYNC_SECONDS = 1.0


class TrainingTask:
    """What one kind of training tells :func:`run_training`; every method but :meth:`epoch_batches` and :meth:`loss` has a default."""

    label = "training"  # the progress bar's label
    where = ""  # appended to SIGTERM messages, e.g. " (seed 3)"
    # Whether running out of steps in the middle of an epoch still ends it (and evaluates): fine-tuning
    # counts whole epochs; masked-LM training reports a fraction of one.
    partial_epoch_ends = True

    def epoch_batches(self, epoch: int, step: int) -> Sequence[Any]:
        """The global batches of ``epoch`` (0-based); ``step``: the steps done before it."""
        raise NotImplementedError

    def parts(self, trainer: Trainer[Any], batch: Any) -> list[Any] | None:  # each task its own Trainer[settings]
        """This process's micro-batches of ``batch``; None to skip it (an epoch's last batch too small to split)."""
        if len(batch) < trainer.micro_per_step:
            return None
        return trainer.my_parts(batch)

    def loss(self, part: Any) -> Any:
        """One micro-batch's share of the step's loss (a scalar tensor)."""
        raise NotImplementedError

    def before_update(self) -> None:
        """Between the backward passes and the optimizer step (e.g. drop gradients of frozen rows)."""

    def start(self, step: int) -> list[dict[str, Any]]:
        """Before the first step; ``step`` > 0 when resumed from a checkpoint. Log records to write."""
        return []

    def after_step(self, step: int) -> list[dict[str, Any]]:
        """After each optimizer step (e.g. put frozen rows back, evaluate every N steps); log records to write."""
        return []

    def end(self) -> list[dict[str, Any]]:
        """After the last step (e.g. a final evaluation); log records to write."""
        return []

    def record(self, batch: Any) -> dict[str, Any]:
        """The task's fields of a step's log record."""
        return {}

    def counts(self, batch: Any) -> dict[str, int]:
        """Running totals a step adds to (kept in checkpoints), e.g. how many examples used the domain tokenizer."""
        return {}

    def weights(self) -> dict[str, Any]:
        """What a checkpoint holds of the model."""
        raise NotImplementedError

    def load_weights(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def extra_state(self) -> dict[str, Any]:
        """JSON-able task state a checkpoint holds (e.g. held-out evaluations so far)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Take back :meth:`extra_state` from a checkpoint's ``state.json``."""


@dataclass
class TrainingRun:
    """What :func:`run_training` did."""

    steps: int = 0
    epochs_run: int = 0  # epochs ended (see TrainingTask.partial_epoch_ends)
    epoch_fraction: float = 0.0  # epochs_run plus the share of an unfinished last epoch
    best_epoch: int | None = None
    best_score: float | None = None
    dev_history: list[dict[str, Any]] = field(default_factory=list)
    best_step: int | None = None  # the step whose weights are kept (dev scored within an epoch: --eval-every)
    stopped_early: bool = False  # --early-stopping: that many dev scorings in a row did not beat the best
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)  # of every step of this call (not of a resumed run's first part)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TrainingHooks:
    """What a training loop reports to and listens to, handed whole from a runner through its loop to :func:`run_training`."""

    evaluate: Callable[[Any], tuple[float, dict[str, Any]]] | None = None  # model -> (dev score, details); the best's weights kept
    log_path: Path | None = None  # the run's train_log.jsonl (written by the main process only)
    progress: Progress = NULL_PROGRESS
    checkpoint: Checkpointing | None = None  # state saved every save_every steps or save_seconds; resume: from the newest
    stop: StopSignal | None = None  # SIGTERM: a checkpoint before the next step, then Preempted
    trackers: Sequence[Any] = ()  # greenadapt.training.trackers: every record the log gets


NO_HOOKS = TrainingHooks()


def run_training(trainer: Trainer[LoopSettings], task: TrainingTask, hooks: TrainingHooks = NO_HOOKS) -> TrainingRun:
    """Train ``trainer.model`` for ``trainer.total_steps`` steps of ``task``; with ``hooks.evaluate`` at each epoch's end
    (or every ``eval_every`` steps), keep the best weights, held as a CPU copy of the state dict."""
    ctx, total, stop, progress, checkpoint = trainer.ctx, trainer.total_steps, hooks.stop, hooks.progress, hooks.checkpoint
    if stop is not None:
        stop.defer()
        if stop.requested(ctx):
            raise stop.stopped(f"before training{task.where}")
    loop = _Loop(trainer, task, hooks)
    loop.write(*task.start(loop.at.step))
    progress.start(task.label, total=total, unit="steps")
    if loop.at.step:
        progress.update(loop.at.step)
    try:
        while loop.at.step < total and not loop.result.stopped_early:
            batches = task.epoch_batches(loop.at.epoch, loop.at.step)
            loop.epoch_size = len(batches)
            stepped = loop.at.batch > 0
            for index in range(loop.at.batch, len(batches)):
                if loop.at.step >= total or loop.result.stopped_early:
                    break
                if stop is not None and stop.requested(ctx):
                    loop.at.batch = index
                    raise stop.stopped(f"at step {loop.at.step} of {total}{task.where}", loop.save())
                stepped = loop.step(batches[index], index) or stepped
            if not stepped:
                raise DataError(f"no training batch of this epoch fills {trainer.micro_per_step} micro-batch(es)",
                                hint="lower --grad-accum or use more data")
            if loop.result.stopped_early:
                break
            if loop.at.batch >= len(batches) or task.partial_epoch_ends:
                loop.end_epoch()
        loop.sync()
        loop.write(*task.end())
        if checkpoint is not None and checkpoint.save_final and not (loop.restored is not None and loop.restored.complete):
            loop.save(complete=True)
    finally:
        loop.close()
        progress.finish()
    return loop.finish()


def scorings_since_best(history: list[dict[str, Any]]) -> int:
    """How many dev scorings came after the best one (the first of equal bests counts as the best)."""
    if not history:
        return 0
    scores = [float(h["score"]) for h in history]
    return len(scores) - 1 - scores.index(max(scores))


def _best_step(history: list[dict[str, Any]]) -> int | None:
    """The step of the best dev scoring (a checkpoint of an earlier version recorded only its epoch)."""
    if not history:
        return None
    best = max(range(len(history)), key=lambda i: (float(history[i]["score"]), -i))
    return int(history[best]["step"])


def _sync_seconds(ctx: DistContext) -> float:
    """How long the loop may go without reading the device's losses (0: after every step)."""
    return SYNC_SECONDS if ctx.device.type == "cuda" else 0.0


@dataclass
class _Done:
    """A step whose loss and gradient norm are still on the device."""

    step: int
    epoch: int
    lr: float
    fields: dict[str, Any]  # the task's own fields of the log record
    seconds: float
    loss: Any
    grad_norm: Any


class _Loop:
    """The state of one :func:`run_training` call: position, log, best weights, checkpoints.

    Reading a loss off a GPU makes the host wait until the step has run, so the
    host could not queue the next step's kernels meanwhile; a small model's step
    is a few milliseconds of GPU work, and waiting every step leaves the card
    idle for most of it. On CUDA the loop therefore keeps its steps' losses and
    norms on the device and reads them together every :data:`SYNC_SECONDS`, and
    always before an evaluation, a checkpoint, an epoch's end and the end of
    training, so the log, the progress display, the health checks and the stop
    on a non-finite loss see every step, at most that late. On the CPU, where a
    step has finished when its call returns, it reads them after every step.
    """

    def __init__(self, trainer: Trainer[LoopSettings], task: TrainingTask, hooks: TrainingHooks) -> None:
        main = trainer.ctx.is_main  # the only process that writes the log and reports to trackers
        self.trainer, self.task, self.evaluate, self.progress = trainer, task, hooks.evaluate, hooks.progress
        self.checkpoint = checkpoint = hooks.checkpoint
        self.log_path = log_path = hooks.log_path if main else None
        self.trackers = list(hooks.trackers) if main else []
        self.pending: list[_Done] = []
        self.sync_seconds = _sync_seconds(trainer.ctx)
        self.last_sync = time.perf_counter()
        self.at, self.result, self.health = Position(), TrainingRun(), TrainingHealth()
        self.best_state: dict[str, Any] | None = None
        self.epoch_size = 0  # batches in the current epoch
        self.restored = load_checkpoint(checkpoint, trainer, task, log_path) if checkpoint is not None and checkpoint.resume else None
        if self.restored is not None:
            self.at, self.best_state = self.restored.position, self.restored.best_state
            self.result.best_epoch, self.result.best_score = self.restored.result["best_epoch"], self.restored.result["best_score"]
            self.result.dev_history = list(self.restored.result["dev_history"])
            self.result.best_step = self.restored.result.get("best_step", _best_step(self.result.dev_history))
            self.result.stopped_early = bool(self.restored.result.get("stopped_early"))
            if checkpoint is not None and checkpoint.meter is not None:
                checkpoint.meter.carry(self.restored.spent)
        self.writes = checkpoint is not None and checkpoint.writer
        self.handle = open(log_path, "a" if self.restored else "w", encoding="utf-8") if log_path is not None else None  # noqa: SIM115
        self.started = time.perf_counter() - self.at.seconds
        self.last_save = time.perf_counter()
        self.rate = StepRate(self.at.step)

    def step(self, batch: Any, index: int) -> bool:
        """One optimizer step on ``batch``; False when the batch was skipped."""
        trainer, task, at = self.trainer, self.task, self.at
        parts = task.parts(trainer, batch)
        if parts is None:
            # Past it, so the epoch can end: a skipped last batch (too small for every process to get a share)
            # left the epoch unfinished, and the loop went round it forever (2+ processes, issue 37's README test).
            at.batch = index + 1
            return False
        loss, grad_norm = trainer.step(parts, task.loss, before_update=task.before_update)
        at.step += 1
        at.batch = index + 1
        for key, value in task.counts(batch).items():
            at.counts[key] = at.counts.get(key, 0) + value
        now = time.perf_counter()
        self.pending.append(_Done(at.step, at.epoch + 1, trainer.lr(), task.record(batch), round(now - self.started, 3), loss, grad_norm))
        if now - self.last_sync >= self.sync_seconds:
            self.sync()
        self.write(*task.after_step(at.step))
        eval_every = trainer.config.eval_every
        if self.evaluate is not None and eval_every and at.step % eval_every == 0 and at.batch < self.epoch_size:
            self.score_dev(epoch=at.epoch + 1)  # within the epoch; its end scores it anyway
        every = self.checkpoint.save_every if self.checkpoint is not None else None
        seconds = self.checkpoint.save_seconds if self.checkpoint is not None else None
        if ((every and at.step % every == 0) or (seconds and now - self.last_save >= seconds)) and at.step < trainer.total_steps:
            self.save()
        return True

    def sync(self, *, check: bool = True) -> None:
        """Read the pending steps' losses and norms off the device: log records, health, progress, the non-finite stop."""
        if not self.pending:
            return
        import torch

        done, self.pending = self.pending, []
        self.last_sync = time.perf_counter()
        losses = torch.stack([d.loss.float() for d in done]).tolist()
        norms: list[float | None] = [None] * len(done)
        if done[0].grad_norm is not None:
            norms = torch.stack([d.grad_norm.float() for d in done]).tolist()
        for d, loss, norm in zip(done, losses, norms, strict=True):
            self.health.record_loss(loss)
            self._emit({
                "step": d.step, "epoch": d.epoch, "loss": round(loss, 6), "lr": d.lr, **d.fields,
                "grad_norm": None if norm is None else round(norm, 6), "seconds": d.seconds,
            })
            if check and not math.isfinite(loss) and self.trainer.scaler is None:
                raise UsageError(f"the training loss became {loss} at step {d.step}", hint="lower --lr, or use --precision fp32 or bf16")
        shown: dict[str, Any] = {"loss": f"{losses[-1]:.4f}", "steps_per_s": self.rate.per_second(done[-1].step)}
        if self.result.dev_history:
            shown["dev"] = f"{self.result.dev_history[-1]['score']:.4f}"
        self.progress.update(done[-1].step, **shown)

    def end_epoch(self) -> None:
        """Close an epoch: evaluate on dev (keeping the best weights) and move to the next."""
        at, history = self.at, self.result.dev_history
        self.sync()
        at.epoch += 1
        at.batch = 0
        if self.evaluate is None:
            self.health.evaluated()
            return
        if history and history[-1]["step"] == at.step:  # --eval-every scored this very step
            history[-1]["epoch"] = at.epoch
            return
        self.score_dev(epoch=at.epoch)

    def score_dev(self, *, epoch: int) -> None:
        """Score dev now (at an epoch's end, or every --eval-every steps); keep the best weights; --early-stopping."""
        assert self.evaluate is not None
        at, result, model = self.at, self.result, self.trainer.model
        self.sync()
        model.eval()
        score, details = self.evaluate(model)
        model.train()
        self.health.evaluated(score)
        result.dev_history.append({"epoch": epoch, "step": at.step, "score": score, **details})
        self.write({"event": "dev", "epoch": epoch, "step": at.step, "score": score})
        if result.best_score is None or score > result.best_score:
            result.best_score, result.best_epoch, result.best_step = score, epoch, at.step
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        log.info("epoch %d, step %d: dev score %.4f (best %.4f, step %d)", epoch, at.step, score, result.best_score, result.best_step)
        patience = self.trainer.config.early_stopping
        if patience and not result.stopped_early and scorings_since_best(result.dev_history) >= patience:
            result.stopped_early = True
            log.info("early stopping at step %d: %d dev scorings in a row did not beat %.4f (step %d)", at.step, patience,
                     result.best_score, result.best_step)

    def write(self, *records: dict[str, Any]) -> None:
        """Log records after every pending step's (the log stays in step order)."""
        if records:
            self.sync()
            self._emit(*records)

    def _emit(self, *records: dict[str, Any]) -> None:
        if self.handle is not None:
            for record in records:
                self.handle.write(json.dumps(record) + "\n")
        for tracker in self.trackers:
            for record in records:
                tracker.record(record)

    def save(self, *, complete: bool = False) -> Path | None:
        self.sync()  # a non-finite loss stops the run before it is saved; the saved log holds every step
        saved = None
        ctx = self.trainer.ctx
        rank_rng = gather_rng_states(ctx) if self.checkpoint is not None else None  # every process takes part
        if self.writes:
            assert self.checkpoint is not None
            if self.handle is not None:
                self.handle.flush()
            self.at.seconds = time.perf_counter() - self.started
            saved = _save_checkpoint(self, rank_rng, complete=complete)
        self.last_save = time.perf_counter()
        ctx.barrier()  # no process may exit (and have torchrun stop the others) before rank 0 has saved
        return saved

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a run ending in an error still logs the steps it took
            self.sync(check=False)
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def finish(self) -> TrainingRun:
        at, result, model = self.at, self.result, self.trainer.model
        if self.best_state is not None and result.best_step != at.step:
            model.load_state_dict(self.best_state)
            if self.trainer.split is not None:  # those rows owe nothing for the steps after their epoch
                self.trainer.split.settle()
            log.info("restored the weights of step %d, epoch %d (best on dev)", result.best_step, result.best_epoch)
        result.steps, result.epochs_run = at.step, at.epoch
        result.epoch_fraction = round(at.epoch + at.batch / max(1, self.epoch_size), 4)
        result.seconds = time.perf_counter() - self.started
        result.counts = dict(at.counts)
        result.losses = self.health.losses
        result.warnings = self.health.final_warnings()
        return result


def _save_checkpoint(loop: _Loop, rank_rng: list[dict[str, Any]] | None, *, complete: bool) -> Path:
    """Write one checkpoint atomically (temporary folder, manifest last, rename) and drop the older ones.

    ``rank_rng`` (from :func:`gather_rng_states`): every process's random
    states; the tensors go into ``optimizer.pt``, the rest into ``state.json``.
    """
    import torch
    from safetensors.torch import save_file

    checkpoint, trainer, task = loop.checkpoint, loop.trainer, loop.task
    assert checkpoint is not None

    def fill(tmp: Path) -> None:
        # Copies break tied weights' shared storage, which safetensors refuses to write.
        save_file({k: v.detach().to("cpu", copy=True).contiguous() for k, v in task.weights().items()}, str(tmp / WEIGHTS_FILE))
        if loop.best_state is not None:
            save_file({k: v.contiguous() for k, v in loop.best_state.items()}, str(tmp / BEST_FILE))
        tensors, state = trainer.state()
        rng_tensors, rng_state = rng_checkpoint_entries(trainer.ctx, rank_rng)
        tensors.update(rng_tensors)
        state.update(rng_state)
        torch.save(tensors, tmp / TENSORS_FILE)
        result = loop.result
        state.update(
            {
                "format": CHECKPOINT_FORMAT,
                "fingerprint": checkpoint.run.fingerprint,
                "seed": trainer.config.seed,
                "complete": complete,
                "position": loop.at.to_json(),
                "spent": checkpoint.meter.spent() if checkpoint.meter is not None else None,
                "result": {"best_epoch": result.best_epoch, "best_score": result.best_score, "dev_history": result.dev_history,
                       "best_step": result.best_step, "stopped_early": result.stopped_early},
                **task.extra_state(),
            }
        )
        (tmp / STATE_FILE).write_text(json.dumps(state, allow_nan=True) + "\n", encoding="utf-8")
        if loop.log_path is not None and loop.log_path.is_file():
            shutil.copyfile(loop.log_path, tmp / LOG_FILE)

    return write_checkpoint(checkpoint, loop.at.step, fill, complete=complete)
