"""Resuming a training loop: where it stood (:class:`Position`) and what its newest checkpoint holds.

:mod:`greenadapt.training.runtime` writes a checkpoint folder of these files; :func:`load_checkpoint` puts one back
into the trainer, the task and the random generators.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from greenadapt.errors import StageError
from greenadapt.training.checkpoint import Checkpointing, matching_checkpoint, restore_rng_states

if TYPE_CHECKING:
    from greenadapt.training.trainer import Trainer

log = logging.getLogger(__name__)


class Resumable(Protocol):
    """What a checkpoint restores of a training task (:class:`greenadapt.training.runtime.TrainingTask`) besides the trainer."""

    def load_weights(self, state: dict[str, Any]) -> None: ...

    def load_extra_state(self, state: dict[str, Any]) -> None: ...

WEIGHTS_FILE, BEST_FILE, TENSORS_FILE = "model.safetensors", "best.safetensors", "optimizer.pt"
STATE_FILE, LOG_FILE = "state.json", "train_log.jsonl"


# What a checkpoint's position may hold: a step, epoch or batch count, and the seconds trained (ten years).
MAX_COUNT = 1 << 40
MAX_SECONDS = 3.2e8


@dataclass
class Position:
    """Where training stands: what a resumed run continues from."""

    step: int = 0
    epoch: int = 0
    batch: int = 0  # index, in this epoch's batch list, of the next batch to train on
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        # Flat, as checkpoints of earlier versions held it: they stay resumable.
        return {"step": self.step, "epoch": self.epoch, "batch": self.batch, "seconds": self.seconds, **self.counts}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Position:
        rest = {k: v for k, v in data.items() if k not in ("step", "epoch", "batch", "seconds")}
        counts = [data["step"], data["epoch"], data["batch"]]
        if not all(type(n) is int and 0 <= n < MAX_COUNT for n in counts):
            raise ValueError(f"position's step, epoch and batch are not three counts in [0, 2**40) (step {str(counts[0])[:20]})")
        seconds = data["seconds"]
        if type(seconds) not in (int, float) or not 0 <= seconds < MAX_SECONDS:
            raise ValueError(f"position.seconds {str(seconds)[:40]} is not a duration in [0, {MAX_SECONDS:g}) s")
        return cls(counts[0], counts[1], counts[2], float(seconds), rest)


@dataclass
class Restored:
    """What a checkpoint holds for the loop: where it stands, the dev record so far, the best weights, whether it had ended."""

    position: Position
    result: dict[str, Any]
    best_state: dict[str, Any] | None
    complete: bool
    spent: dict[str, Any] | None = None  # what the run had cost up to this checkpoint (CostMeter.spent)


def load_checkpoint(checkpoint: Checkpointing, trainer: Trainer, task: Resumable, log_path: Path | None) -> Restored | None:
    """Put the newest checkpoint's state into ``trainer``, ``task`` and the random generators; None when there is none."""
    import pickle
    import warnings

    import torch

    from greenadapt.artifacts.files import read_own_text
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = matching_checkpoint(checkpoint)
    if path is None:
        return None
    hint = f"delete {path.parent} to start over"
    seed = trainer.config.seed
    try:
        state = json.loads(read_own_text(path / STATE_FILE))
        if not isinstance(state, dict):
            raise TypeError(f"{STATE_FILE} is not a JSON object")
        if state.get("seed", seed) != seed:
            raise StageError(f"this checkpoint is of seed {state.get('seed')}, not {seed}", path=path, hint=hint)
        # weights_only: a checkpoint folder is an input like any other and must not run code.
        with warnings.catch_warnings():  # torch's notes on a file's pickle protocol: the refusal below says what matters
            warnings.simplefilter("ignore", UserWarning)
            tensors = torch.load(path / TENSORS_FILE, map_location="cpu", weights_only=True)
        task.load_weights(load_file(str(path / WEIGHTS_FILE), device=str(trainer.ctx.device)))
        best = load_file(str(path / BEST_FILE)) if (path / BEST_FILE).is_file() else None
        position = Position.from_json(state["position"])
        trainer.load_state(tensors, state)
        task.load_extra_state(state)
        restore_rng_states(tensors, state, trainer.ctx, path, seed=seed, step=position.step)
        result = state.get("result") or {"best_epoch": None, "best_score": None, "dev_history": []}
    except pickle.UnpicklingError:
        # weights_only refused an object that is not a tensor: nothing of it ran, and no advice to load it otherwise
        raise StageError(f"unreadable checkpoint: {TENSORS_FILE} holds objects other than tensors (refused, not run)",
                         path=path, hint=hint) from None
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, OverflowError, RecursionError, SafetensorError) as exc:
        # UnpicklingError: weights_only refused an object; RuntimeError: tensors that do not fit this model.
        raise StageError(f"unreadable checkpoint: {' '.join(str(exc).split())[:300]}", path=path, hint=hint) from None
    if log_path is not None and (path / LOG_FILE).is_file():
        shutil.copyfile(path / LOG_FILE, log_path)
    log.info("resuming from %s: step %d, epoch %d", path, position.step, position.epoch + 1)
    spent = state.get("spent")
    return Restored(position, result, best, bool(state.get("complete")), spent if isinstance(spent, dict) else None)
