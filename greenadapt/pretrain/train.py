"""The masked-LM training loop: AdamW, warm-up + linear decay, accumulation, autocast, DDP, checkpoints.

Batch arithmetic is finetune's (:mod:`greenadapt.finetune.train`):
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
import json
import logging
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from greenadapt.defaults import DEFAULT_SEED
from greenadapt.errors import StageError, UsageError
from greenadapt.finetune.train import build_optimizers
from greenadapt.training.checkpoint import CHECKPOINT_FORMAT, Checkpointing, StopSignal, gather_rng_states, matching_checkpoint, restore_rng_states, rng_checkpoint_entries, write_checkpoint
from greenadapt.training.distributed import DistContext, autocast_dtype, grad_scaler
from greenadapt.training.step import optimizer_step
from greenadapt.pretrain.data import EVAL_SEED, IGNORE, Masker, PackedCorpus, epoch_order, masked_batch
from greenadapt.progress import NULL_PROGRESS, Progress, StepRate

log = logging.getLogger(__name__)

_WEIGHTS, _TENSORS, _STATE, _LOG = "model.safetensors", "optimizer.pt", "state.json", "train_log.jsonl"
_REPORT_SECONDS = 60.0


TRAIN_CHOICES = ("all", "new-rows")


@dataclass(frozen=True)
class PretrainConfig:
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 5e-5
    epochs: int = 1
    max_steps: int | None = None
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = DEFAULT_SEED
    train_embeddings: str = "all"
    precision: str = "auto"
    eval_batch_size: int = 32
    eval_every: int | None = None  # steps between held-out evaluations (besides before and after training)
    head_warmup_steps: int = 0  # the first N steps train the masked-LM head alone
    # "new-rows": only the rows expand added learn (after the head warm-up, if any); the encoder, the
    # original rows and the head stay bit-identical. "all": every parameter.
    train: str = "all"

    def check(self) -> None:
        for name in ("batch_size", "grad_accum", "epochs", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        for name in ("max_steps", "eval_every"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if self.lr <= 0 or not 0 <= self.warmup < 1:
            raise UsageError("--lr must be positive and --warmup a fraction below 1")
        if self.train_embeddings not in ("all", "new", "none"):
            raise UsageError(f"unknown --train-embeddings {self.train_embeddings!r}", hint="all, new or none")
        if self.head_warmup_steps < 0:
            raise UsageError("--head-warmup-steps must be 0 or more")
        if self.train not in TRAIN_CHOICES:
            raise UsageError(f"unknown --train {self.train!r}", hint=" or ".join(TRAIN_CHOICES))
        if self.train == "new-rows" and self.train_embeddings != "all":
            raise UsageError("--train new-rows decides which rows train; leave --train-embeddings at all")


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
    import torch

    labels = torch.from_numpy(batch.labels).reshape(-1)
    rows = torch.nonzero(labels != IGNORE).squeeze(1)
    to = lambda a: a.to(device, non_blocking=True)  # noqa: E731
    return to(torch.from_numpy(batch.input_ids)), to(torch.from_numpy(batch.attention_mask)), to(rows), to(labels[rows])


# --------------------------------------------------------------------------
# Held-out evaluation


def heldout_loss(
    mlm: Any,
    corpus: PackedCorpus,
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
            with torch.autocast(ctx.device.type, dtype=dtype, enabled=dtype is not None):
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
class Position:
    step: int = 0
    epoch: int = 0
    batch: int = 0  # index, in this epoch's batch list, of the next batch
    tokens: int = 0  # non-padding tokens trained on
    seconds: float = 0.0
    eval_seconds: float = 0.0  # of ``seconds``, spent on held-out evaluation


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


def plan_steps(n_train: int, config: PretrainConfig) -> tuple[int, int]:
    """(steps per epoch, total steps)."""
    per_epoch = max(1, math.ceil(n_train / config.batch_size))
    total = config.max_steps if config.max_steps is not None else per_epoch * config.epochs
    return per_epoch, max(1, total)


class _Stepper:
    """Optimizers, schedule, mixed precision, DDP and embedding freezing around one MaskedLM module."""

    def __init__(self, mlm: Any, n_train: int, config: PretrainConfig, ctx: DistContext, *, n_base_rows: int) -> None:
        import torch

        self.mlm, self.config, self.ctx = mlm, config, ctx
        self.micro_per_step = ctx.world * config.grad_accum
        if config.batch_size < self.micro_per_step:
            raise UsageError(
                f"--batch-size {config.batch_size} is smaller than processes × --grad-accum ({self.micro_per_step})",
                hint="--batch-size is the global batch of one optimizer step",
            )
        torch.manual_seed(config.seed + ctx.rank)  # dropout differs per process, the weights do not (DDP)
        mlm.to(ctx.device)
        embedding = mlm.model.get_input_embeddings().weight
        self.embedding, self.n_base, self.frozen_rows = embedding, n_base_rows, None
        self.after_warmup_frozen: list[Any] = []
        if config.train == "new-rows":
            self.after_warmup_frozen = self._train_new_rows_only(mlm, embedding, n_base_rows, config)
        elif config.train_embeddings == "none" or (config.train_embeddings == "new" and embedding.shape[0] <= n_base_rows):
            embedding.requires_grad_(False)
        elif config.train_embeddings == "new":
            embedding.requires_grad_(True)
            self.frozen_rows = embedding.detach()[:n_base_rows].clone()
            log.info("word embeddings: %d original rows frozen, %d added rows trained", n_base_rows, embedding.shape[0] - n_base_rows)
        mlm.train()
        self.ddp = mlm
        if ctx.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(mlm, device_ids=device_ids)
        _, self.total = plan_steps(n_train, config)
        self.optimizers, self.schedulers = build_optimizers(mlm, None, config, self.total)
        self.dtype = autocast_dtype(config.precision, ctx.device)
        self.scaler = grad_scaler(self.dtype, ctx.device)
        self.trainable = [p for p in mlm.parameters() if p.requires_grad]
        self.frozen_in_warmup: list[Any] = []
        if config.head_warmup_steps:
            if mlm.head is None:
                raise UsageError("--head-warmup-steps needs a BERT-style masked-LM head", hint="leave --head-warmup-steps at 0 for this model")
            head = {id(p) for p in mlm.head.parameters()} - {id(embedding)}
            self.frozen_in_warmup = [p for p in self.trainable if id(p) not in head]
            if config.head_warmup_steps >= self.total:
                log.warning("--head-warmup-steps %d covers all %d steps: the encoder is not trained", config.head_warmup_steps, self.total)

    def _train_new_rows_only(self, mlm: Any, embedding: Any, n_base_rows: int, config: PretrainConfig) -> list[Any]:
        """Freeze all but the added rows (and the head during its warm-up); the head's parameters, whose
        gradients are dropped after the warm-up."""
        if embedding.shape[0] <= n_base_rows:
            raise UsageError("--train new-rows needs a model with added rows", hint="pass a model folder written by `greenadapt expand`")
        head = [] if mlm.head is None or not config.head_warmup_steps else [
            p for p in mlm.head.parameters() if p is not embedding
        ]
        keep = {id(embedding)} | {id(p) for p in head}
        for param in mlm.parameters():
            param.requires_grad_(id(param) in keep)
        self.frozen_rows = embedding.detach()[:n_base_rows].clone()
        log.info("--train new-rows: %d added rows train, everything else is frozen%s", embedding.shape[0] - n_base_rows,
                 " (the head trains during its warm-up)" if head else "")
        return head

    def lr(self) -> float:
        return float(self.schedulers[0].get_last_lr()[0])

    def step(self, micro: list[Any], *, head_only: bool = False) -> tuple[float, float | None]:
        """Forward/backward this process's masked micro-batches, then one optimizer step (of the MLM head alone if ``head_only``)."""
        import torch

        ctx = self.ctx
        # DDP expects a gradient for every parameter in every step, so there the
        # encoder's gradients are computed and dropped below instead.
        self.mlm.encoder_frozen = head_only and ctx.world == 1
        counted = torch.tensor([sum(b.n_targets for b in micro)], dtype=torch.float64, device=ctx.device)
        n_targets = max(1.0, float(ctx.all_reduce_sum(counted).item()))
        loss_sum = torch.zeros((), device=ctx.device)
        for index, batch in enumerate(micro):
            last = index == len(micro) - 1
            with contextlib.nullcontext() if last or ctx.world == 1 else self.ddp.no_sync():
                input_ids, attention, rows, targets = _tensors(batch, ctx.device)
                with torch.autocast(ctx.device.type, dtype=self.dtype, enabled=self.dtype is not None):
                    logits = self.ddp(input_ids, attention, rows)
                loss = torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum")
                loss = loss * (ctx.world / n_targets)
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            loss_sum += loss.detach()
        for param in self.frozen_in_warmup if head_only else self.after_warmup_frozen:
            param.grad = None
        if self.frozen_rows is not None and self.embedding.grad is not None:
            self.embedding.grad[: self.n_base] = 0
        grad_norm = optimizer_step(
            self.optimizers, self.schedulers, self.trainable, max_grad_norm=self.config.max_grad_norm, scaler=self.scaler
        )
        if self.frozen_rows is not None:
            with torch.no_grad():
                self.embedding[: self.n_base].copy_(self.frozen_rows)
        return float(ctx.all_reduce_sum(loss_sum).item()) / ctx.world, grad_norm

    # -- checkpoint state ---------------------------------------------------
    def weights(self) -> dict[str, Any]:
        """What a checkpoint holds of the model: the domain model and the G-MAP gates (the general model is frozen)."""
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


