"""The masked-LM training loop: AdamW, warm-up + linear decay, accumulation, autocast, DDP, checkpoints.

Batch arithmetic is finetune's (:mod:`greenadapt.training.finetuning`):
``batch_size`` is the global batch of one optimizer step; under
``torchrun`` with W processes and ``grad_accum`` A it is cut into W × A
micro-batches and process r runs micro-batches r·A … r·A + A − 1, so every
process reads a disjoint shard of the step's sequences. Each micro-batch's
summed loss is divided by the number of masked targets in the whole global
batch (all-reduced), times W, which DDP's gradient averaging divides out
again: the gradient is that of the mean loss over the global batch whatever
W and A are.

The MLM head runs only on the masked positions (about 15% of them), not on
every position as ``BertForMaskedLM.forward`` does: the vocabulary
projection is the largest matrix product of a small BERT, so this is most
of the speed-up over a plain transformers loop (bench/bench_pretrain.py).

``--train-embeddings``: ``all`` trains every row; ``none`` freezes the word
embeddings (and the decoder tied to them); ``new`` trains only the rows
added by ``greenadapt expand``: after every backward pass the gradient of
the original rows is zeroed, and after every optimizer step they are
copied back (AdamW's decoupled weight decay would otherwise shrink them),
so they stay bit-identical. finetune's row-wise ``SplitWordEmbedding`` is
not used here: the MLM decoder is tied to the embedding matrix and its
softmax touches every row in every step, so there are no untouched rows to
save work on, and splitting the matrix would untie the decoder.

``--head-warmup-steps N``: the first N optimizer steps update the MLM
head's own parameters only (its transform and output bias; the decoder is
tied to the word embeddings and stays as it is), so a head that starts
random (a checkpoint that ships without one, such as a sentence-transformers
encoder) is fitted to the encoder before its gradients reach the encoder:
the linear-probe-then-fine-tune order of Kumar et al. (ICLR 2022). In a
single process the encoder runs without a graph during the warm-up (a
fraction of a full step's cost); under DDP its gradients are computed and
dropped instead, which keeps DDP's reduction unchanged. AdamW skips a
parameter without a gradient altogether (weight decay included), so the
encoder and embeddings stay bit-identical through the warm-up. Steps,
schedule and checkpoints are the same as without it: the phase is a
function of the step number.

Checkpoints (``--save-every``, SIGTERM): the same folder layout and
manifest rules as finetune's (``ckpt-<n>/`` with ``checkpoint.json`` written
last; :func:`greenadapt.training.checkpoint.latest_checkpoint` reads them), with
the weights, optimizer, scheduler, grad-scaler, every process's random
generators (torch, CUDA, Python, NumPy: dropout differs per rank) and the
position (epoch, batch); masking draws depend only on (seed, epoch,
sequence), so a resumed run takes the same steps with the same numbers as
an uninterrupted one, under torchrun too.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from greenadapt.errors import UsageError
from greenadapt.machine.devices import to_device
from greenadapt.runners.pretrain.settings import PretrainSettings
from greenadapt.runners.pretrain.data import EVAL_SEED, IGNORE, Masker, TrainingCorpus, epoch_order, masked_batch
from greenadapt.training.config import filled
from greenadapt.compute.distributed import DistContext, autocast, autocast_dtype
from greenadapt.training.runtime import NO_HOOKS, TrainingHooks, TrainingTask, run_training
from greenadapt.training.trainer import Trainer

log = logging.getLogger(__name__)

_REPORT_SECONDS = 60.0


# --------------------------------------------------------------------------
# The model: encoder (optionally G-MAP-fused) + MLM head on the target rows


def mlm_head(model: Any) -> Any:
    """The MLM head module of a transformers masked-LM model (applied to hidden states), or None if unknown."""
    for name in ("cls", "lm_head", "predictions"):
        head = getattr(model, name, None)
        if head is not None and callable(head):
            return head
    return None


def build_masked_lm(model: Any, gmap: Any = None) -> Any:
    """A module computing the MLM logits of the target rows only; ``gmap`` wraps ``model.base_model``."""
    import torch
    from torch import nn

    class MaskedLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.gmap = gmap
            self.head = mlm_head(model)
            self.encoder_frozen = False  # the head warm-up of a single process: no graph through the encoder

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            if self.head is None:  # an unknown head layout: the model's own forward (logits at every position)
                logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
                return logits.reshape(-1, logits.shape[-1]).index_select(0, rows)
            with torch.no_grad() if self.encoder_frozen else contextlib.nullcontext():
                if self.gmap is not None:
                    # The general model reads the same masked input: the memory must not leak the targets.
                    output = self.gmap(
                        input_ids=input_ids,
                        attention_mask=attention_mask,
                        general_input_ids=input_ids,
                        general_attention_mask=attention_mask,
                    )
                else:
                    output = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask)
            hidden = output[0]
            return self.head(hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows))

        def train(self, mode: bool = True) -> MaskedLM:
            super().train(mode)
            if self.gmap is not None:
                self.gmap.train(mode)  # keeps the frozen general model in eval mode
            return self

    return MaskedLM()


def _tensors(batch: Any, device: Any) -> tuple[Any, Any, Any, Any]:
    labels = batch.labels.reshape(-1)
    rows = np.flatnonzero(labels != IGNORE)  # on the host: a device nonzero() would wait for the GPU
    return (to_device(batch.input_ids, device), to_device(batch.attention_mask, device), to_device(rows, device),
            to_device(labels[rows], device))


# --------------------------------------------------------------------------
# Held-out evaluation


def heldout_loss(
    mlm: Any,
    corpus: TrainingCorpus,
    masker: Masker,
    ctx: DistContext,
    *,
    pad_id: int,
    batch_size: int = 32,
    precision: str = "auto",
) -> dict[str, Any]:
    """Mean masked-LM loss and perplexity on the held-out sequences, masked with :data:`EVAL_SEED`."""
    import torch

    dtype = autocast_dtype(precision, ctx.device)
    indices = corpus.heldout_indices
    mine = indices[ctx.rank :: ctx.world]
    totals = torch.zeros(2, dtype=torch.float64, device=ctx.device)
    was_training = mlm.training
    mlm.eval()
    with torch.no_grad():
        for start in range(0, len(mine), batch_size):
            batch = masked_batch(corpus, mine[start : start + batch_size], masker, seed=EVAL_SEED, epoch=0, pad_id=pad_id)
            input_ids, attention, rows, targets = _tensors(batch, ctx.device)
            with autocast(ctx.device, dtype):
                logits = mlm(input_ids, attention, rows)
            totals[0] += torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum").double()
            totals[1] += targets.numel()
    mlm.train(was_training)
    ctx.all_reduce_sum(totals)
    loss = float(totals[0] / totals[1].clamp(min=1))
    return {
        "loss": round(loss, 6),
        "perplexity": round(math.exp(min(loss, 700.0)), 4),
        "sequences": len(indices),
        "targets": int(totals[1]),
    }


# --------------------------------------------------------------------------
# Training


@dataclass
class PretrainResult:
    steps: int
    epochs: float
    tokens: int
    seconds: float
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    eval_seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        """Training throughput: non-padding tokens per second, evaluation time excluded."""
        training = self.seconds - self.eval_seconds
        return self.tokens / training if training > 0 else 0.0


def freeze_for(mlm: Any, config: PretrainSettings, n_base_rows: int) -> tuple[Any, list[Any]]:
    """Set ``requires_grad`` per ``--train``/``--train-embeddings``; the original rows to hold fixed (or None),
    and the parameters whose gradients are dropped after the head warm-up (``--train new-rows``)."""
    embedding = mlm.model.get_input_embeddings().weight
    if config.train == "new-rows":
        if embedding.shape[0] <= n_base_rows:
            raise UsageError("--train new-rows needs a model with added rows", hint="pass a model folder written by `greenadapt expand`")
        head = [] if mlm.head is None or not config.head_warmup_steps else [p for p in mlm.head.parameters() if p is not embedding]
        keep = {id(embedding)} | {id(p) for p in head}
        for param in mlm.parameters():
            param.requires_grad_(id(param) in keep)
        log.info("--train new-rows: %d added rows train, everything else is frozen%s", embedding.shape[0] - n_base_rows,
                 " (the head trains during its warm-up)" if head else "")
        return embedding.detach()[:n_base_rows].clone(), head
    if config.train_embeddings == "none" or (config.train_embeddings == "new" and embedding.shape[0] <= n_base_rows):
        embedding.requires_grad_(False)
    elif config.train_embeddings == "new":
        embedding.requires_grad_(True)
        log.info("word embeddings: %d original rows frozen, %d added rows trained", n_base_rows, embedding.shape[0] - n_base_rows)
        return embedding.detach()[:n_base_rows].clone(), []
    return None, []


class PretrainTask(TrainingTask):
    """Masked-LM steps over packed sequences; the head warm-up, frozen original rows, held-out evaluations."""

    partial_epoch_ends = False

    def __init__(
        self,
        trainer: Trainer[PretrainSettings],
        config: PretrainSettings,
        corpus: TrainingCorpus,
        masker: Masker,
        *,
        pad_id: int,
        frozen_rows: Any,
        after_warmup_frozen: list[Any],
        evaluate: Callable[[int], dict[str, Any]] | None,
    ) -> None:
        self.trainer, self.corpus, self.masker, self.pad_id = trainer, corpus, masker, pad_id
        self.mlm, self.config = trainer.model, config
        self.label = f"masked-LM training (seed {config.seed})"
        self.embedding = self.mlm.model.get_input_embeddings().weight
        self.n_base = frozen_rows.shape[0] if frozen_rows is not None else 0
        self.frozen_rows, self.after_warmup_frozen, self.evaluate = frozen_rows, after_warmup_frozen, evaluate
        self.frozen_in_warmup: list[Any] = []
        if config.head_warmup_steps:
            if self.mlm.head is None:
                raise UsageError("--head-warmup-steps needs a BERT-style masked-LM head",
                                 hint="leave --head-warmup-steps at 0 for this model")
            head = {id(p) for p in self.mlm.head.parameters()} - {id(self.embedding)}
            self.frozen_in_warmup = [p for p in trainer.trainable if id(p) not in head]
            if config.head_warmup_steps >= trainer.total_steps:
                log.warning("--head-warmup-steps %d covers all %d steps: the encoder is not trained", config.head_warmup_steps,
                            trainer.total_steps)
        self.evaluations: list[dict[str, Any]] = []
        self.eval_seconds = 0.0
        self.head_only = False
        self.n_targets = 1.0
        self.step = 0  # optimizer steps done
        self.last_report = self.began = time.perf_counter()
        self.tokens_here = 0  # trained on by this call (the sign-of-life rate)

    def epoch_batches(self, epoch: int, step: int) -> list[np.ndarray]:
        size = filled(self.trainer.config.batch_size)
        order = epoch_order(self.corpus.train_indices, self.trainer.config.seed, epoch)
        self.epoch = epoch
        return [order[i : i + size] for i in range(0, len(order), size)]

    def parts(self, trainer: Trainer[PretrainSettings], batch: np.ndarray) -> list[Any] | None:
        import torch

        parts = super().parts(trainer, batch)
        if parts is None:
            return None
        ctx, config = trainer.ctx, trainer.config
        micro = [masked_batch(self.corpus, part, self.masker, seed=config.seed, epoch=self.epoch, pad_id=self.pad_id) for part in parts]
        self.head_only = self.step < self.config.head_warmup_steps
        # DDP expects a gradient for every parameter in every step, so there the
        # encoder's gradients are computed and dropped (before_update) instead.
        self.mlm.encoder_frozen = self.head_only and ctx.world == 1
        counted = float(sum(b.n_targets for b in micro))
        if ctx.world > 1:  # the whole global batch's count; alone, the host's own count needs no trip to the device
            counted = float(ctx.all_reduce_sum(torch.tensor([counted], dtype=torch.float64, device=ctx.device)).item())
        self.n_targets = max(1.0, counted)
        return micro

    def loss(self, part: Any) -> Any:
        import torch

        ctx = self.trainer.ctx
        input_ids, attention, rows, targets = _tensors(part, ctx.device)
        logits = self.trainer.module(input_ids, attention, rows)
        loss = torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum")
        return loss * (ctx.world / self.n_targets)

    def before_update(self) -> None:
        for param in self.frozen_in_warmup if self.head_only else self.after_warmup_frozen:
            param.grad = None
        if self.frozen_rows is not None and self.embedding.grad is not None:
            self.embedding.grad[: self.n_base] = 0

    def start(self, step: int) -> list[dict[str, Any]]:
        self.step = step
        return [] if step else self._evaluate()  # a resumed run evaluated before its first step already

    def after_step(self, step: int) -> list[dict[str, Any]]:
        import torch

        if self.frozen_rows is not None:  # AdamW's decoupled weight decay would otherwise shrink them
            with torch.no_grad():
                self.embedding[: self.n_base].copy_(self.frozen_rows)
        trainer, self.step = self.trainer, step
        now = time.perf_counter()
        if trainer.ctx.is_main and now - self.last_report >= _REPORT_SECONDS:  # a sign of life in batch-job logs
            self.last_report = now
            rate = self.tokens_here / max(now - self.began - self.eval_seconds, 1e-9)
            log.info("step %d of %d: lr %.2e, %.0f tokens/s", step, trainer.total_steps, trainer.lr(), rate)
        every = self.config.eval_every
        return self._evaluate() if every and step % every == 0 and step < trainer.total_steps else []

    def end(self) -> list[dict[str, Any]]:
        return self._evaluate()

    def _evaluate(self) -> list[dict[str, Any]]:
        if self.evaluate is None:
            return []
        begun, step = time.perf_counter(), self.step
        evaluation = {"step": step, **self.evaluate(step)}
        self.eval_seconds += time.perf_counter() - begun
        self.evaluations.append(evaluation)
        if self.trainer.ctx.is_main:
            log.info("step %d: held-out %s", step, ", ".join(f"{k} loss {v['loss']:.4f}" for k, v in evaluation.items()
                                                             if isinstance(v, dict)))
        return [{"event": "eval", **evaluation}]

    def record(self, batch: np.ndarray) -> dict[str, Any]:
        return {"sequences": len(batch), **({"head_only": True} if self.head_only else {})}

    def counts(self, batch: np.ndarray) -> dict[str, int]:
        tokens = sum(self.corpus.sequence_length(int(i)) for i in batch)
        self.tokens_here += tokens
        return {"tokens": tokens}

    def weights(self) -> dict[str, Any]:
        """The domain model and the G-MAP gates (the general model is frozen)."""
        state = {f"model.{k}": v for k, v in self.mlm.model.state_dict().items()}
        if self.mlm.gmap is not None:
            state.update({f"gates.{k}": v for k, v in self.mlm.gmap.gates.state_dict().items()})
        return state

    def load_weights(self, state: dict[str, Any]) -> None:
        model = {k[len("model.") :]: v for k, v in state.items() if k.startswith("model.")}
        self.mlm.model.load_state_dict(model, strict=True)
        gates = {k[len("gates.") :]: v for k, v in state.items() if k.startswith("gates.")}
        if self.mlm.gmap is not None:
            self.mlm.gmap.gates.load_state_dict(gates, strict=True)
        elif gates:
            raise ValueError("the checkpoint holds G-MAP gates, this run has no --gmap")

    def extra_state(self) -> dict[str, Any]:
        return {"evaluations": self.evaluations, "eval_seconds": self.eval_seconds}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.evaluations = list(state["evaluations"])
        # Checkpoints of earlier versions kept it in the position.
        self.eval_seconds = float(state.get("eval_seconds", state["position"].get("eval_seconds", 0.0)))


def pretrain(
    mlm: Any,
    corpus: TrainingCorpus,
    masker: Masker,
    config: PretrainSettings,
    ctx: DistContext,
    *,
    pad_id: int,
    n_base_rows: int,
    evaluate: Callable[[int], dict[str, Any]] | None = None,
    hooks: TrainingHooks = NO_HOOKS,
) -> PretrainResult:
    """Continue masked-LM training of ``mlm`` (from :func:`build_masked_lm`) in place.

    ``evaluate(step)`` (held-out losses) runs before the first step, every
    ``eval_every`` steps and after the last one; its records go to the log.
    """
    mlm.to(ctx.device)
    frozen_rows, after_warmup_frozen = freeze_for(mlm, config, n_base_rows)
    trainer = Trainer(mlm, config, ctx, total_steps=config.plan(len(corpus.train_indices))[1])
    task = PretrainTask(
        trainer, config, corpus, masker, pad_id=pad_id, frozen_rows=frozen_rows, after_warmup_frozen=after_warmup_frozen, evaluate=evaluate
    )
    run = run_training(trainer, task, hooks)
    mlm.eval()
    return PretrainResult(
        steps=run.steps, epochs=run.epoch_fraction, tokens=run.counts.get("tokens", 0), seconds=run.seconds,
        evaluations=task.evaluations, eval_seconds=task.eval_seconds,
    )
