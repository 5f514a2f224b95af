"""`greenadapt evaluate`: score a fine-tuned run on a labelled file under each pooling mode, without training."""

from __future__ import annotations

import json
import sys
from typing import Any

from greenadapt import api
from greenadapt.cli._build import declared_command
from greenadapt.inference.settings import EvaluateSettings

SHOWN = ("f1", "precision", "recall", "accuracy", "micro_f1", "macro_f1", "mcc")
# A breakdown's column heading where its key's words are not enough (per_type: NER's seqeval report; per_label:
# classification's); any other per_<what> a scorer returns is headed by its own words.
HEADINGS = {"per_type": "entity type", "per_label": "label"}


def _show(result: Any, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
        return
    lines = [f"{result.examples} examples of {result.data}, scored by {', '.join(str(m) for m in result.models)}:"]
    for mode, scores in result.scores.items():
        shown = ", ".join(f"{name} {100 * float(scores[name]):.2f}" for name in SHOWN if isinstance(scores.get(name), int | float))
        lines.append(f"  {mode:<8}{'*' if mode == result.headline else ' '} {shown}")
    lines.append(f"(* headline: {result.headline} pooling; scores × 100)")
    for key, table in (result.scores.get(result.headline) or {}).items():
        # each breakdown the task's scorer gives under the headline pooling, as a table
        if key.startswith("per_") and isinstance(table, dict) and table:
            heading = HEADINGS.get(key, key[4:].replace("_", " "))
            lines.append(f"  {heading:<20} {'precision':>9} {'recall':>9} {'f1':>9} {'gold':>7}")
            lines += [f"  {row:<20} {100 * float(s['precision']):9.2f} {100 * float(s['recall']):9.2f} {100 * float(s['f1']):9.2f} "
                      f"{int(s['gold']):7,}" for row, s in table.items()]
    lines += [f"warning: {w}" for w in result.warnings]
    sys.stdout.write("\n".join(lines) + "\n")


declared_command(EvaluateSettings, api.evaluate, _show, example="greenadapt evaluate -m runs/ncbi ncbi/test.tsv",
                 help="Score a fine-tuned run on a labelled file under each pooling mode, without training or writing predictions.")
