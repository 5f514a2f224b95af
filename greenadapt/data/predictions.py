"""Predictions written in the input's own format: a column file with a prediction column, JSON lines with pred_label or
pred_tags, a TSV with a prediction column, Parquet or a saved dataset."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from greenadapt.artifacts.files import atomic_write_text
from greenadapt.data.task_files import NerSentence, TaskFile, numbered_lines

PRED_COLUMN = "prediction"
PRED_LABEL_KEY = "pred_label"
PRED_TAGS_KEY = "pred_tags"


def write_predictions(task_file: TaskFile, predictions: Sequence[Any], out: Path) -> None:
    """``predictions[i]``: a list of labels (NER sentence i) or one label (classification example i)."""
    if len(predictions) != len(task_file.examples):
        raise ValueError("one prediction per example is needed")
    if task_file.format == "dataset":  # no text file to write back into: one JSON line per example
        _write_dataset_predictions(task_file, predictions, out)
        return
    by_line: dict[int, Any] = {}
    for example, predicted in zip(task_file.examples, predictions, strict=True):
        if isinstance(example, NerSentence):
            if task_file.format == "columns":
                by_line.update(zip(example.lines, predicted, strict=True))
            else:
                by_line[example.lines[0]] = list(predicted)
        else:
            by_line[example.line] = predicted
    out_lines: list[str] = []
    header_pending = task_file.format == "tsv" and task_file.field_names.get("header") == "yes"
    ner = bool(task_file.examples) and isinstance(task_file.examples[0], NerSentence)
    bare_gold = ner and task_file.format == "columns" and task_file.labelled and _bare_gold(task_file)
    for number, line in numbered_lines(task_file.path):
        if number in by_line:
            value = by_line[number]
            if task_file.format == "jsonl":
                obj = json.loads(line)
                obj[PRED_TAGS_KEY if ner else PRED_LABEL_KEY] = value
                line = json.dumps(obj, ensure_ascii=False)
            else:
                value = value.split("-", 1)[0] if bare_gold and isinstance(value, str) else value
                line = f"{line}{_separator(line)}{value}"
        elif header_pending and line.strip():
            line = f"{line}\t{PRED_COLUMN}"
        if line.strip():
            header_pending = False
        out_lines.append(line)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, "\n".join(out_lines) + "\n", user_path=True)  # predict -o: the user's path


def _write_dataset_predictions(task_file: TaskFile, predictions: Sequence[Any], out: Path) -> None:
    lines = []
    for example, predicted in zip(task_file.examples, predictions, strict=True):
        if isinstance(example, NerSentence):
            record: dict[str, Any] = {"row": example.lines[0], "tokens": list(example.words), PRED_TAGS_KEY: list(predicted)}
            if example.labels is not None:
                record["tags"] = list(example.labels)
        else:
            record = {"row": example.line, "text": example.text, **({"pair": example.pair} if example.pair is not None else {})}
            record.update({**({"label": example.label} if example.label is not None else {}), PRED_LABEL_KEY: predicted})
        lines.append(json.dumps(record, ensure_ascii=False))
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, "\n".join(lines) + "\n", user_path=True)


def _bare_gold(task_file: TaskFile) -> bool:
    """Whether a labelled column file's gold tags name no type (B, I, O): its predictions are then written bare too, so
    the two columns read alike, by eye and by conlleval (a run trained with --entity-type predicts B-Disease)."""
    tags = [line.split()[-1] for _, line in numbered_lines(task_file.path) if len(line.split()) > 1]
    return bool(tags) and all("-" not in tag for tag in tags)


def _separator(line: str) -> str:
    return "\t" if "\t" in line or " " not in line else " "


def prediction_file_name(task_file: TaskFile, split: str) -> str:
    if task_file.format == "dataset":
        return f"{split}.jsonl"
    suffix = {"columns": ".tsv" if "\t" in _first_line(task_file.path) else ".txt", "jsonl": ".jsonl", "tsv": ".tsv"}
    return f"{split}{suffix[task_file.format]}"


def _first_line(path: Path) -> str:
    return next((line for _, line in numbered_lines(path) if line.strip()), "")
