"""Warnings when training is not learning (every loop of the runtime): a dev score stuck at 0, or a loss that has not fallen.

Checked at each evaluation (the end of an epoch). After :data:`PATIENCE`
evaluations:

- every dev score so far is 0;
- the mean loss of the last :data:`WINDOW` steps is not at least
  :data:`MIN_DROP` below the mean of the first :data:`WINDOW` steps.

Each kind is warned about once, with the figures and the usual causes; the
warnings are also kept for the run's manifest (fine-tuning records them). Nothing stops the run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

PATIENCE = 2
WINDOW = 20
MIN_DROP = 0.05  # a relative drop of 5%
CAUSES = "usual causes: a learning rate too low or too high (--lr), labels that do not match the text, or --max-length cutting the labelled words off"


@dataclass
class TrainingHealth:
    losses: list[float] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    evaluations: int = 0
    warnings: list[str] = field(default_factory=list)

    def record_loss(self, loss: float) -> None:
        self.losses.append(loss)

    def evaluated(self, score: float | None = None) -> list[str]:
        """After an evaluation (or an epoch without one): the new warnings (also logged)."""
        self.evaluations += 1
        if score is not None:
            self.scores.append(score)
        new = []
        if self.evaluations >= PATIENCE:
            if len(self.scores) >= PATIENCE and all(s == 0 for s in self.scores) and not self._said("dev score"):
                new.append(f"the dev score has stayed 0 after {len(self.scores)} evaluations ({len(self.losses)} steps); {CAUSES}")
            if len(self.losses) >= 2 * WINDOW and not self._said("loss"):
                first = sum(self.losses[:WINDOW]) / WINDOW
                last = sum(self.losses[-WINDOW:]) / WINDOW
                if last > first * (1 - MIN_DROP):
                    new.append(
                        f"the training loss has not fallen after {len(self.losses)} steps (mean {first:.4f} over the first "
                        f"{WINDOW} steps, {last:.4f} over the last {WINDOW}); {CAUSES}"
                    )
        for warning in new:
            log.warning("training: %s", warning)
        self.warnings.extend(new)
        return new

    def _said(self, what: str) -> bool:
        return any(what in w for w in self.warnings)
