"""`greenadapt second-view`: a model with a second tokenizer over its own vocabulary (no corpus, no new rows)."""

from __future__ import annotations

from typing import Any

from greenadapt import api
from greenadapt.adaptation.settings import SecondViewSettings
from greenadapt.cli._build import declared_command
from greenadapt.cli._common import show_stage


def _summary(outcome: Any) -> str:
    stats = outcome.manifest.get("stats") or {}
    state = "up to date" if outcome.skipped else "wrote"
    return (f"{state} {outcome.path}: a second tokenizer without {stats.get('pieces_dropped', 0):,} of the "
            f"{stats.get('vocab_size', 0):,} pieces (e.g. {', '.join(stats.get('examples') or [])}); no new rows")


declared_command(SecondViewSettings, api.second_view, show_stage(_summary),
                 help="Give a model a second tokenizer over its own vocabulary (no corpus, no new rows): the control for two-view "
                      "averaging.")
