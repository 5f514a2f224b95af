"""What differs between tasks: reading, units, the model head, decoding, scores.

``TASKS`` maps ``--task`` to a :class:`Task`. Adding a labelling task
means adding one entry; ``run`` is task-agnostic. Question answering
(``QA_TASK``) is not a :class:`Task`: its windows, span loss and
whole-document answers live in ``greenadapt.qa``, and ``run_finetune``
hands ``--task qa`` to ``greenadapt.qa.train``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from greenadapt.errors import UsageError
from greenadapt.finetune.data import NerSentence, ReaderOptions, TaskFile, read_task_file
from greenadapt.finetune.metrics import classification_scores, default_positive_label, entity_scores, split_tag
from greenadapt.expanded_model import TokenizerPair
from greenadapt.finetune.tokenize import Unit, ner_units, text_units

TASK_FILE = "greenadapt_task.json"  # written into each fine-tuned model folder
QA_TASK = "qa"


@dataclass
class TaskSettings:
    """Everything prediction needs to treat new data like the training data."""

    task: str
    labels: list[str]
    max_length: int = 128
    max_words: int = 30
    metric: str | None = None
    positive_label: str | None = None
    reader: dict[str, Any] = field(default_factory=dict)
    has_domain_tokenizer: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TaskSettings:
        known = {k: obj[k] for k in cls.__dataclass_fields__ if k in obj}
        return cls(**known)

    @property
    def reader_options(self) -> ReaderOptions:
        return ReaderOptions.from_config(self.reader)

    @property
    def label2id(self) -> dict[str, int]:
        return {label: i for i, label in enumerate(self.labels)}


class Task:
    name: str = ""
    auto_model: str = ""
    metrics: tuple[str, ...] = ()
    default_metric: str = ""

    def read(self, path: str | Path, settings: TaskSettings | ReaderOptions, *, require_labels: bool) -> TaskFile:
        options = settings.reader_options if isinstance(settings, TaskSettings) else settings
        return read_task_file(path, self.name, options, require_labels=require_labels)

    def order_labels(self, labels: Sequence[str]) -> list[str]:
        return sorted(labels)

    def units(
        self, task_file: TaskFile, settings: TaskSettings, tokenizers: TokenizerPair, *, training: bool = False
    ) -> tuple[list[Unit], dict[str, int]]:
        """The model sequences of ``task_file``; ``training``: the file is trained on (gold labels may guide the cuts)."""
        raise NotImplementedError

    def decode(self, task_file: TaskFile, row_labels: Sequence[str]) -> list[Any]:
        """Per-row predicted labels → one prediction per example, in example order."""
        raise NotImplementedError

    def score(self, task_file: TaskFile, predictions: Sequence[Any], settings: TaskSettings) -> dict[str, Any]:
        raise NotImplementedError

    def check_metric(self, metric: str | None, positive: str | None) -> str:
        chosen = metric or self.default_metric
        if chosen not in self.metrics:
            raise UsageError(f"--metric {chosen!r} is not a {self.name} metric", hint=f"choose from {', '.join(self.metrics)}")
        return chosen

    def load_model(self, folder: Path, labels: Sequence[str]) -> Any:
        """The model with a fresh head for ``labels``; fp32 master weights whatever the checkpoint's dtype."""
        import torch
        import transformers

        auto = getattr(transformers, self.auto_model)
        return auto.from_pretrained(
            str(folder),
            dtype=torch.float32,
            num_labels=len(labels),
            id2label=dict(enumerate(labels)),
            label2id={label: i for i, label in enumerate(labels)},
        )


class NerTask(Task):
    name = "ner"
    auto_model = "AutoModelForTokenClassification"
    metrics = ("f1", "precision", "recall", "accuracy")
    default_metric = "f1"

    def order_labels(self, labels: Sequence[str]) -> list[str]:
        # O first, then by entity type, B/I/E/S within a type: a readable, stable label map.
        def key(label: str) -> tuple[int, str, int]:
            prefix, kind = split_tag(label)
            return (0 if label == "O" else 1, kind, "BIES".find(prefix))

        return sorted(set(labels), key=key)

    def units(
        self, task_file: TaskFile, settings: TaskSettings, tokenizers: TokenizerPair, *, training: bool = False
    ) -> tuple[list[Unit], dict[str, int]]:
        return ner_units(
            task_file.examples,
            settings.label2id if task_file.labelled else None,
            tokenizers,
            max_words=settings.max_words,
            max_length=settings.max_length,
            cut_at_entities=training,
        )

    def decode(self, task_file: TaskFile, row_labels: Sequence[str]) -> list[Any]:
        predictions = []
        position = 0
        for sentence in task_file.examples:
            n = len(sentence.words)
            predictions.append(list(row_labels[position : position + n]))
            position += n
        if position != len(row_labels):
            raise RuntimeError("word rows and sentences do not line up")
        return predictions

    def score(self, task_file: TaskFile, predictions: Sequence[Any], settings: TaskSettings) -> dict[str, Any]:
        gold = [s.labels for s in task_file.examples if isinstance(s, NerSentence)]
        return entity_scores(gold, predictions)  # type: ignore[arg-type]


class ClassifyTask(Task):
    name = "classify"
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
            raise UsageError(
                "--metric f1 needs to know the positive label", hint="pass --positive-label (e.g. 1 for MRPC)"
            )
        return chosen

    def units(
        self, task_file: TaskFile, settings: TaskSettings, tokenizers: TokenizerPair, *, training: bool = False
    ) -> tuple[list[Unit], dict[str, int]]:
        return text_units(
            task_file.examples, settings.label2id if task_file.labelled else None, tokenizers, max_length=settings.max_length
        )

    def decode(self, task_file: TaskFile, row_labels: Sequence[str]) -> list[Any]:
        if len(row_labels) != len(task_file.examples):
            raise RuntimeError("rows and examples do not line up")
        return list(row_labels)

    def score(self, task_file: TaskFile, predictions: Sequence[Any], settings: TaskSettings) -> dict[str, Any]:
        gold = [e.label for e in task_file.examples]
        return classification_scores(gold, predictions, positive=settings.positive_label)  # type: ignore[arg-type]


TASKS: dict[str, Task] = {"ner": NerTask(), "classify": ClassifyTask()}


def get_task(name: str) -> Task:
    """The labelling task ``name``; a question-answering model is refused with where it belongs."""
    if name == QA_TASK:
        raise UsageError(
            "this is a question-answering model: it answers questions with `greenadapt qa`, it does not label files",
            hint="greenadapt qa --model MODEL_FOLDER --data QUESTIONS.json --out DIR",
        )
    if name not in TASKS:
        raise UsageError(f"unknown --task {name!r}", hint=f"choose from {', '.join([*TASKS, QA_TASK])}")
    return TASKS[name]


def positive_label_for(labels: Sequence[str], requested: str | None) -> str | None:
    if requested is not None:
        if requested not in labels:
            raise UsageError(f"--positive-label {requested!r} is not a label of the training data ({', '.join(labels)})")
        return requested
    return default_positive_label(labels)


def argmax_labels(logits: np.ndarray, labels: Sequence[str]) -> list[str]:
    return [labels[i] for i in logits.argmax(axis=1)]


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
