"""Fine-tuning as a task of the training runtime: mixed tokenizers, length-grouped batches, data parallel.

The loop, the optimizer step, checkpoints and SIGTERM are
:mod:`greenadapt.training.runtime`'s (its docstring has the batch arithmetic).
What is fine-tuning's own: each unit (a sentence chunk or a text) is fed
through both tokenizers each step (``two_passes``: the default with two
tokenizers, :func:`resolve_both_views`) or through the domain tokenizer in an
epoch with probability ``mix`` (:func:`~greenadapt.compute.batches.choose_views`), batches are
length-grouped, the loss of a micro-batch is its summed cross-entropy over
labelled rows divided by the labelled rows of the whole global batch, and
the added embedding rows can be trained row-wise (``--train-embeddings``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR
from greenadapt.errors import UsageError
from greenadapt.modeling.units import VIEW_DOMAIN, VIEW_GENERAL, Unit
from greenadapt.compute.batches import choose_views, collate, length_grouped_batches, output_rows, padded_width
from greenadapt.training.config import LoopSettings, filled
from greenadapt.compute.distributed import DistContext
from greenadapt.training.runtime import NO_HOOKS, TrainingHooks, TrainingTask, run_training
from greenadapt.training.trainer import Trainer

log = logging.getLogger(__name__)


# The paper's recipe: each training example is read with the domain tokenizer T̂ with this probability.
DEFAULT_MIX = 0.5


class FinetuneLoopSettings(LoopSettings, Protocol):
    """What finetune's loop reads besides every loop's (``FinetuneSettings``: NER, classification and QA training)."""

    @property
    def mix(self) -> float | None: ...
    @property
    def agreement(self) -> float: ...
    @property
    def label_smoothing(self) -> float: ...
    @property
    def two_passes(self) -> bool: ...


def symmetric_kl(logits_a: Any, logits_b: Any) -> Any:
    """Per row, (KL(p_a || p_b) + KL(p_b || p_a)) / 2 of the label distributions of two views' logits (R-Drop's term)."""
    import torch

    log_a, log_b = torch.log_softmax(logits_a.float(), dim=-1), torch.log_softmax(logits_b.float(), dim=-1)
    return 0.5 * ((log_a.exp() * (log_a - log_b)).sum(-1) + (log_b.exp() * (log_b - log_a)).sum(-1))


def resolve_both_views(requested: bool | None, has_domain: bool, *, mix: float | None, agreement: float) -> bool:
    """Whether a run shows every example in both views each step: ``requested``, else on for a model with two tokenizers
    (the CPU study's first look, docs/study.md: it beat the 50/50 mixture on four NER sets), unless the run asks for what
    only one view a step has (a mixture other than the default) or trains views that agree (which shows both anyway)."""
    if requested is not None:
        return requested
    return has_domain and not agreement and mix in (None, DEFAULT_MIX)


def resolve_mix(requested: float | None, has_domain: bool, model: Path, *, two_passes: bool = False) -> float:
    """The mixture a run trains with: ``requested``, else :data:`DEFAULT_MIX` with a domain tokenizer and 0 without.
    With ``two_passes`` (--both-views, --agreement) every example is shown in both views: a mixture other than the
    default would do nothing, so it is refused rather than recorded as if it had."""
    default = DEFAULT_MIX if has_domain else 0.0
    if two_passes and requested is not None and requested != default:
        raise UsageError(f"--mix {requested:g} does nothing with --both-views or --agreement: every example is shown in both views",
                         hint="leave --mix out")
    mix = requested if requested is not None else default
    if mix > 0 and not has_domain:
        raise UsageError(
            f"--mix {mix:g} needs a domain tokenizer, but {model} has only one tokenizer (no {GENERAL_TOKENIZER_DIR}/)",
            hint="pass a model folder written by `greenadapt expand`, or --mix 0",
        )
    return mix


# --------------------------------------------------------------------------
# The task


@dataclass
class TrainResult:
    steps: int
    epochs_run: int
    best_epoch: int | None
    best_score: float | None
    dev_history: list[dict[str, Any]] = field(default_factory=list)
    best_step: int | None = None
    stopped_early: bool = False
    seconds: float = 0.0
    domain_fraction: float = 0.0
    warnings: list[str] = field(default_factory=list)  # from greenadapt.compute.health


class FinetuneTask(TrainingTask):
    """Token or sequence classification on pre-tokenized units, each in the view its epoch drew."""

    def __init__(self, trainer: Trainer[FinetuneLoopSettings], units: Sequence[Unit], mix: float, *, pad_id: int) -> None:
        self.trainer, self.units, self.mix, self.pad_id = trainer, units, mix, pad_id
        seed = trainer.config.seed
        self.label, self.where = f"fine-tuning (seed {seed})", f" (seed {seed})"
        self.views = np.zeros(0, np.int64)
        self.lengths = np.zeros(0, np.int64)
        self.n_targets = 1
        # --pad-to-multiple rounds widths up, never past the run's longest sequence under any view
        self.widest = max((len(ids) for unit in units for ids in unit.ids), default=1)

    @property
    def agreement(self) -> float:
        return float(self.trainer.config.agreement)

    @property
    def two_passes(self) -> bool:
        return bool(self.trainer.config.two_passes)

    @property
    def pass_views(self) -> tuple[int, int]:
        """The views of a unit's two passes: both tokenizers, or a one-tokenizer model's one view twice (R-Drop)."""
        return (VIEW_GENERAL, VIEW_DOMAIN) if len(self.units[0].ids) > VIEW_DOMAIN else (VIEW_GENERAL, VIEW_GENERAL)

    def epoch_batches(self, epoch: int, step: int) -> list[np.ndarray]:
        config = self.trainer.config
        if self.two_passes:  # every unit in both views: batches grouped by the longer of the two
            self.views = np.full(len(self.units), self.pass_views[1], dtype=np.int64)
            self.lengths = np.array([max(len(ids) for ids in u.ids) for u in self.units])
        else:
            self.views = choose_views(len(self.units), self.mix, config.seed, epoch)
            self.lengths = np.array([len(u.ids[v]) for u, v in zip(self.units, self.views, strict=True)])
        return length_grouped_batches(self.lengths, filled(config.batch_size), config.seed, epoch)

    def parts(self, trainer: Trainer[FinetuneLoopSettings], batch: np.ndarray) -> list[np.ndarray] | None:
        parts = super().parts(trainer, batch)
        if parts is not None:
            units = self.units
            self.n_targets = max(1, int(sum(int((units[i].targets >= 0).sum()) for i in batch)))
            trainer.load_rows([units[i].ids[VIEW_DOMAIN] for i in batch if self.views[i] == VIEW_DOMAIN])  # (agreement: every unit)
        return parts

    def cross_entropy(self, logits: Any, targets: Any) -> Any:
        """The summed cross-entropy of the labelled rows (both losses' term)."""
        import torch

        return torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum", ignore_index=-100,
                                                 label_smoothing=self.trainer.config.label_smoothing)

    def loss(self, part: np.ndarray) -> Any:
        trainer = self.trainer
        if self.two_passes:
            return self._two_pass_loss(part)
        longest = int(self.lengths[part].max())
        width = padded_width(longest, trainer.config.pad_to_multiple, self.widest)
        tensors = collate(self.units, part, self.views[part], self.pad_id, trainer.ctx.device, width)
        logits = output_rows(trainer.module, tensors)
        return self.cross_entropy(logits, tensors.targets) * (trainer.ctx.world / self.n_targets)  # see the runtime's docstring

    def _two_pass_loss(self, part: np.ndarray) -> Any:
        """Both views of every unit: the mean of their cross-entropies plus ``agreement`` x their symmetric KL, row by
        row (the rows of a unit are its words under either view, in the same order). The two passes are separate
        forward calls, so their dropout masks differ even where both views are the same pieces (R-Drop)."""
        trainer = self.trainer
        logits = []
        for view in self.pass_views:
            longest = max(len(self.units[i].ids[view]) for i in part)
            width = padded_width(longest, trainer.config.pad_to_multiple, self.widest)
            tensors = collate(self.units, part, np.full(len(part), view), self.pad_id, trainer.ctx.device, width)
            logits.append(output_rows(trainer.module, tensors))
        targets = tensors.targets
        loss = sum(self.cross_entropy(rows, targets) for rows in logits) / 2
        if self.agreement:
            labelled = targets >= 0
            loss = loss + self.agreement * symmetric_kl(logits[0][labelled], logits[1][labelled]).sum()
        return loss * (trainer.ctx.world / self.n_targets)

    def record(self, batch: np.ndarray) -> dict[str, Any]:
        return {"units": len(batch), "domain_units": int(self.views[batch].sum()), "wordpieces": int(self.lengths[batch].sum())}

    def counts(self, batch: np.ndarray) -> dict[str, int]:
        # with two passes each unit is seen twice, once in each view: the domain share of the passes is one half
        # (none on a one-tokenizer model, whose views are both the general one)
        return {"domain_units": int(self.views[batch].sum()), "seen_units": len(batch) * (2 if self.two_passes else 1)}

    def weights(self) -> dict[str, Any]:
        return dict(self.trainer.model.state_dict())

    def load_weights(self, state: dict[str, Any]) -> None:
        self.trainer.model.load_state_dict(state)


Settings_ = TypeVar("Settings_", bound=LoopSettings)


def prepare_trainer(
    model: Any, config: Settings_, ctx: DistContext, *, n_examples: int, longest: int, n_base_rows: int
) -> Trainer[Settings_]:
    """A :class:`Trainer` for a classification or QA model whose added rows train per ``config.train_embeddings``."""
    from greenadapt.modeling import embeddings

    model.to(ctx.device)
    # A G-MAP model's word embeddings are its domain model's; the general model keeps its own.
    split = embeddings.install(
        getattr(model, "domain", model), n_base=n_base_rows, mode=config.train_embeddings, capacity=filled(config.batch_size) * longest
    )
    # broadcast_buffers=False: the added-row table is a buffer; every process updates it identically.
    return Trainer(model, config, ctx, total_steps=config.plan(n_examples)[1], split=split, broadcast_buffers=False)


def finish_model(model: Any) -> None:
    """Back to a plain, saveable transformers model in eval mode (the row-wise trained rows merged back)."""
    from greenadapt.modeling import embeddings
    from greenadapt.training.cpu_kernels import plain_modules

    embeddings.merge_back(getattr(model, "domain", model))
    plain_modules(model)
    model.eval()


def train(
    model: Any,
    units: Sequence[Unit],
    config: FinetuneLoopSettings,
    ctx: DistContext,
    *,
    pad_id: int,
    n_base_rows: int,
    has_domain: bool,
    hooks: TrainingHooks = NO_HOOKS,
) -> TrainResult:
    """Fine-tune ``model`` in place; with ``hooks.evaluate`` keep the best epoch's weights (:func:`run_training`)."""
    mix = config.mix or 0.0
    if mix > 0 and not has_domain:
        raise UsageError("--mix > 0 needs a model folder with a domain tokenizer")
    longest = max(len(ids) for u in units for ids in u.ids)
    trainer = prepare_trainer(model, config, ctx, n_examples=len(units), longest=longest, n_base_rows=n_base_rows)
    task = FinetuneTask(trainer, units, mix, pad_id=pad_id)
    run = run_training(trainer, task, hooks)
    finish_model(model)
    seen = run.counts.get("seen_units", 0)
    return TrainResult(
        steps=run.steps,
        epochs_run=run.epochs_run,
        best_epoch=run.best_epoch,
        best_score=run.best_score,
        dev_history=run.dev_history,
        best_step=run.best_step,
        stopped_early=run.stopped_early,
        seconds=run.seconds,
        domain_fraction=run.counts.get("domain_units", 0) / seen if seen else 0.0,
        warnings=run.warnings,
    )


__all__ = [
    "VIEW_DOMAIN",
    "VIEW_GENERAL",
    "FinetuneTask",
    "TrainResult",
    "finish_model",
    "prepare_trainer",
    "train",
]
