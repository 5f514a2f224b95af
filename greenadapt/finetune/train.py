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

Checkpoints: with a :class:`Checkpointing`, ``train`` saves everything the
rest of the run depends on (weights, both optimizers including the lazy
per-row state, schedulers, the grad scaler, the python/numpy/torch random
states, the epoch and the position in its batch list, the best-on-dev
weights, the log so far), so a resumed run takes the same steps with the
same numbers as one never stopped. SIGTERM (:class:`StopSignal`) is turned
into "save a checkpoint before the next step, then raise :class:`Preempted`".
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from greenadapt.finetune.health import TrainingHealth
from greenadapt.defaults import DEFAULT_SEED
from greenadapt.errors import StageError, UsageError
from greenadapt.finetune.tokenize import VIEW_DOMAIN, VIEW_GENERAL, Unit
from greenadapt.progress import NULL_PROGRESS, Progress, StepRate
from greenadapt.training.checkpoint import (
    CHECKPOINT_FORMAT,
    Checkpointing,
    StopSignal,
    gather_rng_states,
    matching_checkpoint,
    restore_rng_states,
    rng_checkpoint_entries,
    write_checkpoint,
)
from greenadapt.training.distributed import DistContext, autocast_dtype, grad_scaler
from greenadapt.training.step import optimizer_step

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
    seed: int = DEFAULT_SEED
    train_embeddings: str = "all"
    precision: str = "auto"  # auto | fp32 | bf16 | fp16
    eval_batch_size: int = 64


# --------------------------------------------------------------------------
# Processes and devices


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
    memory: dict[str, Any] | None = None  # G-MAP: general_input_ids / general_attention_mask / general_token_type_ids

    def model_inputs(self) -> dict[str, Any]:
        inputs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "token_type_ids": self.token_type_ids}
        return inputs if self.memory is None else {**inputs, **self.memory}


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

    memory = None
    if units[indices[0]].memory_ids is not None:
        memory = {k: to(v) for k, v in memory_arrays([units[i] for i in indices], pad_id).items()}
    return Batch(to(input_ids), to(attention), to(type_ids), to(np.concatenate(rows)), to(np.concatenate(targets)), memory)


def memory_arrays(units: Sequence[Unit], pad_id: int) -> dict[str, np.ndarray]:
    """G-MAP: the general model's padded inputs (its own length, independent of the domain view's)."""
    width = max(len(u.memory_ids) for u in units)  # type: ignore[arg-type]
    ids = np.full((len(units), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(units), width), dtype=np.int64)
    types = np.zeros((len(units), width), dtype=np.int64)
    for b, unit in enumerate(units):
        if unit.memory_ids is None:
            raise ValueError("some units of a batch have a G-MAP memory input and some do not")
        n = len(unit.memory_ids)
        ids[b, :n] = unit.memory_ids
        mask[b, :n] = 1
        if unit.memory_type_ids is not None:
            types[b, :n] = unit.memory_type_ids
    return {"general_input_ids": ids, "general_attention_mask": mask, "general_token_type_ids": types}


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
    warnings: list[str] = field(default_factory=list)  # from greenadapt.finetune.health


def plan_steps(n_units: int, config: TrainConfig) -> tuple[int, int]:
    """(steps per epoch, total steps)."""
    per_epoch = max(1, math.ceil(n_units / config.batch_size))
    total = config.max_steps if config.max_steps is not None else per_epoch * config.epochs
    return per_epoch, max(1, total)


# --------------------------------------------------------------------------
# Pre-emption and checkpoints

_WEIGHTS, _BEST, _TENSORS, _STATE, _LOG = "model.safetensors", "best.safetensors", "optimizer.pt", "state.json", "train_log.jsonl"


@dataclass
class _Position:
    """Where training stands: what a resumed run continues from."""

    step: int = 0
    epoch: int = 0
    batch: int = 0  # index, in this epoch's batch list, of the next batch to train on
    domain_units: int = 0
    seen_units: int = 0
    seconds: float = 0.0