def micro_batches(batch: np.ndarray, stepper: _Stepper) -> list[np.ndarray]:
    ctx, accum = stepper.ctx, stepper.config.grad_accum
    return np.array_split(batch, stepper.micro_per_step)[ctx.rank * accum : (ctx.rank + 1) * accum]


def pretrain(
    mlm: Any,
    corpus: PackedCorpus,
    masker: Masker,
    config: PretrainConfig,
    ctx: DistContext,
    *,
    pad_id: int,
    n_base_rows: int,
    evaluate: Callable[[int], dict[str, Any]] | None = None,
    log_path: Path | None = None,
    progress: Progress = NULL_PROGRESS,
    checkpoint: Checkpointing | None = None,
    stop: StopSignal | None = None,
) -> PretrainResult:
    """Continue masked-LM training of ``mlm`` (from :func:`build_masked_lm`) in place.

    ``evaluate(step)`` (held-out losses) runs before the first step, every
    ``eval_every`` steps and after the last one; its records go to the log.
    """
    config.check()
    train_indices = corpus.train_indices
    if stop is not None:
        stop.defer()
        if stop.requested(ctx):
            raise stop.stopped("before training started")
    stepper = _Stepper(mlm, len(train_indices), config, ctx, n_base_rows=n_base_rows)
    per_epoch, total = plan_steps(len(train_indices), config)
    at, result = Position(), PretrainResult(0, 0.0, 0, 0.0)
    restored = _load_checkpoint(checkpoint, stepper, log_path if ctx.is_main else None) if checkpoint and checkpoint.resume else None
    if restored is not None:
        at, result.evaluations = restored
    writes = checkpoint is not None and checkpoint.writer
    log_handle = open(log_path, "a" if restored else "w", encoding="utf-8") if log_path is not None and ctx.is_main else None  # noqa: SIM115
    started = time.perf_counter() - at.seconds

    def record(entry: dict[str, Any]) -> None:
        if log_handle is not None:
            log_handle.write(json.dumps(entry) + "\n")
            log_handle.flush()

    def run_eval() -> None:
        if evaluate is None:
            return
        begun = time.perf_counter()
        evaluation = {"step": at.step, **evaluate(at.step)}
        at.eval_seconds += time.perf_counter() - begun
        result.evaluations.append(evaluation)
        record({"event": "eval", **evaluation})
        if ctx.is_main:
            log.info("step %d: held-out %s", at.step, ", ".join(f"{k} loss {v['loss']:.4f}" for k, v in evaluation.items() if isinstance(v, dict)))

    def save(*, complete: bool = False) -> Path | None:
        saved = None
        rank_rng = gather_rng_states(ctx) if checkpoint is not None else None  # every process takes part
        if writes:
            at.seconds = time.perf_counter() - started
            saved = _save_checkpoint(checkpoint, stepper, at, result.evaluations, log_path, complete=complete, rank_rng=rank_rng)  # type: ignore[arg-type]
        ctx.barrier()
        return saved

    if restored is None:
        run_eval()
    last_report = time.perf_counter()
    progress.start(f"masked-LM training (seed {config.seed})", total=total, unit="steps")
    rate = StepRate(at.step)
    progress.update(at.step)
    try:
        while at.step < total:
            order = epoch_order(train_indices, config.seed, at.epoch)
            batches = [order[i : i + config.batch_size] for i in range(0, len(order), config.batch_size)]
            for index in range(at.batch, len(batches)):
                if at.step >= total:
                    break
                if stop is not None and stop.requested(ctx):
                    at.batch = index
                    raise stop.stopped(f"at step {at.step} of {total}", save())
                batch = batches[index]
                if len(batch) < stepper.micro_per_step:
                    continue
                micro = [
                    masked_batch(corpus, part, masker, seed=config.seed, epoch=at.epoch, pad_id=pad_id)
                    for part in micro_batches(batch, stepper)
                ]
                head_only = at.step < config.head_warmup_steps
                loss, grad_norm = stepper.step(micro, head_only=head_only)
                at.step += 1
                at.tokens += sum(corpus.sequence_length(int(i)) for i in batch)
                record(
                    {
                        "step": at.step,
                        "epoch": at.epoch + 1,
                        "loss": round(loss, 6),
                        "lr": stepper.lr(),
                        "sequences": len(batch),
                        "grad_norm": None if grad_norm is None else round(grad_norm, 6),
                        "seconds": round(time.perf_counter() - started, 3),
                        **({"head_only": True} if head_only else {}),
                    }
                )
                if not math.isfinite(loss) and stepper.scaler is None:
                    raise UsageError(f"the training loss became {loss} at step {at.step}", hint="lower --lr, or use --precision fp32 or bf16")
                at.batch = index + 1
                progress.update(at.step, loss=f"{loss:.4f}", steps_per_s=rate.per_second(at.step))
                if ctx.is_main and time.perf_counter() - last_report >= _REPORT_SECONDS:  # a sign of life in batch-job logs
                    last_report = time.perf_counter()
                    rate = at.tokens / max(last_report - started - at.eval_seconds, 1e-9)
                    log.info("step %d of %d: loss %.4f, lr %.2e, %.0f tokens/s", at.step, total, loss, stepper.lr(), rate)
                if config.eval_every and at.step % config.eval_every == 0 and at.step < total:
                    run_eval()
                if checkpoint is not None and checkpoint.save_every and at.step % checkpoint.save_every == 0 and at.step < total:
                    save()
            if at.batch >= len(batches):
                at.epoch += 1
                at.batch = 0
        seconds = time.perf_counter() - started
        run_eval()
    finally:
        progress.finish()
        if log_handle is not None:
            log_handle.close()
    mlm.eval()
    result.steps, result.tokens, result.seconds, result.eval_seconds = at.step, at.tokens, seconds, at.eval_seconds
    result.epochs = round(at.epoch + at.batch / per_epoch, 4)
    return result


