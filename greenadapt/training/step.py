"""The end of one optimizer step, shared by every training loop.

After the backward passes of a step's micro-batches: unscale the gradients
when an fp16 ``GradScaler`` is in use (so clipping sees true magnitudes),
clip their global norm to ``max_grad_norm`` (0 or less: no clipping), step
each optimizer (through the scaler, which skips a step with inf/NaN
gradients), zero the gradients, update the scaler, then step each
learning-rate scheduler.

Nothing here waits for a GPU: the norm comes back as a tensor, so a GPU
loop can queue its next step before this one has finished (the runtime reads
norms and losses in batches, :mod:`greenadapt.training.runtime`). On a CPU,
where reading it costs nothing, gradients within the bound are left alone
instead of multiplied by 1 (a pass over every weight's gradient).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def optimizer_step(
    optimizers: Sequence[Any],
    schedulers: Iterable[Any],
    parameters: Iterable[Any],
    *,
    max_grad_norm: float,
    scaler: Any = None,
) -> Any:
    """Finish one optimizer step; the gradients' global norm before clipping (a 0-d tensor; None when not clipped)."""

    if scaler is not None:
        for optimizer in optimizers:
            scaler.unscale_(optimizer)
    grad_norm = _clip(list(parameters), max_grad_norm) if max_grad_norm > 0 else None
    for optimizer in optimizers:
        if scaler is not None:
            scaler.step(optimizer)
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.update()
    for scheduler in schedulers:
        scheduler.step()
    return grad_norm


def _clip(parameters: list[Any], max_grad_norm: float) -> Any:
    """``torch.nn.utils.clip_grad_norm_``, the same norm and the same clipped gradients, without the multiplication by
    a coefficient of 1 when every gradient is on the CPU."""
    import torch

    grads = [p.grad for p in parameters if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads)
    if grads and all(g.device.type == "cpu" for g in grads) and float(max_grad_norm / (total + 1e-6)) >= 1.0:
        return total  # torch clamps this coefficient to 1: the multiplication would change nothing
    torch.nn.utils.clip_grads_with_norm_(parameters, max_grad_norm, total)
    return total
