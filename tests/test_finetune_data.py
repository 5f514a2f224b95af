"""Task file readers and prediction writers: formats, labels, errors with file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greenadapt.data.task_files import NerSentence, ReaderOptions, check_known_labels, read_task_file
from greenadapt.data.predictions import PRED_COLUMN, write_predictions
from greenadapt.errors import DataError, UsageError

AUTO = ReaderOptions()


def _write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_bytes(text.encode(encoding))
    return path


def test_biobert_columns(tmp_path: Path) -> None:
    f = _write(tmp_path / "a.tsv", "Loss\tO\nof\tO\nAPC2\tB\ngene\tI\n\n\nThe\tO\ncancer\tB\n")
    task_file = read_task_file(f, "ner", AUTO, require_labels=True)
    assert [s.words for s in task_file.examples] == [("Loss", "of", "APC2", "gene"), ("The", "cancer")]
    assert task_file.examples[0].labels == ("O", "O", "B", "I")
    assert task_file.examples[1].lines == (7, 8)
    assert task_file.labels() == ["B", "I", "O"]


def test_conll_with_docstart_and_bioes(tmp_path: Path) -> None:
    text = ("-DOCSTART- -X- -X- O\n\nEU NNP B-NP S-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\ncall NN I-NP E-MISC\n\n-DOCSTART- -X- "
            "O\nPeter NNP B-NP S-PER\n")
    task_file = read_task_file(_write(tmp_path / "c.txt", text), "ner", AUTO, require_labels=True)
    assert len(task_file.examples) == 2
    assert task_file.examples[0].labels == ("S-ORG", "O", "B-MISC", "E-MISC")
    assert task_file.examples[1].words == ("Peter",)


def test_ner_jsonl(tmp_path: Path) -> None:
    lines = [json.dumps({"tokens": ["a", "b"], "tags": ["O", "B-X"]}), "", json.dumps({"tokens": ["c"], "tags": ["S-X"]})]
    task_file = read_task_file(_write(tmp_path / "n.jsonl", "\n".join(lines)), "ner", AUTO, require_labels=True)
    assert task_file.format == "jsonl"
    assert task_file.examples[1] == NerSentence(("c",), ("S-X",), (3,))


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("a\tO\nb\tO\nc\n", 3, "found 1"),
        ("a\tNN\tO\nb\tO\n\nc\tNN\tO\n", 2, "expected 3 column(s) on this line, as on line 1, found 2"),  # issue 36.11
        ("a\tO\nb\tNN\tB\n", 2, "expected 2 column(s)"),
        ("a\tO\nb\tDisease\n", 2, "'Disease' is not O or B/I/E/S"),
        ("a\tO\nb\tX-PER\n", 2, "is not O"),
    ],
)
def test_malformed_ner_line_names_its_line(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    f = _write(tmp_path / "bad.tsv", text)
    with pytest.raises(DataError) as info:
        read_task_file(f, "ner", AUTO, require_labels=True)
    assert info.value.line == line and info.value.path == str(f)
    assert fragment in info.value.message
    assert "\n" not in info.value.one_line()


def test_ner_jsonl_errors(tmp_path: Path) -> None:
    f = _write(tmp_path / "n.jsonl", json.dumps({"tokens": ["a"], "tags": ["O"]}) + "\n{broken\n")
    with pytest.raises(DataError, match="not valid JSON") as info:
        read_task_file(f, "ner", AUTO, require_labels=True)
    assert info.value.line == 2
    f = _write(tmp_path / "m.jsonl", json.dumps({"tokens": ["a", "b"], "tags": ["O"]}))
    with pytest.raises(DataError, match="2 tokens but 1 tags"):
        read_task_file(f, "ner", AUTO, require_labels=True)
    f = _write(tmp_path / "i.jsonl", json.dumps({"tokens": ["a"], "tags": [0]}))
    with pytest.raises(DataError, match="label strings"):
        read_task_file(f, "ner", AUTO, require_labels=True)


@pytest.mark.parametrize("task", ["ner", "classify"])
def test_empty_file(tmp_path: Path, task: str) -> None:
    with pytest.raises(DataError, match="empty"):
        read_task_file(_write(tmp_path / "e.tsv", "\n\n"), task, AUTO, require_labels=True)


def test_unlabelled_file_rejected_for_training(tmp_path: Path) -> None:
    f = _write(tmp_path / "u.txt", "a\nb\n")
    assert not read_task_file(f, "ner", AUTO, require_labels=False).labelled
    with pytest.raises(DataError, match="no labels"):
        read_task_file(f, "ner", AUTO, require_labels=True)


def test_classify_jsonl_with_pairs_and_custom_fields(tmp_path: Path) -> None:
    lines = [json.dumps({"q": "is it?", "c": "it is", "y": 1}), json.dumps({"q": "no", "c": "x", "y": 0})]
    options = ReaderOptions(text_field="q", pair_field="c", label_field="y")
    task_file = read_task_file(_write(tmp_path / "p.jsonl", "\n".join(lines)), "classify", options, require_labels=True)
    assert [(e.text, e.pair, e.label) for e in task_file.examples] == [("is it?", "it is", "1"), ("no", "x", "0")]


def test_classify_tsv_header_bom_and_numbered_columns(tmp_path: Path) -> None:
    mrpc = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA \"quoted\" one.\tAnother.\n0\t3\t4\tB.\tC.\n"
    task_file = read_task_file(_write(tmp_path / "mrpc.tsv", mrpc), "classify", AUTO, require_labels=True)
    assert [(e.text, e.pair, e.label) for e in task_file.examples] == [('A "quoted" one.', "Another.", "1"), ("B.", "C.", "0")]
    cola = "gj04\t1\t\tOur friends won't buy this.\ngj04\t0\t*\tThe more we study.\n"
    f = _write(tmp_path / "cola.tsv", cola)
    with pytest.raises(DataError, match="no header row") as info:
        read_task_file(f, "classify", AUTO, require_labels=True)
    assert "--text-field 3 --label-field 1" in info.value.one_line()
    task_file = read_task_file(f, "classify", ReaderOptions(text_field="3", label_field="1"), require_labels=True)
    assert [(e.text, e.label) for e in task_file.examples] == [("Our friends won't buy this.", "1"), ("The more we study.", "0")]


def test_tsv_short_row_and_missing_label(tmp_path: Path) -> None:
    f = _write(tmp_path / "s.tsv", "sentence\tlabel\na b\t1\nc d\n")
    with pytest.raises(DataError, match="column 1") as info:
        read_task_file(f, "classify", AUTO, require_labels=True)
    assert info.value.line == 3
    f = _write(tmp_path / "m.tsv", "sentence\tlabel\na b\t1\nc d\t\n")
    with pytest.raises(DataError, match="no label while others do") as info:
        read_task_file(f, "classify", AUTO, require_labels=True)
    assert info.value.line == 3


def test_unknown_label_names_file_and_line(tmp_path: Path) -> None:
    f = _write(tmp_path / "t.tsv", "a\tO\nb\tB-Gene\n")
    task_file = read_task_file(f, "ner", AUTO, require_labels=True)
    with pytest.raises(DataError, match="'B-Gene' does not occur in the training data") as info:
        check_known_labels(task_file, ["O", "B-Dis", "I-Dis"])
    assert info.value.line == 2


def test_unknown_format() -> None:
    with pytest.raises(UsageError):
        read_task_file(Path(__file__), "ner", ReaderOptions(format="xml"), require_labels=False)


def test_predictions_written_in_the_input_format(tmp_path: Path) -> None:
    ner = _write(tmp_path / "n.tsv", "-DOCSTART-\tO\n\nLoss\tO\nof\tO\n\nAPC2\tB\n")
    task_file = read_task_file(ner, "ner", AUTO, require_labels=True)
    out = tmp_path / "out" / "n.tsv"
    write_predictions(task_file, [["O", "B"], ["B"]], out)
    assert out.read_text() == "-DOCSTART-\tO\n\nLoss\tO\tO\nof\tO\tB\n\nAPC2\tB\tB\n"
    again = read_task_file(out, "ner", AUTO, require_labels=True)
    assert [s.labels for s in again.examples] == [("O", "B"), ("B",)]  # the last column is the prediction

    tsv = _write(tmp_path / "c.tsv", "sentence\tlabel\nx y\t1\nz\t0\n")
    task_file = read_task_file(tsv, "classify", AUTO, require_labels=True)
    write_predictions(task_file, ["0", "0"], tmp_path / "c-out.tsv")
    assert (tmp_path / "c-out.tsv").read_text() == f"sentence\tlabel\t{PRED_COLUMN}\nx y\t1\t0\nz\t0\t0\n"

    jsonl = _write(tmp_path / "c.jsonl", json.dumps({"text": "x", "label": "a", "meta": [1]}) + "\n")
    task_file = read_task_file(jsonl, "classify", AUTO, require_labels=True)
    write_predictions(task_file, ["b"], tmp_path / "c-out.jsonl")
    assert json.loads((tmp_path / "c-out.jsonl").read_text()) == {"text": "x", "label": "a", "meta": [1], "pred_label": "b"}


# --------------------------------------------------------------------------
# The real data sets, as they are


NER_SETS = ["NCBI-disease", "BC5CDR-disease"]


@pytest.mark.integration
@pytest.mark.parametrize("name", NER_SETS)
def test_reads_shared_ner_sets(shared_data: Path, name: str) -> None:
    for split in ("train.tsv", "devel.tsv", "test.tsv"):
        task_file = read_task_file(shared_data / "ner" / name / split, "ner", AUTO, require_labels=True)
        assert task_file.labels() == ["B", "I", "O"]
        assert len(task_file.examples) > 900
        assert all(len(s.words) == len(s.labels or ()) for s in task_file.examples)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("relpath", "options", "n_labels", "pairs"),
    [
        ("classification/chemprot/train.txt", AUTO, 13, False),
        ("classification/citation_intent/train.txt", AUTO, 6, False),
        ("glue/RTE/train.tsv", AUTO, 2, True),
        ("glue/MRPC/train.tsv", AUTO, 2, True),
        ("glue/CoLA/train.tsv", ReaderOptions(text_field="3", label_field="1"), 2, False),
    ],
)
def test_reads_shared_classification_sets(
    shared_data: Path, relpath: str, options: ReaderOptions, n_labels: int, pairs: bool
) -> None:
    path = shared_data / relpath
    task_file = read_task_file(path, "classify", options, require_labels=True)
    assert len(task_file.labels()) == n_labels
    assert all((e.pair is not None) == pairs for e in task_file.examples)
    n_lines = sum(1 for line in path.read_text(encoding="utf-8-sig").splitlines() if line.strip())
    header = 1 if task_file.field_names.get("header") == "yes" else 0
    assert len(task_file.examples) == n_lines - header  # every row read, none dropped
    dev = path.with_name("dev.tsv" if path.suffix == ".tsv" else "dev.txt")
    check_known_labels(read_task_file(dev, "classify", options, require_labels=True), task_file.labels())


@pytest.mark.integration
def test_mrpc_test_file_reads_unlabelled(shared_data: Path) -> None:
    task_file = read_task_file(shared_data / "glue/MRPC/test.tsv", "classify", AUTO, require_labels=False)
    assert not task_file.labelled and task_file.examples[0].pair is not None


def test_more_processes_than_gpus_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun gives rank N the GPU cuda:N; on a machine with fewer GPUs that used to die in CUDA
    ("invalid device ordinal", seen on a one-GPU H100 with two processes)."""
    import torch

    from greenadapt.errors import UsageError
    from greenadapt.machine.devices import pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UsageError, match=r"cuda:1, but only 1 CUDA GPU\(s\) are visible"):
        pick_device("cuda", local_rank=1)
    with pytest.raises(UsageError, match="only 1 CUDA GPU"):
        pick_device("auto", local_rank=3)
    with pytest.raises(UsageError, match="only 1 CUDA GPU"):
        pick_device("cuda:2")
