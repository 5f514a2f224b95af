"""`greenadapt compare`: did adaptation help on my task? Paired over seeds and test examples, with the cost."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from greenadapt import api
from greenadapt.api import default_of
from greenadapt.cli._common import DROP, WorkdirOption, api_command
from greenadapt.cli.finetune import CudaGraphsOption, PadToMultipleOption, PrecisionOption, ReportToOption


def parse_models(values: list[str]) -> list[tuple[str, str]]:
    from greenadapt.errors import UsageError

    models = []
    for value in values:
        name, sep, model = value.partition("=")
        if not sep or not name.strip() or not model.strip():
            raise UsageError(f"--model {value!r} is not NAME=MODEL", hint="e.g. --model base=bert-base-uncased --model green=models/green")
        models.append((name.strip(), model.strip()))
    return models


def parse_ensembles(values: list[str]) -> list[tuple[str, int]]:
    from greenadapt.errors import UsageError

    ensembles = []
    for value in values:
        name, _, size = value.partition("=")
        if not name.strip() or not size.strip().isdigit():
            raise UsageError(f"--ensemble {value!r} is not NAME=N", hint="e.g. --ensemble base-x2=2")
        ensembles.append((name.strip(), int(size)))
    return ensembles


@api_command("compare", api.compare, lambda result, as_json: _show(result, as_json), renames={"model": "models"})
def compare_command(
    task: str = typer.Option(..., "--task", help="ner, classify or qa."),
    train: Path = typer.Option(..., "--train", help="Training file (the same for every model)."),
    test: Path = typer.Option(..., "--test", help="Test file: every model is scored on the same examples."),
    model: list[str] = typer.Option(..., "--model", "-m", metavar="NAME=MODEL",
                                    help="A model to compare: a folder or Hub id, named. Repeat; the first is the baseline."),
    out: Path = typer.Option(..., "--out", "-o", help="The compare folder (one finetune run per model and seed; compare.json)."),
    dev: Path | None = typer.Option(None, "--dev", help="Dev file for choosing the best epoch (optional)."),
    seeds: str = typer.Option("1,2,3", "--seeds", help="Seeds, comma-separated: every model trains once per seed."),
    against: str | None = typer.Option(default_of(api.compare, "against"), "--against", metavar="NAME",
                                       help="The baseline the others are paired with (default: the first --model)."),
    comparator: str | None = typer.Option(None, "--comparator", metavar="NAME",
                                          help="A variant (e.g. DAPT) whose gain the others' gains are a share of."),
    epochs: int | None = typer.Option(default_of(api.compare, "epochs"), "--epochs", min=1, help="Epochs (default: the task's)."),
    max_steps: int | None = typer.Option(default_of(api.compare, "max_steps"), "--max-steps", min=1,
                                         help="Stop every fine-tuning after this many optimizer steps."),
    entity_type: str | None = typer.Option(default_of(api.compare, "entity_type"), "--entity-type", metavar="TYPE",
                                           help="NER files with bare B/I labels: train them as B-TYPE/I-TYPE (e.g. Disease), as finetune does."),
    batch_size: int | None = typer.Option(default_of(api.compare, "batch_size"), "--batch-size", min=1),
    lr: float | None = typer.Option(default_of(api.compare, "lr"), "--lr"),
    max_length: int | None = typer.Option(default_of(api.compare, "max_length"), "--max-length"),
    device: str = typer.Option(default_of(api.compare, "device"), "--device", help="auto, cpu, cuda or cuda:N."),
    parallel: int = typer.Option(default_of(api.compare, "parallel"), "--parallel", min=1,
                                 help="Fine-tunings at once: N worker processes, each with its share of the cores, "
                                      "each training run after run."),
    precision: str = PrecisionOption,
    pad_to_multiple: int = PadToMultipleOption,
    cuda_graphs: bool = CudaGraphsOption,
    report_to: list[str] = ReportToOption,
    bootstrap: int = typer.Option(default_of(api.compare, "bootstrap"), "--bootstrap", help="Paired bootstrap replicates over test examples."),
    save_every: int | None = typer.Option(default_of(api.compare, "save_every"), "--save-every", min=1,
                                          help="Checkpoint every N steps, so an interrupted compare resumes."),
    force: bool = typer.Option(False, "--force", help="Redo every fine-tuning."),
    corpus: list[str] = typer.Option([], "--corpus", "-c", help="With --adapt-methods: the corpus to adapt the first --model to."),
    adapt_methods: str | None = typer.Option(None, "--adapt-methods", metavar="M1,M2",
                                             help="Adapt the first --model to --corpus with each method (lstsq, subword-mean, "
                                                  "focus, ...); each joins the comparison under its method's name."),
    workdir: Path | None = WorkdirOption,
    ensemble: list[str] = typer.Option([], "--ensemble", metavar="NAME=N",
                                       help="That --model is N fine-tunings per seed scored on the mean of their probabilities "
                                            "(e.g. --model base-x2=MODEL --ensemble base-x2=2: the control for two-view inference)."),
) -> dict[str, Any] | None:
    """Fine-tune several models with one recipe and the same seeds; say whether each beat the baseline, and at what cost."""
    from greenadapt.cli.finetune import parse_seeds

    return {
        "ensemble": DROP, "ensembles": parse_ensembles(ensemble),
        "model": parse_models(model), "seeds": parse_seeds(seeds, 0),
        "adapt_methods": [m.strip() for m in (adapt_methods or "").split(",") if m.strip()],
    }


def _show(result: Any, as_json: bool) -> None:
    from greenadapt.comparison.display import render

    sys.stdout.write((json.dumps(result.to_json(), indent=2) if as_json else render(result)) + "\n")
    sys.stdout.flush()
