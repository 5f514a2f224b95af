"""Text and text-pair classification: JSON lines or TSV, one label per example; accuracy, F1, MCC.

Reader: :func:`greenadapt.data.task_files.read_task_file` (JSON lines, TSV with
or without a header). Units: the text (or the pair) as one sequence
(:func:`greenadapt.modeling.units.text_units`). Head:
``AutoModelForSequenceClassification``. Collator:
:func:`greenadapt.compute.batches.collate`. Metrics:
:func:`greenadapt.data.metrics.classification_scores`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from greenadapt.errors import UsageError
from greenadapt.tasks.base import LabellingTask, TaskDefaults, TaskSettings

if TYPE_CHECKING:
    from greenadapt.artifacts.model_folder import TokenizerPair
    from greenadapt.data.task_files import TaskFile
    from greenadapt.modeling.units import Unit


class ClassifyTask(LabellingTask):
    name = "classify"
    pipeline_tag = "text-classification"
    summary = "text or text-pair classification: JSON lines or TSV, one label per example; accuracy, F1, MCC"
    defaults = TaskDefaults()
    unused_options = ("max_words", "entity_type", "doc_stride")
    auto_model = "AutoModelForSequenceClassification"
    metrics = ("accuracy", "micro_f1", "macro_f1", "mcc", "f1")
    default_metric = "accuracy"

    def order_labels(self, labels: Sequence[str]) -> list[str]:
        unique = set(labels)
        if all(_is_int(label) for label in unique):
            return sorted(unique, key=int)
        return sorted(unique)

    def check_metric(self, metric: str | None, positive: str | None) -> str:
        chosen = super().check_metric(metric, positive)
        if chosen == "f1" and positive is None:
            raise UsageError("--metric f1 needs to know the positive label", hint="pass --positive-label (e.g. 1 for MRPC)")
        return chosen

    def positive_label(self, labels: Sequence[str], requested: str | None) -> str | None:
        from greenadapt.data.metrics import default_positive_label

        if requested is not None:
            if requested not in labels:
                raise UsageError(f"--positive-label {requested!r} is not a label of the training data ({', '.join(labels)})")
            return requested
        return default_positive_label(labels)

    def units(
        self, task_file: TaskFile, settings: TaskSettings, tokenizers: TokenizerPair, *, training: bool = False
    ) -> tuple[list[Unit], dict[str, int]]:
        from greenadapt.modeling.units import text_units

        return text_units(
            task_file.examples, settings.label2id if task_file.labelled else None, tokenizers, max_length=settings.max_length
        )

    def decode(self, task_file: TaskFile, row_labels: Sequence[str]) -> list[Any]:
        if len(row_labels) != len(task_file.examples):
            raise RuntimeError("rows and examples do not line up")
        return list(row_labels)

    def score(self, task_file: TaskFile, predictions: Sequence[Any], settings: TaskSettings) -> dict[str, Any]:
        from greenadapt.data.metrics import classification_scores

        gold = [e.label for e in task_file.examples]
        return classification_scores(gold, predictions, positive=settings.positive_label)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
