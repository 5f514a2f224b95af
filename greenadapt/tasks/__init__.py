"""The task registry: each task is one module here, and ``TASKS`` lists those ``finetune --task`` trains.

- ``ner`` (:mod:`greenadapt.tasks.ner`) and ``classify`` (:mod:`greenadapt.tasks.classify`):
  labelling tasks, trained by :func:`greenadapt.runners.finetune.run.run_labelling`;
- ``qa`` (:mod:`greenadapt.tasks.qa`): extractive question answering, trained by
  :func:`greenadapt.runners.qa.train.finetune_qa`;
- the masked-LM objective of ``pretrain`` (:mod:`greenadapt.tasks.mlm`), not a ``--task``.

Each declares its reader, units, head, collator, metric and the defaults that
differ between tasks; CONTRIBUTING.md shows how to add one. Nothing heavy is
imported here: ``--help`` builds its ``--task`` text from this registry.
"""

from __future__ import annotations

from greenadapt.errors import UsageError
from greenadapt.tasks.base import TASK_FILE, LabellingTask, Task, TaskDefaults, TaskSettings, argmax_labels
from greenadapt.tasks.classify import ClassifyTask
from greenadapt.tasks.mlm import MLM
from greenadapt.tasks.ner import NerTask
from greenadapt.tasks.qa import QaTask

TASKS: dict[str, Task] = {task.name: task for task in (NerTask(), ClassifyTask(), QaTask())}


def get_task(name: str) -> Task:
    """The ``finetune --task`` called ``name``, in any letter case (``NER`` is ``ner``: its ``.name`` is the one
    spelling that manifests record)."""
    task = TASKS.get(str(name).lower())
    if task is None:
        import difflib

        close = difflib.get_close_matches(str(name).lower(), list(TASKS), n=1)
        suggestion = f"did you mean --task {close[0]}? " if close else ""
        raise UsageError(f"unknown --task {name!r}", hint=f"{suggestion}choose from {', '.join(TASKS)}")
    return task


def task_name(name: str) -> str:
    """The one spelling of task ``name`` (``NER`` -> ``ner``), or its one-line refusal: ``--task``'s check."""
    return get_task(name).name


def get_labelling_task(name: str) -> LabellingTask:
    """The labelling task ``name``; a question-answering model is refused with where it belongs."""
    task = get_task(name)
    if not isinstance(task, LabellingTask):
        raise UsageError(
            f"this is a {task.name} model: it answers questions with `greenadapt qa`, it does not label files",
            hint="greenadapt qa --model MODEL_FOLDER --data QUESTIONS.json --out DIR",
        )
    return task


def tasks_help() -> str:
    """The ``--task`` choices, for its help: ``ner, classify or qa``."""
    names = list(TASKS)
    return f"{', '.join(names[:-1])} or {names[-1]}"


def tasks_epilog() -> str:
    """Each task's summary and defaults, for a command's help epilog."""
    return "\n\n".join(f"{t.name}: {t.summary}; defaults {t.defaults.describe()}." for t in TASKS.values())


__all__ = [
    "MLM",
    "TASKS",
    "TASK_FILE",
    "LabellingTask",
    "Task",
    "TaskDefaults",
    "TaskSettings",
    "argmax_labels",
    "get_labelling_task",
    "get_task",
    "tasks_epilog",
    "tasks_help",
]
