"""`greenadapt predict`: label a file with a fine-tuned model, pooling both tokenizers."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from typing import Any

from greenadapt import api
from greenadapt.cli._build import declared_command
from greenadapt.inference.settings import PredictSettings


def _check(values: Mapping[str, Any]) -> None:
    from greenadapt.errors import UsageError
    from greenadapt.inference.prediction_input import is_stdio

    if values["as_json"] and is_stdio(values["output"]):
        raise UsageError("--json prints a summary on stdout, where the predictions go", hint="add --out FILE")


def _show(result: Any, as_json: bool) -> None:
    from greenadapt.inference.prediction_input import is_stdio

    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
        return
    where = "stdout" if is_stdio(result.output) else result.output
    line = f"wrote {result.examples} prediction{'s' * (result.examples != 1)} ({result.pool} pooling, {result.format} input) to {where}"
    if result.entities is not None:
        line += f": {result.entities} entit{'y' if result.entities == 1 else 'ies'}"
    if result.metrics is not None:
        shown = {k: v for k, v in result.metrics.items() if k in ("f1", "precision", "recall", "accuracy", "macro_f1", "mcc")}
        line += ": " + ", ".join(f"{k} {100 * v:.2f}" for k, v in shown.items())
    if not is_stdio(result.output):
        sys.stdout.write(line + "\n")
    elif result.metrics is not None or logging.getLogger("greenadapt").isEnabledFor(logging.INFO):
        # With the predictions on stdout, the summary is a line on stderr. Under --quiet (warnings and errors only: a cron
        # job's mail) it is said only with a labelled input's scores, which are nowhere else; what was written is on stdout.
        sys.stderr.write(line + "\n")


declared_command(PredictSettings, api.predict, _show, check=_check,
                 help="Predict with both tokenizers: entities with character offsets for raw text, labels for task files.")
