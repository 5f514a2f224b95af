"""The one optimizer-step tail every training loop uses: clip, step, zero, schedule."""

from __future__ import annotations

import pytest
import torch

from greenadapt.training.step import optimizer_step


def _setup(lr: float = 0.1) -> tuple[torch.nn.Linear, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(layer.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    (layer(torch.ones(2, 4)).sum() * 100).backward()
    return layer, optimizer, scheduler


def test_clips_to_the_norm_steps_zeroes_and_schedules() -> None:
    layer, optimizer, scheduler = _setup()
    before = [p.detach().clone() for p in layer.parameters()]
    raw = torch.cat([p.grad.flatten() for p in layer.parameters()]).norm().item()
    norm = optimizer_step([optimizer], [scheduler], list(layer.parameters()), max_grad_norm=1.0)
    assert float(norm) == pytest.approx(raw)  # the norm before clipping is reported
    moved = torch.cat([(b - p.detach()).flatten() for b, p in zip(before, layer.parameters(), strict=True)]).norm().item()
    assert moved == pytest.approx(0.1 * 1.0, rel=1e-4)  # SGD moved by lr x the clipped norm
    assert all(p.grad is None for p in layer.parameters())
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)  # the scheduler stepped once


def test_no_clipping_when_the_limit_is_zero() -> None:
    layer, optimizer, scheduler = _setup()
    before = [p.detach().clone() for p in layer.parameters()]
    grads = [p.grad.clone() for p in layer.parameters()]
    assert optimizer_step([optimizer], [scheduler], list(layer.parameters()), max_grad_norm=0.0) is None
    for b, g, p in zip(before, grads, layer.parameters(), strict=True):
        assert torch.allclose(b - 0.1 * g, p.detach())
