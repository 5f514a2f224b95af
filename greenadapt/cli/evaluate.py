"""`greenadapt evaluate`: score a fine-tuned run on a labelled file under each pooling mode, without training."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from greenadapt import api
from greenadapt.cli._common import api_command
from greenadapt.cli.finetune import DeviceOption, LabelFieldOption, PairFieldOption, PrecisionOption, TextFieldOption
from greenadapt.cli.predict import GeneralModelAtInferenceOption, HeaderOverrideOption, InferenceBatchOption

SHOWN = ("f1", "precision", "recall", "accuracy", "micro_f1", "macro_f1", "mcc")


@api_command("evaluate", api.evaluate, lambda result, as_json: _show(result, as_json),
             example="greenadapt evaluate -m runs/ncbi ncbi/test.tsv")
def evaluate_command(
    data: str = typer.Argument(..., metavar="FILE", help="A labelled task file (NER columns, TSV or JSON lines), read as training read its files."),
    model: list[str] = typer.Option(..., "--model", "-m", help="A `greenadapt finetune` run folder (or one of its seed-N folders); "
                                    "repeat it for an ensemble."),
    pool: list[str] = typer.Option([], "--pool", help="A pooling mode to score (mean, general, domain); repeat it (default: every mode the model has)."),
    text_field: str | None = TextFieldOption,
    pair_field: str | None = PairFieldOption,
    label_field: str | None = LabelFieldOption,
    header: str | None = HeaderOverrideOption,
    batch_size: int = InferenceBatchOption,
    device: str = DeviceOption,
    precision: str = PrecisionOption,
    general_model: str | None = GeneralModelAtInferenceOption,
) -> dict[str, Any] | None:
    """Score a fine-tuned run on a labelled file under each pooling mode, without training or writing predictions."""
    return {"model": model[0] if len(model) == 1 else model, "pool": pool or None}


def _show(result: Any, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2) + "\n")
        return
    lines = [f"{result.examples} examples of {result.data}, scored by {', '.join(str(m) for m in result.models)}:"]
    for mode, scores in result.scores.items():
        shown = ", ".join(f"{name} {100 * float(scores[name]):.2f}" for name in SHOWN if isinstance(scores.get(name), int | float))
        lines.append(f"  {mode:<8}{'*' if mode == result.headline else ' '} {shown}")
    lines.append(f"(* headline: {result.headline} pooling; scores × 100)")
    lines += [f"warning: {w}" for w in result.warnings]
    sys.stdout.write("\n".join(lines) + "\n")
