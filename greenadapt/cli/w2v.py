"""`greenadapt w2v`: CBOW word2vec on a domain corpus, in the model's own words."""

from __future__ import annotations

from typing import Any

from greenadapt import api
from greenadapt.adaptation.settings import W2vSettings
from greenadapt.cli._build import declared_command
from greenadapt.cli._common import show_stage


def _summary(outcome: Any) -> str:
    from greenadapt.adaptation.w2v import summary_line

    return summary_line(outcome)


declared_command(W2vSettings, api.w2v, show_stage(_summary),
                 help="Pre-tokenize the corpus with the model's normalizer (cached) and train CBOW word2vec on it.")