# --------------------------------------------------------------------------
# Checkpoints (finetune's layout; see the module docstring)


def _save_checkpoint(
    checkpoint: Checkpointing,
    stepper: _Stepper,
    position: Position,
    evaluations: list[dict[str, Any]],
    log_path: Path | None,
    *,
    complete: bool,
    rank_rng: list[dict[str, Any]] | None,
) -> Path:
    import torch
    from safetensors.torch import save_file

    def fill(tmp: Path) -> None:
        save_file({k: v.detach().to("cpu", copy=True).contiguous() for k, v in stepper.weights().items()}, str(tmp / _WEIGHTS))
        rng_tensors, rng_state = rng_checkpoint_entries(stepper.ctx, rank_rng)
        torch.save({"optimizers": [o.state_dict() for o in stepper.optimizers], **rng_tensors}, tmp / _TENSORS)
        state = {
            **rng_state,
            "format": CHECKPOINT_FORMAT,
            "fingerprint": checkpoint.fingerprint,
            "seed": stepper.config.seed,
            "position": asdict(position),
            "schedulers": [s.state_dict() for s in stepper.schedulers],
            "scaler": stepper.scaler.state_dict() if stepper.scaler is not None else None,
            "evaluations": evaluations,
        }
        (tmp / _STATE).write_text(json.dumps(state, allow_nan=True) + "\n", encoding="utf-8")
        if log_path is not None and log_path.is_file():
            shutil.copyfile(log_path, tmp / _LOG)

    return write_checkpoint(checkpoint, position.step, fill, complete=complete)


