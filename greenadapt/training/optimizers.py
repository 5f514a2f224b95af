"""The optimizers and learning-rate schedule of every training loop.

AdamW with no weight decay on biases and norms (fused into one kernel on a
GPU), :class:`~greenadapt.modeling.embeddings.RowAdamW` for added rows trained
row-wise, and a linear warm-up then linear decay to 0.
"""

from __future__ import annotations

from typing import Any

from greenadapt.training.config import LoopSettings, filled

NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")


def build_optimizers(model: Any, split: Any, config: LoopSettings, total: int) -> tuple[list[Any], list[Any]]:
    """AdamW (norms and biases not decayed), RowAdamW for row-wise trained added rows, linear warm-up schedule."""
    import torch

    from greenadapt.modeling import embeddings

    active = split.active if split is not None else None
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p is not active]
    # One fused kernel per step instead of several passes per parameter group (the same update up to rounding): always
    # on a GPU; on a CPU unless --adamw foreach (a fifth of a MiniLM step there; bench/profile_training.py).
    devices = {p.device.type for _, p in named}
    fused = bool(named) and (devices == {"cuda"} or (devices == {"cpu"} and config.adamw == "fused"))
    optimizers: list[Any] = [
        torch.optim.AdamW(
            [
                {"params": [p for n, p in named if not n.endswith(NO_DECAY)], "weight_decay": config.weight_decay},
                {"params": [p for n, p in named if n.endswith(NO_DECAY)], "weight_decay": 0.0},
            ],
            lr=filled(config.lr),
            fused=fused or None,  # None: torch's own choice (the CPU's for-each update)
        )
    ]
    if split is not None:
        optimizers.append(embeddings.RowAdamW(split, lr=filled(config.lr), weight_decay=config.weight_decay))
    warmup = int(round(config.warmup * total))

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    return optimizers, [torch.optim.lr_scheduler.LambdaLR(optimizer, schedule) for optimizer in optimizers]
