"""`greenadapt predict`: label a file with a fine-tuned model, pooling both tokenizers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from greenadapt.cli import app
from greenadapt.cli._common import JsonOption, QuietOption, VerboseOption, setup_logging
from greenadapt.cli.finetune import (
    DeviceOption,
    LabelFieldOption,
    PairFieldOption,
    PoolOption,
    PrecisionOption,
    TextFieldOption,
)


@app.command("predict")
def predict(
    model: str = typer.Option(..., "--model", help="A `greenadapt finetune` run folder (or one of its seed-N folders)."),
    input_path: Path = typer.Option(..., "--input", help="File to label, in a format the model's task reads."),
    output: Path = typer.Option(..., "--output", help="Where to write it back with a predicted-label column/field."),
    pool: str = PoolOption,
    task_name: str | None = typer.Option(None, "--task", help="The task to run, when --model is a `greenadapt multitask` run folder."),
    ignore_labels: bool = typer.Option(False, "--ignore-labels", help="Do not read or score gold labels in the input."),
    text_field: str | None = TextFieldOption,
    pair_field: str | None = PairFieldOption,
    label_field: str | None = LabelFieldOption,
    file_format: str | None = typer.Option(None, "--format", help="Override the training files' format (auto, columns, jsonl, tsv)."),
    header: str | None = typer.Option(None, "--header", help="Override TSV header detection (auto, yes, no)."),
    batch_size: int = typer.Option(64, "--batch-size", help="Sequences per inference batch."),
    device: str = DeviceOption,
    precision: str = PrecisionOption,
    general_model: str | None = typer.Option(
        None, "--general-model", help="G-MAP model: its general model, if not where training found it (weights are checked)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace an existing --output file (never the --input file)."),
    as_json: bool = JsonOption,
    quiet: bool = QuietOption,
    verbose: bool = VerboseOption,
) -> None:
    """Predict labels; with gold labels in the input, also print the scores."""
    from greenadapt.finetune.run import run_predict

    setup_logging(quiet=quiet, verbose=verbose)
    overrides = {
        "format": file_format,
        "text_field": text_field,
        "pair_field": pair_field,
        "label_field": label_field,
        "header": header,
    }
    from greenadapt.multitask.run import is_multitask, multitask_predictor

    run = multitask_predictor(model, task_name) if task_name is not None or is_multitask(model) else run_predict
    result = run(
        model,
        input_path,
        output,
        pool=pool,
        batch_size=batch_size,
        device=device,
        precision=precision,
        ignore_labels=ignore_labels,
        reader_overrides=overrides,
        general_model=general_model,
        force=force,
    )
    if as_json:
        doc = {"output": str(result.output), "examples": result.examples, "pool": result.pool, "metrics": result.metrics}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    line = f"wrote {result.examples} predictions ({result.pool} pooling) to {result.output}"
    if result.metrics is not None:
        shown = {k: v for k, v in result.metrics.items() if k in ("f1", "precision", "recall", "accuracy", "macro_f1", "mcc")}
        line += ": " + ", ".join(f"{k} {100 * v:.2f}" for k, v in shown.items())
    sys.stdout.write(line + "\n")
