"""Which task each training step draws its batch from.

``p_i ∝ N_i^α`` over the tasks' training sizes N_i: ``proportional`` (α = 1),
``sqrt`` (α = 0.5), ``annealed`` (α = 1 − 0.8·(e − 1)/(E − 1) in epoch e of
E, 1-based; α = 1 when E = 1) and ``round-robin`` (tasks in turn, whatever
their sizes). Draws come from a generator seeded by (seed, epoch), so a run
is reproducible and an epoch's task order does not depend on the others.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from greenadapt.errors import UsageError
from greenadapt.runners.multitask.settings import SAMPLING

_TASK_STREAM = 0x7461736B


def check_sampling(mode: str) -> None:
    if mode not in SAMPLING:
        raise UsageError(f"unknown --sampling {mode!r}", hint=f"choose from {', '.join(SAMPLING)}")


def alpha(mode: str, epoch: int, epochs: int) -> float:
    """The exponent of ``mode`` in 1-based ``epoch`` of ``epochs``."""
    check_sampling(mode)
    if mode == "proportional":
        return 1.0
    if mode == "sqrt":
        return 0.5
    if mode == "annealed":
        return 1.0 if epochs <= 1 else 1.0 - 0.8 * (epoch - 1) / (epochs - 1)
    return 0.0  # round-robin: equal shares (drawn in turn, not at random)


def task_probabilities(sizes: Sequence[int], mode: str, epoch: int = 1, epochs: int = 1) -> np.ndarray:
    """The probability of each task in ``epoch``."""
    if not sizes or min(sizes) < 1:
        raise ValueError("every task needs at least one training example")
    weights = np.asarray(sizes, dtype=np.float64) ** alpha(mode, epoch, epochs)
    return weights / weights.sum()


def sample_tasks(sizes: Sequence[int], mode: str, *, steps: int, epoch: int, epochs: int, seed: int) -> np.ndarray:
    """The task index of each of ``steps`` steps of 1-based ``epoch``."""
    if mode == "round-robin":
        check_sampling(mode)
        start = (epoch - 1) * steps  # continue the cycle across epochs
        return (np.arange(start, start + steps) % len(sizes)).astype(np.int64)
    probabilities = task_probabilities(sizes, mode, epoch, epochs)
    rng = np.random.default_rng([seed, epoch, _TASK_STREAM])
    return rng.choice(len(sizes), size=steps, p=probabilities).astype(np.int64)


__all__ = ["SAMPLING", "alpha", "check_sampling", "sample_tasks", "task_probabilities"]
