"""Task specifications: ``--task name=rte,type=classify,train=...,dev=...`` or a TOML file.

Keys (both forms): ``name``, ``type`` (ner or classify), ``train``,
``dev``, ``test``, and the reader and scoring options of ``greenadapt
finetune``: ``format``, ``text_field``, ``pair_field``, ``label_field``,
``header``, ``metric``, ``positive_label`` (``-`` may stand for ``_``).
In a TOML file each task is a ``[[task]]`` table; relative paths are read
relative to the TOML file::

    [[task]]
    name = "rte"
    type = "classify"
    train = "glue/RTE/train.tsv"
    dev = "glue/RTE/dev.tsv"

    [[task]]
    name = "cola"
    type = "classify"
    train = "glue/CoLA/train.tsv"
    text_field = "3"
    label_field = "1"
    header = "no"
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greenadapt.data.task_files import ReaderOptions
from greenadapt.errors import InputError, UsageError
from greenadapt.modeling.pals.config import TASK_TYPES, check_task_name
from greenadapt.structured_text import NestedTooDeeply, loads_toml

READER_KEYS = ("format", "text_field", "pair_field", "label_field", "header")
KEYS = ("name", "type", "train", "dev", "test", *READER_KEYS, "metric", "positive_label")


@dataclass(frozen=True)
class TaskSpec:
    name: str
    type: str
    train: Path
    dev: Path | None = None
    test: Path | None = None
    reader: ReaderOptions = field(default_factory=ReaderOptions)
    metric: str | None = None
    positive_label: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "reader": self.reader.as_config(),
            "metric": self.metric,
            "positive_label": self.positive_label,
        }


def spec_from_mapping(values: Mapping[str, Any], *, where: str, base: Path | None = None) -> TaskSpec:
    """A :class:`TaskSpec` from ``key → value``; ``where`` names the source in error messages."""
    normal: dict[str, str] = {}
    for raw_key, value in values.items():
        key = str(raw_key).strip().replace("-", "_")
        if key not in KEYS:
            raise UsageError(f"{where}: unknown task key {raw_key!r}", hint=f"keys: {', '.join(KEYS)}")
        if key in normal:
            raise UsageError(f"{where}: key {key!r} given twice")
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise UsageError(f"{where}: {key} must be a string, not {type(value).__name__}")
        normal[key] = str(value).strip()
    for required in ("name", "type", "train"):
        if not normal.get(required):
            raise UsageError(f"{where}: the task has no {required}=", hint="every task needs name=, type= and train=")
    check_task_name(normal["name"])
    if normal["type"] not in TASK_TYPES:
        raise UsageError(f"{where}: unknown task type {normal['type']!r}", hint=f"choose from {', '.join(TASK_TYPES)}")

    def path(key: str) -> Path | None:
        if not normal.get(key):
            return None
        p = Path(normal[key]).expanduser()
        return p if p.is_absolute() or base is None else base / p

    reader_values = {k: normal[k] for k in READER_KEYS if normal.get(k)}
    return TaskSpec(
        name=normal["name"],
        type=normal["type"],
        train=path("train"),  # type: ignore[arg-type]
        dev=path("dev"),
        test=path("test"),
        reader=ReaderOptions.from_config(reader_values),
        metric=normal.get("metric") or None,
        positive_label=normal.get("positive_label") or None,
    )


def parse_task_option(text: str) -> TaskSpec:
    """One ``--task`` value: comma-separated ``key=value`` pairs."""
    values: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise UsageError(f"--task {text!r}: {part!r} is not key=value", hint="e.g. --task name=rte,type=classify,train=train.tsv")
        if key.strip() in values:
            raise UsageError(f"--task {text!r}: key {key.strip()!r} given twice")
        values[key.strip()] = value
    return spec_from_mapping(values, where=f"--task {text!r}")


def read_tasks_toml(path: Path) -> list[TaskSpec]:
    """The ``[[task]]`` tables of a TOML file."""
    try:
        doc = loads_toml(path.read_text(encoding="utf-8"))
    except NestedTooDeeply as exc:
        raise InputError(f"tasks file {exc}", path=path, hint="see `greenadapt multitask --help` for the layout") from None
    except FileNotFoundError:
        raise InputError("tasks file not found", path=path, hint="check the path of --tasks") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML ({exc})", path=path, hint="see `greenadapt multitask --help` for the layout") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"unreadable tasks file ({exc})", path=path) from None
    tables = doc.get("task")
    unknown = sorted(set(doc) - {"task"})
    if unknown:
        raise InputError(f"unknown top-level key(s) {', '.join(unknown)}", path=path, hint="list tasks as [[task]] tables")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise InputError("no [[task]] tables", path=path, hint="list each task as a [[task]] table with name, type and train")
    return [spec_from_mapping(t, where=f"{path} task {i + 1}", base=path.parent) for i, t in enumerate(tables)]


def collect_specs(options: Sequence[str], toml_path: Path | None) -> list[TaskSpec]:
    """All tasks of the command line and the TOML file, checked: at least one, names unique."""
    specs = (read_tasks_toml(toml_path) if toml_path is not None else []) + [parse_task_option(t) for t in options]
    if not specs:
        raise UsageError("no tasks given", hint="pass --task name=...,type=...,train=... (repeatable) or --tasks FILE.toml")
    check_unique(specs)
    return specs


def check_unique(specs: Sequence[TaskSpec]) -> None:
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise UsageError(f"two tasks are named {spec.name!r}", hint="give every task its own name=")
        seen.add(spec.name)


__all__ = ["TaskSpec", "collect_specs", "parse_task_option", "read_tasks_toml", "spec_from_mapping"]
