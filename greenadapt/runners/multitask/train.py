"""The multi-task loop: one task per step, its batch through its own adapter and head.

Each step draws a task (``sampling``), then the next batch of that task from
a per-task stream that reshuffles at the end of every pass over the task's
data; with two tokenizers, each unit's view is drawn afresh per pass
(:func:`greenadapt.compute.batches.choose_views`, probability ``mix`` of the
domain view). Batches, the output rows, the optimizers (AdamW, linear
warm-up and decay) and the autocast choice are ``greenadapt.finetune``'s.
The loss of a step is the mean cross-entropy over the batch's labelled rows.
An "epoch" is ``steps_per_epoch`` steps (default: the number of batches in
one pass over all tasks' training data); with ``evaluate``, the weights of
the epoch with the best average dev score are kept.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from greenadapt.errors import UsageError
from greenadapt.modeling.units import Unit
from greenadapt.runners.multitask.sampling import alpha, sample_tasks
from greenadapt.compute.batches import choose_views
from greenadapt.compute.batches import collate, output_rows
from greenadapt.training.runtime import NO_HOOKS, TrainingHooks, TrainingTask, run_training
from greenadapt.training.trainer import Trainer

if TYPE_CHECKING:
    from greenadapt.runners.multitask.settings import MultitaskSettings

log = logging.getLogger(__name__)

_STREAM = 0x6D7462


@dataclass
class MultitaskResult:
    steps: int = 0
    epochs_run: int = 0
    steps_per_epoch: int = 0
    task_steps: dict[str, int] = field(default_factory=dict)
    best_epoch: int | None = None
    best_score: float | None = None
    dev_history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    domain_fraction: float = 0.0
    trainable_parameters: int = 0


class TaskStream:
    """Batches of one task's units: a fresh shuffle and fresh views on every pass."""

    def __init__(self, n_units: int, batch_size: int, mix: float, seed: int) -> None:
        self.n, self.batch_size, self.mix, self.seed = n_units, batch_size, mix, seed
        self.passes = -1
        self.position = n_units  # forces a refill on the first call

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        """(unit indices, the view of every unit of the task) of the next batch."""
        if self.position >= self.n:
            self.passes += 1
            self._draw()
            self.position = 0
        batch = self.order[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return batch, self.views

    def _draw(self) -> None:
        self.order = np.random.default_rng([self.seed, self.passes, _STREAM]).permutation(self.n)
        self.views = choose_views(self.n, self.mix, self.seed, self.passes)

    def state(self) -> list[int]:
        return [self.passes, self.position]

    def restore(self, state: Sequence[int]) -> None:
        """Where a checkpoint left the stream: the same pass (its order and views drawn again from the seed) and place."""
        self.passes, self.position = int(state[0]), int(state[1])
        if self.passes >= 0:
            self._draw()


def plan(sizes: Sequence[int], training: MultitaskSettings) -> tuple[int, int]:
    """(steps per epoch, total steps)."""
    per_epoch = training.steps_per_epoch or max(1, math.ceil(sum(sizes) / training.batch_size))
    total = training.max_steps if training.max_steps is not None else per_epoch * training.epochs
    return per_epoch, max(1, total)


class MultitaskTask(TrainingTask):
    """One task per step: its next batch through its own adapter and head, the mean cross-entropy over labelled rows."""

    label = "multi-task fine-tuning"

    def __init__(self, trainer: Trainer[MultitaskSettings], model: Any, names: Sequence[str], units: Sequence[Sequence[Unit]],
                 config: MultitaskSettings, *, pad_id: int) -> None:
        training = config
        self.trainer, self.names, self.units, self.config, self.pad_id = trainer, names, units, config, pad_id
        self.sizes = [len(u) for u in units]
        self.per_epoch, total = plan(self.sizes, config)
        self.epochs = math.ceil(total / self.per_epoch)
        self.task_views = [model.task_view(name) for name in names]
        mix = training.mix or 0.0
        self.streams = [TaskStream(n, training.batch_size, mix, training.seed + 1009 * i) for i, n in enumerate(self.sizes)]
        self.current: tuple[int, np.ndarray, np.ndarray] = (0, np.zeros(0, np.int64), np.zeros(0, np.int64))

    def epoch_batches(self, epoch: int, step: int) -> list[int]:
        """The task of each step of the epoch (counted from the epoch's start, so a run resumed inside an epoch draws
        the same order as the uninterrupted run)."""
        config, total = self.config, self.trainer.total_steps
        steps = min(self.per_epoch, total - epoch * self.per_epoch)
        order = sample_tasks(self.sizes, config.sampling, steps=steps, epoch=epoch + 1, epochs=self.epochs, seed=config.seed)
        log.info("epoch %d: sampling %s (alpha %.2f)", epoch + 1, config.sampling, alpha(config.sampling, epoch + 1, self.epochs))
        return [int(t) for t in order]

    def parts(self, trainer: Trainer[MultitaskSettings], batch: int) -> list[Any] | None:
        indices, views = self.streams[batch].next()
        self.current = (batch, indices, views)
        return [self.current]

    def weights(self) -> dict[str, Any]:
        return dict(self.trainer.model.state_dict())

    def load_weights(self, state: dict[str, Any]) -> None:
        self.trainer.model.load_state_dict(state)

    def extra_state(self) -> dict[str, Any]:
        return {"streams": [stream.state() for stream in self.streams]}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        for stream, saved in zip(self.streams, state.get("streams") or [], strict=False):
            stream.restore(saved)

    def loss(self, part: tuple[int, np.ndarray, np.ndarray]) -> Any:
        import torch

        t, indices, views = part
        tensors = collate(self.units[t], indices, views[indices], self.pad_id, self.trainer.ctx.device)
        logits = output_rows(self.task_views[t], tensors)
        return torch.nn.functional.cross_entropy(logits.float(), tensors.targets, ignore_index=-100)

    def record(self, batch: int) -> dict[str, Any]:
        return {"task": self.names[batch], "units": len(self.current[1])}

    def counts(self, batch: int) -> dict[str, int]:
        t, indices, views = self.current
        return {"domain_units": int(views[indices].sum()), "seen_units": len(indices), f"steps:{self.names[t]}": 1}


def train_multitask(
    model: Any,
    names: Sequence[str],
    units: Sequence[Sequence[Unit]],
    config: MultitaskSettings,
    ctx: Any,
    *,
    pad_id: int,
    hooks: TrainingHooks = NO_HOOKS,
) -> MultitaskResult:
    """Train ``model`` (a :class:`~greenadapt.modeling.pals.model.MultiTaskModel`) in place on every task."""
    sizes = [len(u) for u in units]
    if min(sizes, default=0) < 1:
        raise UsageError("every task needs at least one training example")
    per_epoch, total = plan(sizes, config)
    model.to(ctx.device)
    if config.freeze_base:
        kept = model.freeze_base()
        log.info("--freeze-base: the shared encoder is frozen except %d layer-norm tensors", len(kept))
    trainer = Trainer(model, config, ctx, total_steps=total)
    task = MultitaskTask(trainer, model, names, units, config, pad_id=pad_id)
    run = run_training(trainer, task, hooks)
    model.eval()
    seen = run.counts.get("seen_units", 0)
    return MultitaskResult(
        steps=run.steps,
        epochs_run=run.epochs_run,
        steps_per_epoch=per_epoch,
        task_steps={name: run.counts.get(f"steps:{name}", 0) for name in names},
        best_epoch=run.best_epoch,
        best_score=run.best_score,
        dev_history=run.dev_history,
        seconds=run.seconds,
        domain_fraction=run.counts.get("domain_units", 0) / seen if seen else 0.0,
        trainable_parameters=sum(p.numel() for p in trainer.trainable),
    )


__all__ = ["MultitaskResult", "MultitaskTask", "TaskStream", "plan", "train_multitask"]
