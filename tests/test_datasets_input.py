"""Task data from the `datasets` ecosystem: a save_to_disk folder or a Parquet file, ClassLabel names resolved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.data.task_files import ReaderOptions, read_task_file
from greenadapt.errors import DataError

datasets = pytest.importorskip("datasets")


def _columns_to_dataset(path: Path) -> object:
    """A Hub-style NER split (tokens + ClassLabel ner_tags) holding the sentences of a column file."""
    sentences = read_task_file(path, "ner", ReaderOptions(), require_labels=True).examples
    names = ["O", "B-Disease", "I-Disease"]
    features = datasets.Features(
        {"id": datasets.Value("string"), "tokens": datasets.Sequence(datasets.Value("string")),
         "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names))}
    )
    rows = {"id": [str(i) for i in range(len(sentences))], "tokens": [list(s.words) for s in sentences],
            "ner_tags": [[names.index(t) for t in s.labels] for s in sentences]}
    return datasets.Dataset.from_dict(rows, features=features)


def test_a_saved_ner_split_reads_like_the_column_file(tmp_path: Path) -> None:
    source = write_ner_file(tmp_path / "train.tsv", 20, seed=1, typed=True)
    _columns_to_dataset(source).save_to_disk(str(tmp_path / "saved"))
    from_file = read_task_file(source, "ner", ReaderOptions(), require_labels=True)
    from_disk = read_task_file(tmp_path / "saved", "ner", ReaderOptions(), require_labels=True)
    assert from_disk.format == "dataset" and from_disk.labelled
    assert [(s.words, s.labels) for s in from_disk.examples] == [(s.words, s.labels) for s in from_file.examples]
    assert [s.lines[0] for s in from_disk.examples] == list(range(1, 21))  # rows stand in for lines


def test_parquet_classification_with_classlabel_and_missing_labels(tmp_path: Path) -> None:
    features = datasets.Features({"sentence": datasets.Value("string"), "label": datasets.ClassLabel(names=["unacceptable", "acceptable"])})
    datasets.Dataset.from_dict({"sentence": ["a b c", "d e"], "label": [1, 0]}, features=features).to_parquet(str(tmp_path / "dev.parquet"))
    task_file = read_task_file(tmp_path / "dev.parquet", "classify", ReaderOptions(), require_labels=True)
    assert [(e.text, e.label) for e in task_file.examples] == [("a b c", "acceptable"), ("d e", "unacceptable")]
    # GLUE test splits mark "no label" with -1: such a split is unlabelled, not labelled "-1".
    datasets.Dataset.from_dict({"sentence": ["x"], "label": [-1]}, features=features).save_to_disk(str(tmp_path / "test"))
    assert not read_task_file(tmp_path / "test", "classify", ReaderOptions(), require_labels=False).labelled


def test_a_dataset_dict_folder_is_refused_with_its_splits(tmp_path: Path) -> None:
    split = datasets.Dataset.from_dict({"text": ["a"], "label": ["x"]})
    datasets.DatasetDict({"train": split, "validation": split}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(DataError, match="train, validation") as info:
        read_task_file(tmp_path / "dd", "classify", ReaderOptions(), require_labels=True)
    assert "dd/train" in (info.value.hint or "")


def test_finetune_and_predict_take_a_saved_split(tmp_path: Path) -> None:
    import greenadapt
    model = build_tiny_expanded(tmp_path / "model")
    _columns_to_dataset(write_ner_file(tmp_path / "train.tsv", 30, seed=1, typed=True)).save_to_disk(str(tmp_path / "train"))
    _columns_to_dataset(write_ner_file(tmp_path / "test.tsv", 8, seed=2, typed=True)).save_to_disk(str(tmp_path / "test"))
    run = greenadapt.finetune("ner", tmp_path / "train", test=tmp_path / "test", model=str(model), out=tmp_path / "run",
                              epochs=1, batch_size=8, device="cpu")
    metrics = json.loads((run.path / "metrics.json").read_text())["per_seed"]["42"]["test"]["mean"]
    written = [json.loads(line) for line in (run.path / "predictions" / "test.jsonl").read_text().splitlines()]
    assert len(written) == 8 and all(len(r["pred_tags"]) == len(r["tokens"]) for r in written)
    summary = greenadapt.predict(tmp_path / "test", model=str(run.path), output=tmp_path / "pred.jsonl", device="cpu", progress=False)
    assert summary.format == "dataset" and summary.metrics is not None and summary.metrics["f1"] == metrics["f1"]
    again = greenadapt.finetune("ner", tmp_path / "train", test=tmp_path / "test", model=str(model), out=tmp_path / "run",
                                epochs=1, batch_size=8, device="cpu")
    assert again.skipped  # a folder input has a stable identity
