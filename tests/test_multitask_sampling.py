"""Task sampling: the distributions of proportional, sqrt, annealed and round-robin."""

from __future__ import annotations

import numpy as np
import pytest

from greenadapt.errors import UsageError
from greenadapt.runners.multitask.sampling import alpha, sample_tasks, task_probabilities
from greenadapt.runners.multitask.train import TaskStream

SIZES = [2490, 3668, 8551, 5424]  # RTE, MRPC, CoLA, NCBI-disease training sizes


def test_probabilities_follow_n_to_the_alpha() -> None:
    sizes = np.array(SIZES, dtype=float)
    np.testing.assert_allclose(task_probabilities(SIZES, "proportional"), sizes / sizes.sum())
    np.testing.assert_allclose(task_probabilities(SIZES, "sqrt"), np.sqrt(sizes) / np.sqrt(sizes).sum())
    np.testing.assert_allclose(task_probabilities(SIZES, "round-robin"), np.full(4, 0.25))


def test_annealed_alpha_goes_from_1_to_0_2() -> None:
    assert alpha("annealed", 1, 5) == pytest.approx(1.0)
    assert alpha("annealed", 3, 5) == pytest.approx(0.6)
    assert alpha("annealed", 5, 5) == pytest.approx(0.2)
    assert alpha("annealed", 1, 1) == pytest.approx(1.0)  # one epoch: no annealing, no division by zero
    sizes = np.array(SIZES, dtype=float)
    np.testing.assert_allclose(task_probabilities(SIZES, "annealed", 5, 5), sizes**0.2 / (sizes**0.2).sum())
    # The largest task's share shrinks epoch by epoch.
    shares = [task_probabilities(SIZES, "annealed", e, 5)[2] for e in range(1, 6)]
    assert all(a > b for a, b in zip(shares, shares[1:], strict=False))


@pytest.mark.parametrize(("mode", "epoch", "epochs"), [("proportional", 1, 1), ("sqrt", 2, 3), ("annealed", 3, 4)])
def test_sampled_frequencies_match_the_distribution(mode: str, epoch: int, epochs: int) -> None:
    steps = 20_000
    draws = sample_tasks(SIZES, mode, steps=steps, epoch=epoch, epochs=epochs, seed=7)
    expected = task_probabilities(SIZES, mode, epoch, epochs)
    observed = np.bincount(draws, minlength=len(SIZES)) / steps
    sigma = np.sqrt(expected * (1 - expected) / steps)
    assert np.all(np.abs(observed - expected) < 5 * sigma), (observed, expected)


def test_sampling_is_seeded_and_differs_by_epoch() -> None:
    a = sample_tasks(SIZES, "sqrt", steps=200, epoch=1, epochs=3, seed=1)
    assert np.array_equal(a, sample_tasks(SIZES, "sqrt", steps=200, epoch=1, epochs=3, seed=1))
    assert not np.array_equal(a, sample_tasks(SIZES, "sqrt", steps=200, epoch=2, epochs=3, seed=1))
    assert not np.array_equal(a, sample_tasks(SIZES, "sqrt", steps=200, epoch=1, epochs=3, seed=2))


def test_round_robin_cycles_through_tasks_across_epochs() -> None:
    first = sample_tasks(SIZES, "round-robin", steps=6, epoch=1, epochs=2, seed=0)
    second = sample_tasks(SIZES, "round-robin", steps=6, epoch=2, epochs=2, seed=0)
    assert first.tolist() == [0, 1, 2, 3, 0, 1]
    assert second.tolist() == [2, 3, 0, 1, 2, 3]


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(UsageError, match="--sampling"):
        sample_tasks(SIZES, "uniform", steps=3, epoch=1, epochs=1, seed=0)


def test_task_stream_covers_every_unit_once_per_pass() -> None:
    stream = TaskStream(10, 4, mix=0.5, seed=3)
    seen = np.concatenate([stream.next()[0] for _ in range(3)])  # 4 + 4 + 2
    assert sorted(seen.tolist()) == list(range(10))
    first_views = stream.views.copy()
    stream.next()  # a new pass: new order, new views
    assert stream.passes == 1
    assert set(np.unique(first_views)) <= {0, 1}
