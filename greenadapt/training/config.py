"""The knobs every training loop shares, and the plan they make of a run (steps per epoch, total)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from greenadapt.defaults import DEFAULT_SEED, check_seed
from greenadapt.errors import UsageError

MAX_PAD_MULTIPLE = 512  # the position table of a BERT: a wider multiple pads every batch to it

# Options that change how fast a run goes, not what it computes: no stage records them, so changing
# one never makes an output out of date.
SPEED_ONLY = ("eval_batch_size", "compile", "pad_to_multiple", "cuda_graphs")


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
    # Batch widths rounded up to a multiple of this: a run sees a handful of shapes, so a compiled model
    # recompiles (and CUDA graphs are captured) a handful of times; padding is masked, so only rounding changes.
    pad_to_multiple: int = 1
    cuda_graphs: bool = False
    # With a dev file: also score it every N optimizer steps (not only at each epoch's end), and stop once N
    # scorings in a row did not beat the best (the best scoring's weights are kept either way).
    eval_every: int | None = None
    early_stopping: int | None = None  # compile with CUDA graphs (torch.compile's reduce-overhead): past a GPU's launch bound

    def check_speed(self, device_spec: str | None) -> None:
        """The speed-only options, before any data is read."""
        if not 1 <= self.pad_to_multiple <= MAX_PAD_MULTIPLE:
            raise UsageError(f"--pad-to-multiple must be from 1 to {MAX_PAD_MULTIPLE}, not {self.pad_to_multiple}",
                             hint="e.g. 32: widths 32, 64, 96, 128")
        if self.cuda_graphs:
            kind = (device_spec or "auto").split(":")[0]
            if kind == "auto":
                import torch

                kind = "cuda" if torch.cuda.is_available() else "cpu"
            if kind != "cuda":
                raise UsageError(f"--cuda-graphs needs a CUDA device; this run is on the {kind.upper()}", hint="leave it out here")

    def compile_mode(self) -> str | None:
        """torch.compile's mode for this run (None: not compiled)."""
        if self.cuda_graphs:
            return "reduce-overhead"
        return "default" if self.compile else None

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
        for flag, count in (("--eval-every", self.eval_every), ("--early-stopping", self.early_stopping)):
            if count is not None and count < 1:
                raise UsageError(f"{flag} must be at least 1, not {count}")
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