def _save_checkpoint(
    checkpoint: Checkpointing,
    stepper: _Stepper,
    position: _Position,
    result: TrainResult,
    best_state: dict[str, Any] | None,
    log_path: Path | None,
    *,
    complete: bool,
    rank_rng: list[dict[str, Any]] | None = None,
) -> Path:
    """Write one checkpoint atomically (temporary folder, manifest last, rename) and drop the older ones.

    ``rank_rng`` (from :func:`gather_rng_states`): every process's random
    states; the tensors go into ``optimizer.pt``, the rest into ``state.json``.
    """
    import torch
    from safetensors.torch import save_file

    def fill(tmp: Path) -> None:
        # Copies break tied weights' shared storage, which safetensors refuses to write.
        weights = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in stepper.model.state_dict().items()}
        save_file(weights, str(tmp / _WEIGHTS))
        if best_state is not None:
            save_file({k: v.contiguous() for k, v in best_state.items()}, str(tmp / _BEST))
        tensors, state = stepper.state()
        rng_tensors, rng_state = rng_checkpoint_entries(stepper.ctx, rank_rng)
        tensors.update(rng_tensors)
        state.update(rng_state)
        torch.save(tensors, tmp / _TENSORS)
        state.update(
            {
                "format": CHECKPOINT_FORMAT,
                "fingerprint": checkpoint.fingerprint,
                "seed": stepper.config.seed,
                "complete": complete,
                "position": asdict(position),
                "result": {"best_epoch": result.best_epoch, "best_score": result.best_score, "dev_history": result.dev_history},
            }
        )
        (tmp / _STATE).write_text(json.dumps(state, allow_nan=True) + "\n", encoding="utf-8")
        if log_path is not None and log_path.is_file():
            shutil.copyfile(log_path, tmp / _LOG)

    return write_checkpoint(checkpoint, position.step, fill, complete=complete)


@dataclass
class _Restored:
    path: Path
    position: _Position
    result: dict[str, Any]
    best_state: dict[str, Any] | None
    complete: bool


