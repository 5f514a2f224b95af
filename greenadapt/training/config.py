"""The knobs every training loop shares, and the plan they make of a run (steps per epoch, total)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from greenadapt.defaults import DEFAULT_SEED, check_seed
from greenadapt.errors import UsageError

# Options that change how fast a run goes, not what it computes: no stage records them, so changing
# one never makes an output out of date.
SPEED_ONLY = ("eval_batch_size", "compile")


@dataclass(frozen=True)
class TrainingConfig:
    """One optimizer step's global batch, the schedule, precision and seed: the same meaning in every command.

    ``batch_size`` is the *global* batch of one optimizer step: under
    ``torchrun`` with W processes and ``grad_accum`` A it is cut into W × A
    micro-batches (:meth:`greenadapt.training.trainer.Trainer.my_parts`).
    """

    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 5e-5
    epochs: int = 3
    max_steps: int | None = None
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = DEFAULT_SEED
    train_embeddings: str = "all"  # all | new | none
    precision: str = "auto"  # auto | fp32 | bf16 | fp16
    eval_batch_size: int = 64
    compile: bool = False  # torch.compile the training forward and backward (docs/benchmarks.md: where it pays)

    def recorded(self) -> dict[str, Any]:
        """The options a stage's manifest records, and its fingerprint hashes: all but the speed-only ones."""
        return {k: v for k, v in asdict(self).items() if k not in SPEED_ONLY}

    def check_schedule(self) -> None:
        """The learning rate, warm-up, weight decay and step limit every loop checks before its first expensive step."""
        for option, value in (("--lr", self.lr), ("--warmup", self.warmup), ("--weight-decay", self.weight_decay),
                              ("--max-grad-norm", self.max_grad_norm)):
            if not math.isfinite(value):
                raise UsageError(f"{option} must be a finite number, not {value}")
        check_seed(self.seed)
        if self.max_steps is not None and self.max_steps < 1:
            raise UsageError("--max-steps must be at least 1")
        if self.lr <= 0 or not 0 <= self.warmup < 1:
            raise UsageError("--lr must be positive and --warmup a fraction below 1")
        if self.weight_decay < 0:
            raise UsageError(f"--weight-decay must be 0 or more, not {self.weight_decay}")
        if self.lr * self.weight_decay >= 1:
            # AdamW multiplies every weight by (1 - lr x decay) each step: at 1 or more that zeroes or flips them.
            raise UsageError(
                f"--lr {self.lr:g} × --weight-decay {self.weight_decay:g} is {self.lr * self.weight_decay:g}: AdamW's decay "
                "would zero or flip every weight at each step",
                hint="their product must be below 1 (typical: --lr 5e-5, --weight-decay 0.01)",
            )

    def plan(self, n_examples: int) -> tuple[int, int]:
        """(steps per epoch, total steps) for ``n_examples`` training examples."""
        per_epoch = max(1, math.ceil(n_examples / self.batch_size))
        total = self.max_steps if self.max_steps is not None else per_epoch * self.epochs
        return per_epoch, max(1, total)