def _load_checkpoint(checkpoint: Checkpointing, stepper: _Stepper, log_path: Path | None) -> tuple[Position, list[dict[str, Any]]] | None:
    import pickle

    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = matching_checkpoint(checkpoint)
    if path is None:
        return None
    hint = f"delete {path.parent} to start over"
    try:
        state = json.loads((path / _STATE).read_text(encoding="utf-8"))
        tensors = torch.load(path / _TENSORS, map_location="cpu", weights_only=True)
        stepper.load_weights(load_file(str(path / _WEIGHTS), device=str(stepper.ctx.device)))
        if len(tensors["optimizers"]) != len(stepper.optimizers):
            raise ValueError("the checkpoint holds another number of optimizers")
        for optimizer, saved in zip(stepper.optimizers, tensors["optimizers"], strict=True):
            optimizer.load_state_dict(saved)
        for scheduler, saved in zip(stepper.schedulers, state["schedulers"], strict=True):
            scheduler.load_state_dict(saved)
        if stepper.scaler is not None and state.get("scaler"):
            stepper.scaler.load_state_dict(state["scaler"])
        position = Position(**state["position"])
        restore_rng_states(tensors, state, stepper.ctx, path, seed=stepper.config.seed, step=position.step)
        evaluations = list(state["evaluations"])
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, pickle.UnpicklingError, SafetensorError) as exc:
        raise StageError(f"unreadable checkpoint: {' '.join(str(exc).split())[:300]}", path=path, hint=hint) from None
    if log_path is not None and (path / _LOG).is_file():
        shutil.copyfile(path / _LOG, log_path)
    log.info("resuming from %s: step %d", path, position.step)
    return position, evaluations