def _load_checkpoint(checkpoint: Checkpointing, stepper: _Stepper, log_path: Path | None) -> _Restored | None:
    """Put the newest checkpoint's state into ``stepper`` (and the random generators); None when there is none."""
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
        if state.get("seed") != stepper.config.seed:
            raise StageError(f"this checkpoint is of seed {state.get('seed')}, not {stepper.config.seed}", path=path, hint=hint)
        # weights_only: a checkpoint folder is an input like any other and must not run code.
        tensors = torch.load(path / _TENSORS, map_location="cpu", weights_only=True)
        stepper.model.load_state_dict(load_file(str(path / _WEIGHTS), device=str(stepper.ctx.device)))
        best = load_file(str(path / _BEST)) if (path / _BEST).is_file() else None
        position = _Position(**state["position"])
        stepper.load_state(tensors, state)
        restore_rng_states(tensors, state, stepper.ctx, path, seed=stepper.config.seed, step=position.step)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, pickle.UnpicklingError, SafetensorError) as exc:
        # UnpicklingError: weights_only refused an object; RuntimeError: tensors that do not fit this model.
        raise StageError(f"unreadable checkpoint: {' '.join(str(exc).split())[:300]}", path=path, hint=hint) from None
    if log_path is not None and (path / _LOG).is_file():
        shutil.copyfile(path / _LOG, log_path)
    log.info("resuming from %s: step %d, epoch %d", path, position.step, position.epoch + 1)
    return _Restored(path, position, state["result"], best, bool(state.get("complete")))


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
    checkpoint: Checkpointing | None = None,
    stop: StopSignal | None = None,
) -> TrainResult:
    """Fine-tune ``model`` in place; with ``evaluate`` (dev score, details) keep the best epoch's weights.

    The best epoch's weights are held as a CPU copy of the state dict (with a
    very large added vocabulary that copy includes the whole added-row table).
    With ``checkpoint``, state is saved every ``save_every`` steps and, with
    ``resume``, training continues from the newest checkpoint; with ``stop``,
    SIGTERM saves a checkpoint before the next step and raises :class:`Preempted`.
    """
    mix = config.mix or 0.0
    if mix > 0 and not has_domain:
        raise UsageError("--mix > 0 needs a model folder with a domain tokenizer")
    if stop is not None:
        stop.defer()
        if stop.requested(ctx):
            raise stop.stopped(f"before training seed {config.seed}")
    stepper = _Stepper(model, units, config, ctx, pad_id=pad_id, n_base_rows=n_base_rows)
    _, total_steps = plan_steps(len(units), config)
    result = TrainResult(steps=0, epochs_run=0, best_epoch=None, best_score=None)
    best_state: dict[str, Any] | None = None
    health = TrainingHealth()
    at = _Position()
    restored = _load_checkpoint(checkpoint, stepper, log_path if ctx.is_main else None) if checkpoint and checkpoint.resume else None
    if restored is not None:
        at, best_state = restored.position, restored.best_state
        result.best_epoch, result.best_score = restored.result["best_epoch"], restored.result["best_score"]
        result.dev_history = list(restored.result["dev_history"])
    writes = checkpoint is not None and checkpoint.writer

    def save(*, complete: bool = False) -> Path | None:
        saved = None
        rank_rng = gather_rng_states(ctx) if checkpoint is not None else None  # every process takes part
        if writes:
            if log_handle is not None:
                log_handle.flush()
            at.seconds = time.perf_counter() - started
            saved = _save_checkpoint(checkpoint, stepper, at, result, best_state, log_path, complete=complete, rank_rng=rank_rng)  # type: ignore[arg-type]
        ctx.barrier()  # no process may exit (and have torchrun stop the others) before rank 0 has saved
        return saved

    mode = "a" if restored is not None else "w"
    log_handle = open(log_path, mode, encoding="utf-8") if log_path is not None and ctx.is_main else None
    started = time.perf_counter() - at.seconds
    progress.start(f"fine-tuning (seed {config.seed})", total=total_steps, unit="steps")
    rate = StepRate(at.step)
    if at.step:
        progress.update(at.step)
    try:
        while at.step < total_steps:
            views = choose_views(len(units), mix, config.seed, at.epoch)
            lengths = np.array([len(u.ids[v]) for u, v in zip(units, views, strict=True)])
            batches = length_grouped_batches(lengths, config.batch_size, config.seed, at.epoch)
            for index in range(at.batch, len(batches)):
                if at.step >= total_steps:
                    break
                if stop is not None and stop.requested(ctx):
                    at.batch = index
                    raise stop.stopped(f"at step {at.step} of {total_steps} (seed {config.seed})", save())
                batch = batches[index]
                if len(batch) < stepper.micro_per_step:
                    continue  # an epoch's last, tiny batch that cannot give every process a micro-batch
                loss, grad_norm = stepper.step(batch, views)
                health.record_loss(loss)
                at.step += 1
                at.domain_units += int(views[batch].sum())
                at.seen_units += len(batch)
                if log_handle is not None:
                    record = {
                        "step": at.step,
                        "epoch": at.epoch + 1,
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
                        f"the training loss became {loss} at step {at.step}", hint="lower --lr, or use --precision fp32 or bf16"
                    )
                if checkpoint is not None and checkpoint.save_every and at.step % checkpoint.save_every == 0 and at.step < total_steps:
                    at.batch = index + 1
                    save()
                shown = {"loss": f"{loss:.4f}", "steps_per_s": rate.per_second(at.step)}
                if result.dev_history:
                    shown["dev"] = f"{result.dev_history[-1]['score']:.4f}"
                progress.update(at.step, **shown)
            at.epoch += 1
            at.batch = 0
            if evaluate is None:
                health.evaluated()
                continue
            model.eval()
            score, details = evaluate(model)
            model.train()
            health.evaluated(score)
            result.dev_history.append({"epoch": at.epoch, "step": at.step, "score": score, **details})
            if log_handle is not None:
                log_handle.write(json.dumps({"event": "dev", "epoch": at.epoch, "step": at.step, "score": score}) + "\n")
            if result.best_score is None or score > result.best_score:
                result.best_score, result.best_epoch = score, at.epoch
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            log.info("epoch %d: dev score %.4f (best %.4f, epoch %d)", at.epoch, score, result.best_score, result.best_epoch)
        if checkpoint is not None and checkpoint.save_final and not (restored is not None and restored.complete):
            save(complete=True)
    finally:
        progress.finish()
        if log_handle is not None:
            log_handle.close()
    if best_state is not None and result.best_epoch != at.epoch:
        model.load_state_dict(best_state)
        log.info("restored the weights of epoch %d (best on dev)", result.best_epoch)
    stepper.finish()
    result.steps, result.epochs_run = at.step, at.epoch
    result.seconds = time.perf_counter() - started
    result.domain_fraction = at.domain_units / at.seen_units if at.seen_units else 0.0
    result.warnings = health.warnings
    return result


NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")


def build_optimizers(model: Any, split: Any, config: TrainConfig, total: int) -> tuple[list[Any], list[Any]]:
    """AdamW (norms and biases not decayed), RowAdamW for row-wise trained added rows, linear warm-up schedule."""
    import torch

    from greenadapt.finetune import embeddings

    active = split.active if split is not None else None
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p is not active]
    optimizers: list[Any] = [
        torch.optim.AdamW(
            [
                {"params": [p for n, p in named if not n.endswith(NO_DECAY)], "weight_decay": config.weight_decay},
                {"params": [p for n, p in named if n.endswith(NO_DECAY)], "weight_decay": 0.0},
            ],
            lr=config.lr,
        )
    ]
    if split is not None:
        optimizers.append(embeddings.RowAdamW(split, lr=config.lr, weight_decay=config.weight_decay))
    warmup = int(round(config.warmup * total))

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    return optimizers, [torch.optim.lr_scheduler.LambdaLR(optimizer, schedule) for optimizer in optimizers]


class _Stepper:
    """Optimizers, schedule, mixed precision and DDP around one model: one call per optimizer step."""

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
        # A G-MAP model's word embeddings are its domain model's; the general model keeps its own.
        self.split = embeddings.install(
            getattr(model, "domain", model), n_base=n_base_rows, mode=config.train_embeddings, capacity=config.batch_size * longest
        )
        model.train()
        self.ddp_model = model
        if ctx.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            # broadcast_buffers=False: the added-row table is a buffer; every process updates it identically.
            device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
            self.ddp_model = DistributedDataParallel(model, device_ids=device_ids, broadcast_buffers=False)

        _, total = plan_steps(len(units), config)
        self.optimizers, self.schedulers = build_optimizers(model, self.split, config, total)
        self.dtype = autocast_dtype(config.precision, ctx.device)
        self.scaler = grad_scaler(self.dtype, ctx.device)
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
        grad_norm = optimizer_step(self.optimizers, self.schedulers, self.trainable, max_grad_norm=config.max_grad_norm, scaler=self.scaler)
        return float(ctx.all_reduce_sum(loss_sum).item()) / ctx.world, grad_norm

    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """What a checkpoint needs besides the weights and random states: tensors (for torch.save) and the JSON-able rest."""
        tensors: dict[str, Any] = {"optimizers": [opt.state_dict() for opt in self.optimizers]}
        state = {
            "schedulers": [scheduler.state_dict() for scheduler in self.schedulers],
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
        }
        return tensors, state

    def load_state(self, tensors: dict[str, Any], state: dict[str, Any]) -> None:
        if len(tensors["optimizers"]) != len(self.optimizers) or len(state["schedulers"]) != len(self.schedulers):
            raise ValueError(f"the checkpoint holds {len(tensors['optimizers'])} optimizers, this run has {len(self.optimizers)}")
        for optimizer, saved in zip(self.optimizers, tensors["optimizers"], strict=True):
            optimizer.load_state_dict(saved)
        for scheduler, saved in zip(self.schedulers, state["schedulers"], strict=True):
            scheduler.load_state_dict(saved)
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])

    def finish(self) -> None:
        """Back to a plain, saveable transformers model in eval mode."""
        from greenadapt.finetune import embeddings

        embeddings.merge_back(getattr(self.model, "domain", self.model))
        self.model.eval()


__all__ = [
    "VIEW_DOMAIN",
    "VIEW_GENERAL",
    "TrainConfig",
    "TrainResult",
    "choose_views",
    "collate",
    "length_grouped_batches",
    "output_rows",
    "plan_steps",
    "train",
]
