"""`greenadapt compare`: did adaptation help on my task? Paired over seeds and test examples, with the cost."""

from __future__ import annotations

import json
import sys
from typing import Any

from greenadapt import api
from greenadapt.cli._build import declared_command
from greenadapt.comparison.settings import CompareSettings


def _show(result: Any, as_json: bool) -> None:
    from greenadapt.comparison.display import render

    sys.stdout.write((json.dumps(result.to_json(), indent=2) if as_json else render(result)) + "\n")
    sys.stdout.flush()


declared_command(CompareSettings, api.compare, _show,
                 help="Fine-tune several models with one recipe and the same seeds; say whether each beat the baseline, and at what cost.")
