"""The multi-task loop: one task per step, its batch through its own adapter and head.

Each step draws a task (``sampling``), then the next batch of that task from
a per-task stream that reshuffles at the end of every pass over the task's
data; with two tokenizers, each unit's view is drawn afresh per pass
(:func:`greenadapt.finetune.train.choose_views`, probability ``mix`` of the
domain view). Batches, the output rows, the optimizers (AdamW, linear
warm-up and decay) and the autocast choice are ``greenadapt.finetune``'s.
The loss of a step is the mean cross-entropy over the batch's labelled rows.
An "epoch" is ``steps_per_epoch`` steps (default: the number of batches in
one pass over all tasks' training data); with ``evaluate``, the weights of
the epoch with the best average dev score are kept.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from greenadapt.errors import UsageError
from greenadapt.finetune.tokenize import Unit
from greenadapt.finetune.train import TrainConfig, build_optimizers, choose_views, collate, output_rows
from greenadapt.training.distributed import autocast_dtype, grad_scaler
from greenadapt.multitask.sampling import alpha, sample_tasks
from greenadapt.progress import NULL_PROGRESS, Progress
from greenadapt.training.step import optimizer_step

log = logging.getLogger(__name__)

_STREAM = 0x6D7462


@dataclass(frozen=True)
class MultitaskConfig:
    training: TrainConfig = field(default_factory=TrainConfig)
    sampling: str = "annealed"
    steps_per_epoch: int | None = None
    freeze_base: bool = False


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
            self.order = np.random.default_rng([self.seed, self.passes, _STREAM]).permutation(self.n)
            self.views = choose_views(self.n, self.mix, self.seed, self.passes)
            self.position = 0
        batch = self.order[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return batch, self.views


def plan(sizes: Sequence[int], config: MultitaskConfig) -> tuple[int, int]:
    """(steps per epoch, total steps)."""
    training = config.training
    per_epoch = config.steps_per_epoch or max(1, math.ceil(sum(sizes) / training.batch_size))
    total = training.max_steps if training.max_steps is not None else per_epoch * training.epochs
    return per_epoch, max(1, total)


def train_multitask(
    model: Any,
    names: Sequence[str],
    units: Sequence[Sequence[Unit]],
    config: MultitaskConfig,
    ctx: Any,
    *,
    pad_id: int,
    evaluate: Callable[[Any], tuple[float, dict[str, Any]]] | None = None,
    log_path: Path | None = None,
    progress: Progress = NULL_PROGRESS,
) -> MultitaskResult:
    """Train ``model`` (a :class:`~greenadapt.pals.model.MultiTaskModel`) in place on every task."""
    import torch

    training = config.training
    mix = training.mix or 0.0
    sizes = [len(u) for u in units]
    if min(sizes, default=0) < 1:
        raise UsageError("every task needs at least one training example")
    per_epoch, total = plan(sizes, config)
    epochs = math.ceil(total / per_epoch)
    torch.manual_seed(training.seed)
    model.to(ctx.device)
    if config.freeze_base:
        kept = model.freeze_base()
        log.info("--freeze-base: the shared encoder is frozen except %d layer-norm tensors", len(kept))
    model.train()
    optimizers, schedulers = build_optimizers(model, None, training, total)
    trainable = [p for p in model.parameters() if p.requires_grad]
    dtype = autocast_dtype(training.precision, ctx.device)
    scaler = grad_scaler(dtype, ctx.device)
    views = [model.task_view(name) for name in names]
    streams = [TaskStream(n, training.batch_size, mix, training.seed + 1009 * i) for i, n in enumerate(sizes)]
    result = MultitaskResult(steps_per_epoch=per_epoch, task_steps=dict.fromkeys(names, 0))
    result.trainable_parameters = sum(p.numel() for p in trainable)
    best_state: dict[str, Any] | None = None
    domain_units = seen_units = 0
    started = time.perf_counter()
    handle = open(log_path, "w", encoding="utf-8") if log_path is not None else None
    progress.start("multi-task fine-tuning", total=total, unit="steps")
    try:
        step = 0
        for epoch in range(1, epochs + 1):
            order = sample_tasks(sizes, config.sampling, steps=min(per_epoch, total - step), epoch=epoch, epochs=epochs, seed=training.seed)
            log.info("epoch %d: sampling %s (alpha %.2f)", epoch, config.sampling, alpha(config.sampling, epoch, epochs))
            for t in order:
                indices, task_views = streams[t].next()
                batch = collate(units[t], indices, task_views[indices], pad_id, ctx.device)
                with torch.autocast(ctx.device.type, dtype=dtype, enabled=dtype is not None):
                    logits = output_rows(views[t], batch)
                loss = torch.nn.functional.cross_entropy(logits.float(), batch.targets, ignore_index=-100)
                (scaler.scale(loss) if scaler is not None else loss).backward()
                grad_norm = optimizer_step(optimizers, schedulers, trainable, max_grad_norm=training.max_grad_norm, scaler=scaler)
                value = float(loss.detach())
                if not math.isfinite(value) and scaler is None:
                    raise UsageError(f"the training loss became {value} at step {step + 1}", hint="lower --lr")
                step += 1
                result.task_steps[names[t]] += 1
                domain_units += int(task_views[indices].sum())
                seen_units += len(indices)
                if handle is not None:
                    record = {"step": step, "epoch": epoch, "task": names[t], "loss": round(value, 6), "units": len(indices),
                              "lr": float(schedulers[0].get_last_lr()[0]),
                              "grad_norm": None if grad_norm is None else round(grad_norm, 6),
                              "seconds": round(time.perf_counter() - started, 3)}
                    handle.write(json.dumps(record) + "\n")
                progress.update(step, task=names[t], loss=f"{value:.4f}")
            result.epochs_run = epoch
            if evaluate is None:
                continue
            score, details = evaluate(model)
            model.train()
            result.dev_history.append({"epoch": epoch, "step": step, "score": score, **details})
            if handle is not None:
                handle.write(json.dumps({"event": "dev", "epoch": epoch, "step": step, "score": score}) + "\n")
            if result.best_score is None or score > result.best_score:
                result.best_score, result.best_epoch = score, epoch
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            log.info("epoch %d: average dev score %.4f (best %.4f, epoch %d)", epoch, score, result.best_score, result.best_epoch)
        result.steps = step
    finally:
        progress.finish()
        if handle is not None:
            handle.close()
    if best_state is not None and result.best_epoch != result.epochs_run:
        model.load_state_dict(best_state)
        log.info("restored the weights of epoch %d (best average on dev)", result.best_epoch)
    model.eval()
    result.seconds = time.perf_counter() - started
    result.domain_fraction = domain_units / seen_units if seen_units else 0.0
    return result


__all__ = ["MultitaskConfig", "MultitaskResult", "TaskStream", "plan", "train_multitask"]
