"""What every task declares, and the settings a fine-tuned folder keeps of its task.

A :class:`Task` is one entry of :data:`greenadapt.tasks.TASKS`: a name, a
one-line summary (the CLI's ``--task`` help is built from these), the defaults
that differ between tasks (:class:`TaskDefaults`; the CLI and the API leave
those options unset, None, and the task fills them in), the ``finetune``
options it has no use for (refused when set), and whether ``finetune``
trains it. The registry sits below the runners: ``greenadapt.runners.finetune``
trains every :class:`LabellingTask` with one loop and the QA task with its own,
chosen by the task's class, so a new labelling task needs no runner.
:class:`LabellingTask` adds what a task that labels files declares: its
reader, the model sequences (units) it trains and predicts on, the model head,
decoding and scores.

This module and the registry import nothing heavy (``--help`` reads them):
task modules import torch, numpy and the data code inside their methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from greenadapt.defaults import DEFAULT_MAX_LENGTH
from greenadapt.errors import UsageError

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.artifacts.model_folder import TokenizerPair
    from greenadapt.data.task_files import ReaderOptions, TaskFile
    from greenadapt.modeling.units import Unit
    from greenadapt.options import Settings

    S = TypeVar("S", bound=Settings)

TASK_FILE = "greenadapt_task.json"  # written into each fine-tuned model folder


@dataclass(frozen=True)
class TaskDefaults:
    """The options whose default depends on the task."""

    epochs: int = 3
    batch_size: int = 32
    lr: float = 5e-5
    max_length: int | None = DEFAULT_MAX_LENGTH  # wordpieces per sequence; None: the task derives it from the model
    max_words: int = 30  # NER: words per training chunk
    pool: str | None = "mean"  # logits at test time (ensemble_mode resolves mean on a one-tokenizer model); None: the model decides

    def describe(self) -> str:
        length = "the model's limit" if self.max_length is None else str(self.max_length)
        return f"{self.epochs} epochs, batch {self.batch_size}, lr {self.lr:g}, max length {length}"


@dataclass(frozen=True)
class TaskSettings:
    """Everything prediction needs to treat new data like the training data (``greenadapt_task.json``)."""

    task: str
    labels: list[str]
    max_length: int = DEFAULT_MAX_LENGTH
    max_words: int = 30
    metric: str | None = None
    positive_label: str | None = None
    reader: dict[str, Any] = field(default_factory=dict)
    has_domain_tokenizer: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: Any, where: Path | None = None) -> TaskSettings:
        """Settings read back from JSON, each field of its type (a StageError names the file and field)."""
        from greenadapt.errors import StageError

        def refuse(field: str, expected: str) -> StageError:
            return StageError(f"damaged {TASK_FILE}: {field} is not {expected}", path=where, hint="fine-tune the model again")

        if not isinstance(obj, dict):
            raise refuse("the document", "a JSON object")
        for name, (check, expected) in _SETTING_TYPES.items():
            if name in obj and not check(obj[name]):
                raise refuse(repr(name), expected)
        if "task" not in obj or "labels" not in obj:
            raise refuse("'task' or 'labels'", "there")
        return cls(**{k: obj[k] for k in _SETTING_TYPES if k in obj})

    @property
    def reader_options(self) -> ReaderOptions:
        from greenadapt.data.task_files import ReaderOptions

        return ReaderOptions.from_config(self.reader)

    @property
    def label2id(self) -> dict[str, int]:
        return {label: i for i, label in enumerate(self.labels)}


def _optional_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


_SETTING_TYPES: dict[str, tuple[Any, str]] = {
    "task": (lambda v: isinstance(v, str) and bool(v), "a task name"),
    "labels": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of label strings"),
    "max_length": (_positive_int, "a positive integer"),
    "max_words": (_positive_int, "a positive integer"),
    "metric": (_optional_str, "a string or null"),
    "positive_label": (_optional_str, "a string or null"),
    "reader": (lambda v: isinstance(v, dict), "an object"),
    "has_domain_tokenizer": (lambda v: isinstance(v, bool), "true or false"),
}


class Task:
    """One ``--task``: its defaults and how ``greenadapt finetune`` trains it."""

    name: str = ""
    summary: str = ""
    # transformers' name of the task: a model card's `pipeline_tag`, the task `greenadapt.pipeline` takes.
    pipeline_tag: str = ""
    auto_model: str = ""  # the transformers Auto class of the model head
    defaults = TaskDefaults()
    # finetune's options this task has no use for: set to anything but their default, refused.
    unused_options: tuple[str, ...] = ()
    # Trained by `greenadapt finetune` (the masked-LM objective is `pretrain`'s, not a --task).
    finetunes: bool = True
    # Predictions are entity spans over words (NER): entity F1, entities in raw-text output, typed-label hints.
    finds_entities: bool = False
    # SQuAD-style questions over documents: answered by `greenadapt qa`, scored in percent.
    answers_questions: bool = False

    def filled(self, settings: S) -> S:
        """``settings`` with the options left unset (None) at this task's defaults: the object the runner and the loop receive."""
        defaults = {name: getattr(self.defaults, name) for name in ("epochs", "batch_size", "lr", "max_length", "max_words", "pool")}
        return settings.replaced(**{name: value for name, value in defaults.items() if getattr(settings, name) is None})

    def check_unused(self, settings: Settings, also: Iterable[str] = ()) -> None:
        """Refuse the options this task has no use for (its own, then ``also``: a whole group), when they were set."""
        refused = settings.given_options((*self.unused_options, *also))
        if refused:
            raise UsageError(
                f"{', '.join(refused)} {'does' if len(refused) == 1 else 'do'} not apply to --task {self.name}",
                hint=f"leave {'it' if len(refused) == 1 else 'them'} out",
            )


class LabellingTask(Task):
    """A task that labels files (tokens or whole texts): reader, units, head, decoding, scores."""

    metrics: tuple[str, ...] = ()
    default_metric: str = ""

    def read(self, path: str | Path, settings: TaskSettings | ReaderOptions, *, require_labels: bool) -> TaskFile:
        from greenadapt.data.task_files import read_task_file

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

    def score_modes(
        self, task_file: TaskFile, logits: Mapping[str, np.ndarray], settings: TaskSettings
    ) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]]]:
        """Each pooling mode's predictions (the argmax label of every row, decoded) and scores."""
        scores, predictions = {}, {}
        for mode, values in logits.items():
            predictions[mode] = self.decode(task_file, argmax_labels(values, settings.labels))
            scores[mode] = self.score(task_file, predictions[mode], settings)
        return scores, predictions

    def check_metric(self, metric: str | None, positive: str | None) -> str:
        chosen = metric or self.default_metric
        if chosen not in self.metrics:
            raise UsageError(f"--metric {chosen!r} is not a {self.name} metric", hint=f"choose from {', '.join(self.metrics)}")
        return chosen

    def positive_label(self, labels: Sequence[str], requested: str | None) -> str | None:
        """The label ``f1`` scores (classification); None for tasks without one."""
        return None

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


def argmax_labels(logits: np.ndarray, labels: Sequence[str]) -> list[str]:
    return [labels[i] for i in logits.argmax(axis=1)]
