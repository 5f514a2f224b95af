"""``evaluate``: score a fine-tuned run (an ensemble of runs, or a multitask run's task) on a labelled file, under
each pooling mode, without training and without writing predictions: the figures finetune reports for its test file,
for any file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.errors import DataError
from greenadapt.inference.labelling import ensemble_members, find_model_folder, label_file_by_mode
from greenadapt.inference.settings import DEFAULT_LOAD, LoadSettings, pooled_as
from greenadapt.tasks import argmax_labels
from greenadapt.compute.health import prediction_warnings

if TYPE_CHECKING:
    from greenadapt.inference.settings import EvaluateSettings
    from greenadapt.options import Run


@dataclass
class EvaluateResult:
    models: list[Path]
    data: Path
    examples: int
    metric: str  # the run's own metric (finetune's --metric)
    headline: str  # the pooling mode the run reports first (mean with two tokenizers)
    scores: dict[str, dict[str, Any]]  # pooling mode -> metric -> value
    warnings: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        figure = self.scores.get(self.headline, {}).get(self.metric)
        shown = f"{self.metric} {100 * figure:.2f} ({self.headline} pooling)" if isinstance(figure, int | float) else "no score"
        return f"<evaluate {', '.join(str(m) for m in self.models)} on {str(self.data)!r}: {shown}, {self.examples} examples>"

    def to_json(self) -> dict[str, Any]:
        return {"models": [str(m) for m in self.models], "data": str(self.data), "examples": self.examples, "metric": self.metric,
                "headline_pool": self.headline, "scores": self.scores, "warnings": self.warnings}


def evaluate_files(
    model: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    data: Path,
    *,
    options: LoadSettings = DEFAULT_LOAD,
    pools: Sequence[str] = (),
    reader_overrides: dict[str, Any] | None = None,
    task: str | None = None,
) -> EvaluateResult:
    """Scores of ``model`` on the labelled file ``data`` under each pooling mode of ``pools`` (default: every mode
    the model has), read with the training files' reader options (``reader_overrides`` changes some); ``task``: the
    task of a multitask run to score."""
    from greenadapt.inference.multitask import multitask_run, open_task_model

    options.check()
    members = ensemble_members(model)
    run = multitask_run(members, task)
    if run is not None:
        opened = open_task_model(run, task, options)
        models, which = [opened.folder], opened
    else:
        founds = [find_model_folder(spec) for spec in members]
        models, which = [folder for folder, _ in founds], founds
    request, by_mode = label_file_by_mode(which, Path(data), options=options, modes=tuple(pools), reader_overrides=reader_overrides)
    if not request.score:
        raise DataError("this file has no gold labels to score against", path=data,
                        hint="evaluate scores a labelled task file; `greenadapt predict` labels an unlabelled one")
    scores: dict[str, dict[str, Any]] = {}
    warnings: list[str] = []
    for mode, logits in by_mode.items():
        predictions = request.task.decode(request.task_file, argmax_labels(logits, request.settings.labels))
        scores[mode] = request.task.score(request.task_file, predictions, request.settings)
        # each mode's warning names it: two modes at the same accuracy read as one warning said twice
        where = request.task_file.path.name if len(by_mode) == 1 else f"{request.task_file.path.name} under {mode} pooling"
        warnings += prediction_warnings(where, request.task_file.gold(), predictions)
    headline = "mean" if "mean" in scores else next(iter(scores))
    metric = request.settings.metric or request.task.default_metric
    return EvaluateResult(models, Path(data), len(request.task_file.examples), metric, headline, scores, warnings)


def run_evaluate(settings: EvaluateSettings, run: Run) -> EvaluateResult:
    """``greenadapt evaluate`` from the command's settings (it writes nothing: ``run`` carries only its progress)."""
    options = pooled_as(settings, settings.pool[0] if settings.pool else "mean")
    return evaluate_files(settings.members(), Path(settings.data), options=options,
                          pools=settings.pool, reader_overrides=settings.reader_overrides(settings.header), task=settings.task)
