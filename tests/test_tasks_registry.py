"""The task registry: every task declares its defaults and refusals, and a new task is one module.

The last test is CONTRIBUTING.md's "Adding a task" recipe run for real: a part-of-speech task
written here, registered, trained and scored through the public `greenadapt.finetune` without a
line changed elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from finetune_helpers import build_tiny_expanded

import greenadapt
from greenadapt.data.task_files import NerSentence, ReaderOptions, TaskFile
from greenadapt.errors import UsageError
from greenadapt.tasks import TASKS, NerTask, TaskDefaults, TaskSettings, get_labelling_task, get_task
from greenadapt.runners.finetune.settings import FinetuneSettings


def test_every_task_declares_what_the_cli_and_the_api_leave_to_it() -> None:
    assert list(TASKS) == ["ner", "classify", "qa"]
    for task in TASKS.values():
        assert task.summary and task.finetunes and task.defaults.epochs >= 1
        filled = task.filled(FinetuneSettings(task=task.name, train=Path("x"), batch_size=7))
        assert (filled.epochs, filled.lr, filled.batch_size) == (task.defaults.epochs, task.defaults.lr, 7)
        assert type(filled) is FinetuneSettings and filled.max_words == task.defaults.max_words
    assert TASKS["qa"].defaults == TaskDefaults(epochs=2, batch_size=16, lr=3e-5, max_length=None, pool=None)
    with pytest.raises(UsageError, match="unknown --task 'pos'"):
        get_task("pos")
    with pytest.raises(UsageError, match="it answers questions with `greenadapt qa`"):
        get_labelling_task("qa")


def test_a_tasks_transformers_name_comes_from_the_registry() -> None:
    # greenadapt.pipeline's names and the card's pipeline_tag are derived from these (tested through their use
    # in test_api.py and test_finetune_train.py); here the one place they come from.
    assert {name: task.pipeline_tag for name, task in TASKS.items()} == {
        "ner": "token-classification", "classify": "text-classification", "qa": "question-answering"}


@pytest.mark.parametrize(("task", "options", "refused"), [
    ("ner", {"doc_stride": 32}, "doc_stride"),
    ("ner", {"positive_label": "1"}, "positive_label"),
    ("classify", {"max_words": 30, "entity_type": "Disease"}, "max_words, entity_type"),
    ("qa", {"metric": "f1", "report_to": ("tensorboard",)}, "metric, report_to"),
    ("qa", {"file_format": "tsv"}, "file_format"),
    ("qa", {"agreement": 1.0}, "agreement"),
])
def test_options_a_task_cannot_use_are_refused(task: str, options: dict[str, Any], refused: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=f"^{refused} (does|do) not apply to task {task}"):
        FinetuneSettings(task=task, train=tmp_path / "x", **options)  # refused when the settings are made
    get_task(task).check_unused(FinetuneSettings(task=task, train=tmp_path / "x"))  # unset: nothing refused


# --------------------------------------------------------------------------
# CONTRIBUTING's recipe: a new labelling task in one module


class PosTask(NerTask):
    """Part-of-speech tagging: a word and its tag per line; token accuracy."""

    name = "pos"
    summary = "part-of-speech tags: a word and its tag per line; token accuracy"
    defaults = TaskDefaults(epochs=2)
    unused_options = ("positive_label", "doc_stride", "entity_type")
    metrics = ("accuracy",)
    default_metric = "accuracy"

    def read(self, path: str | Path, settings: TaskSettings | ReaderOptions, *, require_labels: bool) -> TaskFile:
        sentences, words, tags = [], [], []
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines() + [""], start=1):
            if line.strip():
                word, tag = line.split("\t")
                words.append(word)
                tags.append(tag)
            elif words:
                sentences.append(NerSentence(tuple(words), tuple(tags), tuple(range(number - len(words), number))))
                words, tags = [], []
        return TaskFile(Path(path), "columns", sentences, True, {})

    def order_labels(self, labels: Sequence[str]) -> list[str]:
        return sorted(set(labels))

    def score(self, task_file: TaskFile, predictions: Sequence[Any], settings: TaskSettings) -> dict[str, Any]:
        gold = [tag for sentence in task_file.examples for tag in sentence.labels]  # type: ignore[union-attr]
        predicted = [tag for sentence in predictions for tag in sentence]
        return {"accuracy": sum(g == p for g, p in zip(gold, predicted, strict=True)) / len(gold)}


def _pos_file(path: Path, n: int, seed: int) -> Path:
    import random

    nouns, verbs, dets = ("patients", "cells", "insulin", "tumor"), ("grow", "need", "show"), ("the", "some")
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        lines += [f"{rng.choice(dets)}\tDET", f"{rng.choice(nouns)}\tNOUN", f"{rng.choice(verbs)}\tVERB", f"{rng.choice(nouns)}\tNOUN", ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def test_a_new_task_is_one_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASKS, "pos", PosTask())
    model = build_tiny_expanded(tmp_path / "model")
    train, test = _pos_file(tmp_path / "train.tsv", 60, 1), _pos_file(tmp_path / "test.tsv", 20, 2)
    outcome = greenadapt.finetune("pos", train, test=test, model=str(model), out=tmp_path / "run", lr=3e-3, batch_size=8, device="cpu")
    stats = outcome.manifest["stats"]
    assert stats["task"] == "pos" and outcome.manifest["config"]["train"]["epochs"] == 2  # the task's own default
    assert json.loads((tmp_path / "run" / "greenadapt_task.json").read_text())["labels"] == ["DET", "NOUN", "VERB"]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    # Three tags that follow from the word; always NOUN would score 0.5, the two commonest 0.75.
    assert metrics["summary"]["test"]["mean"]["accuracy"]["mean"] > 0.9
    with pytest.raises(UsageError, match="positive_label does not apply to task pos"):
        greenadapt.finetune("pos", train, model=str(model), out=tmp_path / "other", positive_label="NOUN")


@pytest.mark.parametrize(("change", "message"), [
    ({"labels": "O B I"}, "'labels' is not a list of label strings"),
    ({"max_length": 0}, "'max_length' is not a positive integer"),
    ({"has_domain_tokenizer": "yes"}, "'has_domain_tokenizer' is not true or false"),
    ({"task": None}, "'task' is not a task name"),
])
def test_task_settings_are_checked_when_read_back(change: dict[str, Any], message: str, tmp_path: Path) -> None:
    from greenadapt.errors import StageError

    good = TaskSettings(task="ner", labels=["O", "B", "I"], max_length=64).to_json()
    assert TaskSettings.from_json(good) == TaskSettings(task="ner", labels=["O", "B", "I"], max_length=64)
    with pytest.raises(StageError, match=f"damaged greenadapt_task.json: {message}") as info:
        TaskSettings.from_json({**good, **change}, tmp_path / "greenadapt_task.json")
    assert info.value.path == str(tmp_path / "greenadapt_task.json")


@pytest.mark.parametrize("given,suggested", [("classfy", "classify"), ("NRE", "ner"), ("Clasify", "classify")])
def test_a_wrong_task_name_suggests_the_right_one(given: str, suggested: str) -> None:
    from greenadapt.errors import UsageError
    from greenadapt.tasks import get_task

    with pytest.raises(UsageError) as info:
        get_task(given)
    assert f"did you mean --task {suggested}?" in info.value.one_line()


@pytest.mark.parametrize("given", ["NER", "Ner", "CLASSIFY", "QA"])
def test_a_task_name_in_another_letter_case_is_that_task(given: str) -> None:
    from greenadapt.tasks import get_task

    assert get_task(given).name == given.lower()
