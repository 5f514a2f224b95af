"""Paired statistics for "did adaptation help?": differences over seeds and a paired bootstrap over test examples.

Two sources of uncertainty, kept apart because seeds are expensive and test
sets are small:

- **seeds**: fine-tuning the same model twice with two seeds moves a score by
  about as much as the method does. The per-seed paired differences
  (variant − baseline, same seed, same test set) get a Student-t 95% interval
  over the seeds (two or more).
- **test examples**: the test set is a sample too. Each bootstrap replicate
  draws one set of test-example indices with replacement and scores *both*
  models of *every* seed on it (a paired bootstrap), so even one seed gives
  an interval; the replicate's difference is the mean over seeds.

A difference is called significant at 95% only when every interval that
applies excludes 0: the test-set interval, and the seed interval once two
seeds or more are in. A tie is never rounded into a win.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

LEVEL = 0.95
DEFAULT_REPLICATES = 1000
NOT_A_VERDICT = "not a verdict"  # how a pair's note starts when a run of the pair learned nothing (comparison/health.py)


@dataclass(frozen=True)
class Contributions:
    """What one model's predictions on a test set add to the metric, example by example.

    ``values`` is (examples, k); ``metric`` turns the column sums of any subset
    (rows picked with repetition) into the score, so a resample is rescored
    exactly, without rerunning the model: entity F1 from summed
    (correct, predicted, gold) counts, accuracy from summed (right, 1).
    """

    values: np.ndarray
    metric: Callable[[np.ndarray], float]

    def score(self, rows: np.ndarray | None = None) -> float:
        picked = self.values if rows is None else self.values[rows]
        return self.metric(picked.sum(axis=0))

    def scores(self, replicates: np.ndarray) -> np.ndarray:
        """The score of each bootstrap replicate: ``replicates`` is (B, examples) of row indices."""
        sums = self.values[replicates].sum(axis=1)  # (B, k)
        return np.array([self.metric(row) for row in sums])


@dataclass
class PairedResult:
    """``variant`` against ``baseline`` on the seeds both finished."""

    variant: str
    baseline: str
    metric: str
    seeds: list[int]
    differences: list[float]  # per seed, variant − baseline, on the metric's scale
    mean: float
    seed_interval: tuple[float, float] | None  # Student t over seeds; None with one seed
    bootstrap_interval: tuple[float, float] | None  # paired bootstrap over test examples; None without per-example data
    replicates: int = 0
    significant: bool = False
    notes: list[str] = field(default_factory=list)
    strata: list[dict[str, Any]] = field(default_factory=list)  # NER: the difference by kind of test mention (comparison/strata.py)

    def verdict(self, scale: float = 100.0, unit: str = "") -> str:
        """One line, e.g. ``green vs base: +0.98 F1 [-0.01, +1.54] over 3 seeds; not significant at 95%``."""
        def signed(x: float) -> str:
            return f"{x * scale:+.2f}"

        name = unit or self.metric
        shown = self.seed_interval or self.bootstrap_interval
        where = f" [{signed(shown[0])}, {signed(shown[1])}]" if shown is not None else ""
        seeds = f"over {len(self.seeds)} seed{'s' * (len(self.seeds) != 1)}"
        extra = ""
        if self.seed_interval is not None and self.bootstrap_interval is not None:
            extra = f"; test-set bootstrap [{signed(self.bootstrap_interval[0])}, {signed(self.bootstrap_interval[1])}]"
        elif self.seed_interval is None and self.bootstrap_interval is not None:
            extra = " (test-set bootstrap: one seed says nothing of seed variance)"
        if self.not_a_verdict:  # the figures stay for the record; no call is made on them
            return f"{self.variant} vs {self.baseline}: not a verdict ({signed(self.mean)} {name}{where} {seeds}): a run learned nothing"
        call = "significant at 95%" if self.significant else "not significant at 95%"
        return f"{self.variant} vs {self.baseline}: {signed(self.mean)} {name}{where} {seeds}{extra}; {call}"

    @property
    def not_a_verdict(self) -> bool:
        """Whether a run of either model learned nothing (a note says which): no call is made on the pair, nor on its strata."""
        return any(note.startswith(NOT_A_VERDICT) for note in self.notes)

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "baseline": self.baseline, "metric": self.metric, "seeds": self.seeds,
            "differences": self.differences, "mean": self.mean,
            "seed_interval95": list(self.seed_interval) if self.seed_interval else None,
            "bootstrap_interval95": list(self.bootstrap_interval) if self.bootstrap_interval else None,
            "bootstrap_replicates": self.replicates, "significant95": self.significant and not self.not_a_verdict, "notes": self.notes,
            **({"not_a_verdict": True} if self.not_a_verdict else {}),
            **({"strata": self.strata} if self.strata else {}),
        }


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    array = np.asarray(values, dtype=np.float64)
    return float(array.mean()), float(array.std(ddof=1)) if len(array) > 1 else 0.0


def t_interval(differences: Sequence[float], level: float = LEVEL) -> tuple[float, float] | None:
    """Student-t interval of the mean of paired differences over seeds; None for fewer than two."""
    n = len(differences)
    if n < 2:
        return None
    from scipy.stats import t

    mean, sd = mean_sd(differences)
    half = float(t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return mean - half, mean + half


def bootstrap_replicates(n_examples: int, replicates: int, seed: int) -> np.ndarray:
    """(replicates, n_examples) row indices drawn with replacement: the same draws serve every model and seed."""
    return np.random.default_rng(seed).integers(0, n_examples, size=(replicates, n_examples))


def paired_bootstrap(
    variant: Sequence[Contributions], baseline: Sequence[Contributions], *, replicates: int = DEFAULT_REPLICATES,
    seed: int = 0, level: float = LEVEL,
) -> tuple[tuple[float, float], np.ndarray]:
    """Percentile interval of the mean over seeds of (variant − baseline), resampling test examples.

    ``variant[i]`` and ``baseline[i]`` are the two models of seed i on the
    same test set; every replicate scores all of them on the same rows.
    """
    if len(variant) != len(baseline) or not variant:
        raise ValueError("one (variant, baseline) pair per seed is needed")
    n = len(variant[0].values)
    if any(len(c.values) != n for c in (*variant, *baseline)):
        raise ValueError("every model must be scored on the same test examples")
    rows = bootstrap_replicates(n, replicates, seed)
    differences = np.mean([v.scores(rows) - b.scores(rows) for v, b in zip(variant, baseline, strict=True)], axis=0)
    low, high = np.quantile(differences, [(1 - level) / 2, (1 + level) / 2])
    return (float(low), float(high)), differences


def compare_pair(
    variant: str, baseline: str, metric: str, scores: dict[int, tuple[float, float]],
    contributions: dict[int, tuple[Contributions, Contributions]] | None = None, *,
    replicates: int = DEFAULT_REPLICATES, seed: int = 0,
) -> PairedResult:
    """``scores[seed] = (variant's, baseline's)`` headline scores; ``contributions`` the same pairs, per example."""
    seeds = sorted(scores)
    differences = [scores[s][0] - scores[s][1] for s in seeds]
    mean = float(np.mean(differences)) if differences else float("nan")
    seed_interval = t_interval(differences)
    boot = None
    notes: list[str] = []
    if contributions and all(s in contributions for s in seeds):
        boot, _ = paired_bootstrap([contributions[s][0] for s in seeds], [contributions[s][1] for s in seeds],
                                   replicates=replicates, seed=seed)
    elif seeds:
        notes.append("no per-example predictions: the test-set bootstrap is missing")
    intervals = [i for i in (seed_interval, boot) if i is not None]
    significant = bool(intervals) and all(low > 0 or high < 0 for low, high in intervals) and mean != 0
    if len(seeds) == 1:
        notes.append("one seed: the interval covers the test set's sampling, not the seed's")
    return PairedResult(variant, baseline, metric, seeds, differences, mean, seed_interval, boot,
                        replicates if boot is not None else 0, significant, notes)
