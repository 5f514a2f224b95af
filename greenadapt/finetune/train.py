"""The fine-tuning loop: mixed tokenizers, length-grouped batches, data parallel.

Batch arithmetic: ``batch_size`` is the *global* batch of one optimizer
step. Under ``torchrun`` with W processes and ``grad_accum`` A, each global
batch is cut into W × A micro-batches of similar length; process r runs
micro-batches r·A … r·A + A − 1. Every process builds the same global
batches (same seed, same epoch), and each micro-batch's summed loss is
divided by the number of labelled rows in the whole global batch (times W,
which DDP's gradient averaging divides out again), so the gradient is that
of the mean loss over the global batch whatever W and A are.

Mixing: in epoch e, unit i is fed through the domain tokenizer iff
``uniform(seed, e)[i] < mix``: a fresh draw per unit and epoch that does not
depend on the order of the data or the number of processes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from greenadapt.errors import UsageError
from greenadapt.finetune.tokenize import VIEW_DOMAIN, VIEW_GENERAL, Unit
from greenadapt.progress import NULL_PROGRESS, Progress

log = logging.getLogger(__name__)

_MIX_STREAM = 0x6D6978  # separate random streams for the tokenizer draw and the batch order
_ORDER_STREAM = 0x6F7264
GROUP_BATCHES = 50  # length grouping sorts windows of 50 batches, so batch order stays random


@dataclass(frozen=True)
class TrainConfig:
    # Probability of the domain view. None: run_finetune picks 0.5 when the model has a
    # domain tokenizer, else 0 (train() itself reads None as 0).
    mix: float | None = None
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 5e-5
    epochs: int = 3
    max_steps: int | None = None
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 42
    train_embeddings: str = "all"
    precision: str = "auto"  # auto | fp32 | bf16 | fp16
    eval_batch_size: int = 64


# --------------------------------------------------------------------------
# Processes and devices


@dataclass
class DistContext:
    """Where this process runs: rank, world size, device; all-reduce helpers that are no-ops alone."""

    rank: int = 0
    world: int = 1
    device: Any = "cpu"
    initialized_here: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.device, str):
            import torch

            self.device = torch.device(self.device)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce_sum(self, tensor: Any) -> Any:
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def broadcast_int(self, value: int) -> int:
        if self.world == 1:
            return value
        import torch
        import torch.distributed as dist

        tensor = torch.tensor([value], dtype=torch.long, device=self.device)
        dist.broadcast(tensor, src=0)
        return int(tensor.item())

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        if self.initialized_here:
            import torch.distributed as dist

            dist.destroy_process_group()
            self.initialized_here = False


def pick_device(spec: str = "auto", local_rank: int = 0, *, allow_mps: bool = True) -> Any:
    """``--device``: auto (CUDA, then Apple MPS, then CPU), cpu, cuda, cuda:N, mps."""
    import torch

    if spec == "auto":
        if torch.cuda.is_available():
            spec = f"cuda:{local_rank}"
        elif allow_mps and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            spec = "mps"
        else:
            spec = "cpu"
    elif spec == "cuda":
        spec = f"cuda:{local_rank}"
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise UsageError(f"unknown --device {spec!r}", hint="auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError("--device cuda but no CUDA GPU is available", hint="use --device cpu or auto")
        torch.cuda.set_device(device)
    return device


def init_distributed(device: str = "auto") -> DistContext:
    """Join the process group torchrun describes (WORLD_SIZE > 1), else run alone; pick the device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch_device = pick_device(device, local_rank, allow_mps=world == 1)
    ctx = DistContext(rank=rank, world=world, device=torch_device)
    if world > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if torch_device.type == "cuda" else "gloo")
            ctx.initialized_here = True
        log.info("data parallel: rank %d of %d on %s", rank, world, torch_device)
    return ctx


def autocast_dtype(precision: str, device: Any) -> Any:
    """The autocast dtype for ``--precision`` on ``device`` (None: full fp32)."""
    import torch

    if precision not in ("auto", "fp32", "bf16", "fp16"):
        raise UsageError(f"unknown --precision {precision!r}", hint="auto, fp32, bf16 or fp16")
    if device.type != "cuda" or precision == "fp32":
        if precision in ("bf16", "fp16") and device.type != "cuda":
            log.warning("--precision %s needs a CUDA device; training in fp32 on %s", precision, device)
        return None
    if precision == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if precision == "bf16" else torch.float16


