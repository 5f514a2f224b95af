"""`greenadapt expand`: write the domain-adapted model folder."""

from __future__ import annotations

from typing import Any

from greenadapt import api
from greenadapt.adaptation.settings import ExpandSettings
from greenadapt.artifacts.manifest import Manifest
from greenadapt.cli._build import declared_command
from greenadapt.cli._common import show_stage, what_changed


def _summary(outcome: Any) -> str:
    stats = Manifest.of(outcome.manifest, outcome.path).stats
    state = "up to date" if outcome.skipped else "done"
    return (
        f"expand {state}: {stats.get('n_new', 0):,} new rows "
        f"(vocabulary {stats.get('vocab_size_before', 0):,} -> {stats.get('vocab_size_after', 0):,}) -> {outcome.path}"
    ) + what_changed(stats)


declared_command(ExpandSettings, api.expand, show_stage(_summary),
                 help="Add the aligned vectors of new words as embedding rows, with a domain tokenizer that keeps them whole.")
