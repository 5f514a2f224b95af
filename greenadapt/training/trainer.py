"""One optimizer step (the first owner of the training runtime, greenadapt.training.runtime): seeds, device and DDP, the
optimizers and schedule, micro-batches under autocast, the fp16 loss scaler, and optimizer_step."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from greenadapt.errors import UsageError
from greenadapt.training.config import LoopSettings, filled
from greenadapt.compute.distributed import DistContext, autocast, autocast_dtype, grad_scaler
from greenadapt.training.optimizers import build_optimizers
from greenadapt.training.step import optimizer_step

log = logging.getLogger(__name__)

SHAPES_AT_MOST = 64  # batch shapes a --cuda-graphs run may capture a graph for (--pad-to-multiple keeps them few)


C = TypeVar("C", bound=LoopSettings, covariant=True)  # the command's settings: its task reads its own options there


class Trainer(Generic[C]):
    """Optimizers, schedule, mixed precision and DDP around one model: one :meth:`step` per optimizer step.

    ``split``: the row-wise trained added rows (:func:`greenadapt.modeling.embeddings.install`),
    already installed in ``model``. ``broadcast_buffers=False`` when a buffer is
    updated identically by every process (finetune's added-row table).
    """

    def __init__(
        self,
        model: Any,
        config: C,
        ctx: DistContext,
        *,
        total_steps: int,
        split: Any = None,
        broadcast_buffers: bool = True,
    ) -> None:
        import torch

        self.model, self.config, self.ctx, self.split = model, config, ctx, split
        self.micro_per_step = ctx.world * config.grad_accum
        if filled(config.batch_size) < self.micro_per_step:
            raise UsageError(
                f"--batch-size {config.batch_size} is smaller than processes × --grad-accum ({self.micro_per_step})",
                hint="--batch-size is the global batch of one optimizer step",
            )
        torch.manual_seed(config.seed + ctx.rank)  # dropout differs per process, the weights do not (DDP)
        model.to(ctx.device)
        model.train()
        if ctx.device.type == "cpu":
            from greenadapt.training.cpu_kernels import use_cpu_kernels

            use_cpu_kernels(model, dropout_masks=config.dropout_masks, world=ctx.world)
        self.module = model  # what the forward pass goes through: the model, or DDP around it
        if ctx.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
            self.module = DistributedDataParallel(model, device_ids=device_ids, broadcast_buffers=broadcast_buffers)
        mode = config.compile_mode()
        if mode is not None:
            # Compiled lazily: the first steps (and the first of each new batch shape) pay the compilation;
            # --pad-to-multiple keeps the shapes few.
            log.info("torch.compile (mode %s): the first training steps compile the model", mode)
            if config.cuda_graphs:
                # One graph per batch shape (widths x the epoch's last, shorter batch): more than dynamo's default 8.
                import torch._dynamo.config as dynamo

                dynamo.recompile_limit = max(dynamo.recompile_limit, SHAPES_AT_MOST)
            self.module = torch.compile(self.module, mode=mode, dynamic=False if config.cuda_graphs else None)
        self.total_steps = total_steps
        self.optimizers, self.schedulers = build_optimizers(model, split, config, total_steps)
        self.dtype = autocast_dtype(config.precision, ctx.device)
        self.scaler = grad_scaler(self.dtype, ctx.device)
        self.trainable = [p for p in model.parameters() if p.requires_grad]

    def lr(self) -> float:
        return float(self.schedulers[0].get_last_lr()[0])

    def my_parts(self, batch: np.ndarray) -> list[np.ndarray]:
        """This process's micro-batches of the global ``batch`` (see the module docstring)."""
        rank, accum = self.ctx.rank, self.config.grad_accum
        return np.array_split(batch, self.micro_per_step)[rank * accum : (rank + 1) * accum]

    def load_rows(self, ids: Sequence[np.ndarray]) -> None:
        """Before a step: gather the added rows the step's domain-tokenized inputs use (row-wise training)."""
        if self.split is None:
            return
        self.split.load_rows(np.concatenate(ids) if ids else np.zeros(0, np.int64))

    def step(self, parts: Sequence[Any], loss_of: Callable[[Any], Any], *,
             before_update: Callable[[], None] | None = None) -> tuple[Any, Any]:
        """Forward/backward each of ``parts`` (``loss_of(part)``: its share of the step's loss), then one optimizer step.

        Returns the step's loss summed over every process's parts (divided by the
        world size, since each part's loss carries the factor W) and the
        gradients' norm before clipping (None without clipping), as 0-d tensors on
        the device: reading them waits for the step to finish (see :class:`_Loop`).
        """
        import torch

        ctx = self.ctx
        loss_sum = torch.zeros((), device=ctx.device)
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            with contextlib.nullcontext() if last or ctx.world == 1 else self.module.no_sync():
                if self.config.cuda_graphs:  # a new iteration: the graphs' previous outputs may be overwritten
                    torch.compiler.cudagraph_mark_step_begin()
                with autocast(ctx.device, self.dtype):
                    loss = loss_of(part)
                (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            loss_sum += loss.detach()
        if before_update is not None:
            before_update()
        grad_norm = optimizer_step(self.optimizers, self.schedulers, self.trainable, max_grad_norm=self.config.max_grad_norm,
                                   scaler=self.scaler)
        return ctx.all_reduce_sum(loss_sum) / ctx.world, grad_norm

    def state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """What a checkpoint needs of the step: tensors (for ``optimizer.pt``) and the JSON-able rest."""
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