# --------------------------------------------------------------------------
# Views, batches, tensors


def choose_views(n_units: int, mix: float, seed: int, epoch: int) -> np.ndarray:
    """The view (0 = general, 1 = domain) of each unit in ``epoch``."""
    if mix <= 0:
        return np.zeros(n_units, dtype=np.int64)
    if mix >= 1:
        return np.ones(n_units, dtype=np.int64)
    draws = np.random.default_rng([seed, epoch, _MIX_STREAM]).random(n_units)
    return (draws < mix).astype(np.int64)


def length_grouped_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Random batches of similar-length units: shuffle, sort within windows of 50 batches, shuffle the batches."""
    rng = np.random.default_rng([seed, epoch, _ORDER_STREAM])
    order = rng.permutation(len(lengths))
    batches: list[np.ndarray] = []
    window = batch_size * GROUP_BATCHES
    for start in range(0, len(order), window):
        part = order[start : start + window]
        part = part[np.argsort(-lengths[part], kind="stable")]
        batches.extend(part[i : i + batch_size] for i in range(0, len(part), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


@dataclass
class Batch:
    input_ids: Any
    attention_mask: Any
    token_type_ids: Any
    rows: Any  # flat positions (b * T + t) of the output rows
    targets: Any

    def model_inputs(self) -> dict[str, Any]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "token_type_ids": self.token_type_ids}


def collate(units: Sequence[Unit], indices: Sequence[int], views: Sequence[int], pad_id: int, device: Any) -> Batch:
    import torch

    seqs = [units[i].ids[v] for i, v in zip(indices, views, strict=True)]
    width = max(len(s) for s in seqs)
    input_ids = np.full((len(seqs), width), pad_id, dtype=np.int64)
    attention = np.zeros((len(seqs), width), dtype=np.int64)
    type_ids = np.zeros((len(seqs), width), dtype=np.int64)
    rows, targets = [], []
    for b, (i, v) in enumerate(zip(indices, views, strict=True)):
        unit = units[i]
        n = len(unit.ids[v])
        input_ids[b, :n] = unit.ids[v]
        attention[b, :n] = 1
        if unit.type_ids[v] is not None:
            type_ids[b, :n] = unit.type_ids[v]
        rows.append(unit.rows[v] + b * width)
        targets.append(unit.targets)

    def to(array: np.ndarray) -> Any:
        return torch.from_numpy(array).to(device, non_blocking=True)

    return Batch(to(input_ids), to(attention), to(type_ids), to(np.concatenate(rows)), to(np.concatenate(targets)))


def output_rows(model: Any, batch: Batch) -> Any:
    """Logits of the output rows: word-initial pieces (token models) or sequences ([B, L] heads)."""
    logits = model(**batch.model_inputs()).logits
    if logits.dim() == 2:  # sequence classification: one row per sequence, at position 0
        return logits
    return logits.reshape(-1, logits.shape[-1]).index_select(0, batch.rows)


# --------------------------------------------------------------------------
# The loop


@dataclass
class TrainResult:
    steps: int
    epochs_run: int
    best_epoch: int | None
    best_score: float | None
    dev_history: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    domain_fraction: float = 0.0


def plan_steps(n_units: int, config: TrainConfig) -> tuple[int, int]:
    """(steps per epoch, total steps)."""
    per_epoch = max(1, math.ceil(n_units / config.batch_size))
    total = config.max_steps if config.max_steps is not None else per_epoch * config.epochs
    return per_epoch, max(1, total)


def train(
    model: Any,
    units: Sequence[Unit],
    config: TrainConfig,
    ctx: DistContext,
    *,
    pad_id: int,
    n_base_rows: int,
    has_domain: bool,
    evaluate: Callable[[Any], tuple[float, dict[str, Any]]] | None = None,
    log_path: Path | None = None,
    progress: Progress = NULL_PROGRESS,
) -> TrainResult:
    """Fine-tune ``model`` in place; with ``evaluate`` (dev score, details) keep the best epoch's weights.

    The best epoch's weights are held as a CPU copy of the state dict (with a
    very large added vocabulary that copy includes the whole added-row table).
    """
    mix = config.mix or 0.0
    if mix > 0 and not has_domain:
        raise UsageError("--mix > 0 needs a model folder with a domain tokenizer")
    stepper = _Stepper(model, units, config, ctx, pad_id=pad_id, n_base_rows=n_base_rows)
    _, total_steps = plan_steps(len(units), config)
    result = TrainResult(steps=0, epochs_run=0, best_epoch=None, best_score=None)
    best_state: dict[str, Any] | None = None
    log_handle = open(log_path, "w", encoding="utf-8") if log_path is not None and ctx.is_main else None
    started = time.perf_counter()
    domain_units = seen_units = step = epoch = 0
    progress.start(f"fine-tuning (seed {config.seed})", total=total_steps, unit="steps")
    try:
        while step < total_steps:
            views = choose_views(len(units), mix, config.seed, epoch)
            lengths = np.array([len(u.ids[v]) for u, v in zip(units, views, strict=True)])
            for batch in length_grouped_batches(lengths, config.batch_size, config.seed, epoch):
                if step >= total_steps:
                    break
                if len(batch) < stepper.micro_per_step:
                    continue  # an epoch's last, tiny batch that cannot give every process a micro-batch
                loss, grad_norm = stepper.step(batch, views)
                step += 1
                domain_units += int(views[batch].sum())
                seen_units += len(batch)
                if log_handle is not None:
                    record = {
                        "step": step,
                        "epoch": epoch + 1,
                        "loss": round(loss, 6),
                        "lr": stepper.lr(),
                        "units": len(batch),
                        "domain_units": int(views[batch].sum()),
                        "wordpieces": int(lengths[batch].sum()),
                        "grad_norm": None if grad_norm is None else round(grad_norm, 6),
                        "seconds": round(time.perf_counter() - started, 3),
                    }
                    log_handle.write(json.dumps(record) + "\n")
                if not math.isfinite(loss) and stepper.scaler is None:
                    raise UsageError(
                        f"the training loss became {loss} at step {step}", hint="lower --lr, or use --precision fp32 or bf16"
                    )
                progress.update(step, loss=f"{loss:.4f}")
            epoch += 1
            if evaluate is None:
                continue
            model.eval()
            score, details = evaluate(model)
            model.train()
            result.dev_history.append({"epoch": epoch, "step": step, "score": score, **details})
            if log_handle is not None:
                log_handle.write(json.dumps({"event": "dev", "epoch": epoch, "step": step, "score": score}) + "\n")
            if result.best_score is None or score > result.best_score:
                result.best_score, result.best_epoch = score, epoch
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            log.info("epoch %d: dev score %.4f (best %.4f, epoch %d)", epoch, score, result.best_score, result.best_epoch)
    finally:
        progress.finish()
        if log_handle is not None:
            log_handle.close()
    if best_state is not None and result.best_epoch != epoch:
        model.load_state_dict(best_state)
        log.info("restored the weights of epoch %d (best on dev)", result.best_epoch)
    stepper.finish()
    result.steps, result.epochs_run = step, epoch
    result.seconds = time.perf_counter() - started
    result.domain_fraction = domain_units / seen_units if seen_units else 0.0
    return result


class _Stepper:
    """Optimizers, schedule, mixed precision and DDP around one model: one call per optimizer step."""

    NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")

    def __init__(self, model: Any, units: Sequence[Unit], config: TrainConfig, ctx: DistContext, *, pad_id: int, n_base_rows: int) -> None:
        import torch

        from greenadapt.finetune import embeddings

        self.model, self.units, self.config, self.ctx, self.pad_id = model, units, config, ctx, pad_id
        self.micro_per_step = ctx.world * config.grad_accum
        if config.batch_size < self.micro_per_step:
            raise UsageError(
                f"--batch-size {config.batch_size} is smaller than processes × --grad-accum ({self.micro_per_step})",
                hint="--batch-size is the global batch of one optimizer step",
            )
        torch.manual_seed(config.seed + ctx.rank)  # dropout differs per process, the weights do not (DDP)
        model.to(ctx.device)
        longest = max(len(ids) for u in units for ids in u.ids)
        self.split = embeddings.install(model, n_base=n_base_rows, mode=config.train_embeddings, capacity=config.batch_size * longest)
        model.train()
        self.ddp_model = model
        if ctx.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            # broadcast_buffers=False: the added-row table is a buffer; every process updates it identically.
            device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
            self.ddp_model = DistributedDataParallel(model, device_ids=device_ids, broadcast_buffers=False)

        active = self.split.active if self.split is not None else None
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p is not active]
        self.optimizers: list[Any] = [
            torch.optim.AdamW(
                [
                    {"params": [p for n, p in named if not n.endswith(self.NO_DECAY)], "weight_decay": config.weight_decay},
                    {"params": [p for n, p in named if n.endswith(self.NO_DECAY)], "weight_decay": 0.0},
                ],
                lr=config.lr,
            )
        ]
        if self.split is not None:
            self.optimizers.append(embeddings.RowAdamW(self.split, lr=config.lr, weight_decay=config.weight_decay))
        _, total = plan_steps(len(units), config)
        warmup = int(round(config.warmup * total))

        def schedule(step: int) -> float:
            if step < warmup:
                return (step + 1) / (warmup + 1)
            return max(0.0, (total - step) / max(1, total - warmup))

        self.schedulers = [torch.optim.lr_scheduler.LambdaLR(opt, schedule) for opt in self.optimizers]
        self.dtype = autocast_dtype(config.precision, ctx.device)
        self.scaler = torch.amp.GradScaler("cuda") if self.dtype == torch.float16 else None
        self.trainable = [p for p in model.parameters() if p.requires_grad]

    def lr(self) -> float:
        return float(self.schedulers[0].get_last_lr()[0])

    def step(self, batch: np.ndarray, views: np.ndarray) -> tuple[float, float | None]:
        """Forward/backward this process's micro-batches of the global ``batch``, then one optimizer step."""
        import torch

        ctx, config, units = self.ctx, self.config, self.units
        n_targets = max(1, int(sum(int((units[i].targets >= 0).sum()) for i in batch)))
        if self.split is not None:
            domain_ids = [units[i].ids[VIEW_DOMAIN] for i in batch if views[i] == VIEW_DOMAIN]
            flat = np.concatenate(domain_ids) if domain_ids else np.zeros(0, np.int64)
            self.split.load_rows(torch.from_numpy(flat).to(ctx.device))
        micro = np.array_split(batch, self.micro_per_step)[ctx.rank * config.grad_accum : (ctx.rank + 1) * config.grad_accum]
        loss_sum = torch.zeros((), device=ctx.device)
        for index, part in enumerate(micro):
            last = index == len(micro) - 1
            with contextlib.nullcontext() if last or ctx.world == 1 else self.ddp_model.no_sync():
                tensors = collate(units, part, views[part], self.pad_id, ctx.device)
                with torch.autocast(ctx.device.type, dtype=self.dtype, enabled=self.dtype is not None):
                    logits = output_rows(self.ddp_model, tensors)
                loss = torch.nn.functional.cross_entropy(logits.float(), tensors.targets, reduction="sum", ignore_index=-100)
                loss = loss * (ctx.world / n_targets)  # see the module docstring
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            loss_sum += loss.detach()
        if self.scaler is not None:
            for opt in self.optimizers:
                self.scaler.unscale_(opt)
        grad_norm = None
        if config.max_grad_norm > 0:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.trainable, config.max_grad_norm))
        for opt in self.optimizers:
            if self.scaler is not None:
                self.scaler.step(opt)
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.update()
        for scheduler in self.schedulers:
            scheduler.step()
        return float(ctx.all_reduce_sum(loss_sum).item()) / ctx.world, grad_norm

    def finish(self) -> None:
        """Back to a plain, saveable transformers model in eval mode."""
        from greenadapt.finetune import embeddings

        embeddings.merge_back(self.model)
        self.model.eval()


__all__ = [
    "VIEW_DOMAIN",
    "VIEW_GENERAL",
    "DistContext",
    "TrainConfig",
    "TrainResult",
    "choose_views",
    "collate",
    "init_distributed",
    "length_grouped_batches",
    "output_rows",
    "plan_steps",
    "train",
]
