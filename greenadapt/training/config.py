"""What every training loop reads of a command's settings, and the plan they make of a run (steps per epoch, total).

A training command's settings class (``FinetuneSettings``, ``MultitaskSettings``, ...) takes :class:`TrainingRun`
beside its option groups, and the loop, the trainer and the optimizers receive those settings as they are.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, TypeVar

from greenadapt.errors import UsageError

MAX_PAD_MULTIPLE = 512  # the position table of a BERT: a wider multiple pads every batch to it
DROPOUT_MASKS = ("fast", "torch")  # --dropout-masks: greenadapt.training.cpu_kernels


class LoopSettings(Protocol):
    """What the training runtime, the trainer and the optimizers read of a command's settings, which they receive as
    they are (TrainingRun and the command's option groups, the task's defaults filled in). mypy checks every read
    against these members, and every training command's settings class against the whole (a task's own reads go
    through its own settings class: ``Trainer[FinetuneSettings]``, ``Trainer[PretrainSettings]``)."""

    @property
    def seed(self) -> int: ...
    @property
    def batch_size(self) -> int | None: ...  # None until the task's defaults are filled in: read it through filled()
    @property
    def lr(self) -> float | None: ...
    @property
    def warmup(self) -> float: ...
    @property
    def weight_decay(self) -> float: ...
    @property
    def precision(self) -> str: ...
    @property
    def grad_accum(self) -> int: ...
    @property
    def max_grad_norm(self) -> float: ...
    @property
    def train_embeddings(self) -> str: ...
    @property
    def eval_every(self) -> int | None: ...
    @property
    def early_stopping(self) -> int | None: ...
    @property
    def pad_to_multiple(self) -> int: ...
    @property
    def cuda_graphs(self) -> bool: ...
    @property
    def adamw(self) -> str: ...
    @property
    def dropout_masks(self) -> str: ...
    def compile_mode(self) -> str | None: ...
    def plan(self, n_examples: int) -> tuple[int, int]: ...


T = TypeVar("T")


def filled(value: T | None) -> T:
    """A recipe value the task's defaults filled in before training (``batch_size``, ``lr``): None here is a bug."""
    if value is None:
        raise AssertionError("a training option reached the loop without the task's default filled in")
    return value


class TrainingRun:
    """What a training loop reads of any command's settings. A command without one of these options trains at the value
    here, and its fingerprint records that value (the runs made before the option existed stay up to date)."""

    grad_accum = 1
    max_grad_norm = 1.0
    train_embeddings = "all"
    eval_every: int | None = None
    early_stopping: int | None = None
    pad_to_multiple = 1
    cuda_graphs = False
    agreement = 0.0
    both_views: bool | None = None  # finetune resolves it by the model (resolve_both_views); elsewhere one view a step
    adamw = "fused"
    dropout_masks = "fast"
    # In every training fingerprint, whether the command has the option or not.
    ALWAYS_RECORDED = ("grad_accum", "max_grad_norm", "train_embeddings", "eval_every", "early_stopping")

    def recorded(self) -> dict[str, Any]:
        """What a training stage's fingerprint holds of the recipe: the options marked for it (``fingerprint=`` in their
        declaration), and :attr:`ALWAYS_RECORDED`."""
        settings: Any = self  # a Settings class's, which takes this mixin
        recorded = {name: getattr(self, name) for name in self.ALWAYS_RECORDED} | settings.fingerprinted()
        if self.agreement or not self.both_views:  # agreement implies both views; off is the recipe before the option
            recorded.pop("both_views", None)
        return recorded

    @property
    def two_passes(self) -> bool:
        """Every unit in both views each step (with a one-tokenizer model: its one view twice, dropout apart)."""
        return bool(self.agreement) or bool(self.both_views)

    @property
    def views_per_example(self) -> int:
        """Forward passes a training example costs per step (agreement or --both-views: both views, every step)."""
        return 2 if self.two_passes else 1

    def cost_figures(self) -> dict[str, Any] | None:
        """What the cost block says beside the measured figures: what the time bought (both views: twice the passes)."""
        return {"forward_passes_per_example": self.views_per_example} if self.two_passes else None

    def compile_mode(self) -> str | None:
        """torch.compile's mode for this run (None: not compiled)."""
        settings: Any = self  # every training command declares --compile (CompileSettings)
        if self.cuda_graphs:
            return "reduce-overhead"
        return "default" if settings.compile else None

    def plan(self, n_examples: int) -> tuple[int, int]:
        """(steps per epoch, total steps) for ``n_examples`` training examples."""
        settings: Any = self  # each command declares these in its own groups
        per_epoch = max(1, math.ceil(n_examples / settings.batch_size))
        total = settings.max_steps if settings.max_steps is not None else per_epoch * settings.epochs
        return per_epoch, max(1, total)


def _device_kind(device_spec: str | None) -> str:
    kind = (device_spec or "auto").split(":")[0]
    if kind == "auto":
        from greenadapt.machine.devices import cuda_available

        kind = "cuda" if cuda_available() else "cpu"
    return kind


def check_compile(compile_: bool, device_spec: str | None) -> None:
    """``--compile`` on a CPU costs minutes and gives nothing back (measured: docs/benchmarks.md, "torch.compile on
    the CPU"): refused there in one line, before any data is read; a CUDA run keeps it."""
    if compile_ and _device_kind(device_spec) == "cpu":
        raise UsageError("--compile makes CPU training slower: compiled MiniLM steps ran at 0.89x the eager steps/s after 57 s "
                         "of compiling (docs/benchmarks.md, \"torch.compile on the CPU\")",
                         hint="leave it out on a CPU; it is for CUDA GPUs")


def check_cuda_graphs(cuda_graphs: bool, device_spec: str | None) -> None:
    """``--cuda-graphs`` needs a CUDA device (checked before any data is read)."""
    if not cuda_graphs:
        return
    kind = _device_kind(device_spec)
    if kind != "cuda":
        raise UsageError(f"--cuda-graphs needs a CUDA device; this run is on the {kind.upper()}", hint="leave it out here")


def check_decay(lr: float, weight_decay: float) -> None:
    """AdamW multiplies every weight by (1 - lr x decay) each step: at 1 or more that zeroes or flips them."""
    if lr * weight_decay >= 1:
        raise UsageError(
            f"--lr {lr:g} × --weight-decay {weight_decay:g} is {lr * weight_decay:g}: AdamW's decay would zero or flip every weight at "
            f"each step",
            hint="their product must be below 1 (typical: --lr 5e-5, --weight-decay 0.01)",
        )
