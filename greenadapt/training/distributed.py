"""Where a training process runs: rank, world size, device, mixed precision.

:func:`init_distributed` joins the process group ``torchrun`` (or ``accelerate
launch``) describes, or runs alone; every training loop uses its
:class:`DistContext` for the device and the all-reduces (no-ops alone).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from greenadapt.errors import UsageError
from greenadapt.expanded_model import pick_device

log = logging.getLogger(__name__)


def to_device(array: Any, device: Any) -> Any:
    """A NumPy array (or a CPU tensor) as a tensor on ``device``, without a host sync on CUDA.

    A copy from pageable memory to the GPU waits for the stream to drain, so a
    loop that copies its batch that way cannot queue the next step's kernels
    while the GPU runs this one; a copy from pinned memory is queued like a
    kernel (the caching host allocator keeps the buffer alive until it ends).
    """
    import torch

    tensor = array if isinstance(array, torch.Tensor) else torch.from_numpy(array)
    if torch.device(device).type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


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


def autocast(device: Any, dtype: Any) -> Any:
    """Autocast to ``dtype`` on ``device`` (from :func:`autocast_dtype`); a plain context for full fp32 (None),
    which also runs on devices autocast does not know, such as ``meta``."""
    import contextlib

    import torch

    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def grad_scaler(dtype: Any, device: Any) -> Any:
    """A loss scaler for fp16 autocast on ``device`` (None for bf16 and fp32, which need none)."""
    import torch

    return torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
