"""`greenadapt predict`: label a file with a fine-tuned model, pooling both tokenizers."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from greenadapt import api
from greenadapt.api import default_of
from greenadapt.cli._common import DROP, JsonOption, api_command
from greenadapt.cli.finetune import (
    DeviceOption,
    LabelFieldOption,
    PairFieldOption,
    PrecisionOption,
    TextFieldOption,
    pool_option,
)


# The options every command that runs a fine-tuned model shares (predict, evaluate).
HeaderOverrideOption = typer.Option(None, "--header", help="Override TSV header detection (auto, yes, no).")
InferenceBatchOption = typer.Option(default_of(api.predict, "batch_size"), "--batch-size", help="Sequences per inference batch.")
GeneralModelAtInferenceOption = typer.Option(
    None, "--general-model", help="G-MAP model: its general model, if not where training found it (weights are checked).")


@api_command("predict", api.predict, lambda result, as_json: _show(result, as_json), renames={"task_name": "task"})
def predict(
    source: str | None = typer.Argument(
        None, metavar="INPUT", help="Raw text (one document per line), JSON lines, a folder of .txt files, a task file, or - for stdin."
    ),
    model: list[str] = typer.Option(..., "--model", "-m", help="A `greenadapt finetune` run folder (or one of its seed-N folders); "
                                    "repeat it for an ensemble (the mean of the models' probabilities)."),
    input_path: str | None = typer.Option(None, "--input", "-i", help="The input, as an option (same as INPUT)."),
    output: str = typer.Option(
        "-", "--out", "--output", "-o", help="Where predictions go (default: stdout). Raw input: JSON lines; a task file: itself plus a prediction column."
    ),
    pool: str = pool_option(default_of(api.predict, "pool")),
    task_name: str | None = typer.Option(None, "--task", help="The task to run, when --model is a `greenadapt multitask` run folder."),
    ignore_labels: bool = typer.Option(default_of(api.predict, "ignore_labels"), "--ignore-labels", help="Do not read or score gold labels in the input."),
    text_field: str | None = TextFieldOption,
    pair_field: str | None = PairFieldOption,
    label_field: str | None = LabelFieldOption,
    file_format: str = typer.Option(
        default_of(api.predict, "file_format"), "--format", help="auto, text (a document per line), jsonl, columns (NER word ... label) or tsv."
    ),
    header: str | None = HeaderOverrideOption,
    batch_size: int = InferenceBatchOption,
    device: str = DeviceOption,
    precision: str = PrecisionOption,
    general_model: str | None = GeneralModelAtInferenceOption,
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file (never the input)."),
    as_json: bool = JsonOption,
) -> dict[str, Any] | None:
    """Predict with both tokenizers: entities with character offsets for raw text, labels for task files.

    Example: cat notes.txt | greenadapt predict -m runs/ncbi - > entities.jsonl
    """
    from greenadapt.errors import UsageError
    from greenadapt.inference.predict_text import is_stdio

    if (source is None) == (input_path is None):
        raise UsageError("give the input once: as INPUT or as --input", hint="e.g. greenadapt predict -m MODEL notes.txt")
    if as_json and is_stdio(output):
        raise UsageError("--json prints a summary on stdout, where the predictions go", hint="add --out FILE")
    return {"source": source if source is not None else input_path, "input_path": DROP, "model": model[0] if len(model) == 1 else model}


def _show(result: Any, as_json: bool) -> None:
    from greenadapt.inference.predict_text import is_stdio

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
    # With the predictions on stdout, the summary is a log line on stderr.
    (sys.stderr if is_stdio(result.output) else sys.stdout).write(line + "\n")
