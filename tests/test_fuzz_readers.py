"""Fuzzing the readers: arbitrary bytes never end in anything but our typed errors.

The task-file readers (NER columns and JSON lines, classification TSV and
JSON lines), the SQuAD reader and the corpus readers (text, JSON lines,
CSV, TSV, PubMed XML, gzip, tar, zip) get arbitrary bytes and bytes built
from the tokens their formats are made of. Each must return or raise a
``GreenAdaptError`` (the CLI shows those as one line); any other exception
is a crash. The run is bounded and seeded (``derandomize``) so the suite
stays fast and repeatable; a longer run:

    GREENADAPT_FUZZ_EXAMPLES=20000 python -m pytest tests/test_fuzz_readers.py -q

(the examples count applies to each test).
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenadapt.corpus import ReadStats, resolve_corpus
from greenadapt.data.squad import read_squad
from greenadapt.data.task_files import ReaderOptions, read_task_file
from greenadapt.errors import GreenAdaptError

EXAMPLES = int(os.environ.get("GREENADAPT_FUZZ_EXAMPLES", "120"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

FRAGMENTS = [
    b"{", b"}", b"[", b"]", b'"', b":", b",", b"\t", b"\n", b"\r\n", b" ", b"\x00", b"\xff", b"\xc3", b"\xef\xbb\xbf",
    b"0", b"-1", b"1e999", b"NaN", b"null", b"true", b"3.5", b"[[[[[[[[[[", b"{\"a\":" * 20,
    b'"text"', b'"label"', b'"pair"', b'"tokens"', b'"ner_tags"', b'"tags"', b'"data"', b'"paragraphs"', b'"context"',
    b'"qas"', b'"question"', b'"id"', b'"answers"', b'"answer_start"', b'"is_impossible"', b'"title"',
    b"B-X", b"I-X", b"O", b"B-", b"E-Y", b"S-Y", b"word", b"caf\xc3\xa9", b"-DOCSTART-", b"text\tlabel", b"sentence",
    b"<PubmedArticleSet>", b"<PubmedArticle>", b"<ArticleTitle>", b"</ArticleTitle>", b"<AbstractText>", b"<!DOCTYPE",
    b"<!ENTITY a \"aaaa\">", b"&a;", b"</PubmedArticle>", b"<?xml version=\"1.0\"?>",
]
STRUCTURED = st.lists(st.sampled_from(FRAGMENTS), max_size=60).map(b"".join)
ANY_BYTES = st.one_of(st.binary(max_size=600), STRUCTURED)

_TMP: Path | None = None  # the module's folder for the files it writes (pytest's, so it is removed with the others)


@pytest.fixture(scope="module", autouse=True)
def _folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    global _TMP
    _TMP = tmp_path_factory.mktemp("fuzz")


def _write(name: str, data: bytes) -> Path:
    assert _TMP is not None
    path = _TMP / name
    path.write_bytes(data)
    return path


def _survives(call: object) -> None:
    try:
        call()  # type: ignore[operator]
    except GreenAdaptError as exc:
        text = exc.one_line()
        assert "\n" not in text and text


@FUZZ
@given(data=ANY_BYTES, fmt=st.sampled_from(["auto", "columns", "jsonl", "tsv"]), labels=st.booleans(),
       ext=st.sampled_from([".txt", ".tsv", ".jsonl", ".conll"]))
def test_task_readers_survive_any_bytes(data: bytes, fmt: str, labels: bool, ext: str) -> None:
    path = _write(f"task{ext}", data)
    for task in ("ner", "classify"):
        _survives(lambda task=task: read_task_file(path, task, ReaderOptions(format=fmt), require_labels=labels))


@FUZZ
@given(data=ANY_BYTES)
def test_squad_reader_survives_any_bytes(data: bytes) -> None:
    path = _write("squad.json", data)
    _survives(lambda: read_squad(path))


@FUZZ
@given(data=st.fixed_dictionaries({"context": st.text(max_size=80), "answer": st.text(max_size=10),
                                   "start": st.one_of(st.integers(-5, 100), st.none(), st.text(max_size=3)),
                                   "extra": st.sampled_from([{}, {"is_impossible": True}, {"answers": None}, {"id": 5}])}))
def test_squad_reader_survives_odd_but_well_formed_json(data: dict) -> None:
    import json

    qa = {"id": "q1", "question": "what?", "answers": [{"text": data["answer"], "answer_start": data["start"]}], **data["extra"]}
    doc = {"data": [{"title": "t", "paragraphs": [{"context": data["context"], "qas": [qa]}]}]}
    path = _write("squad-ok.json", json.dumps(doc).encode())
    _survives(lambda: read_squad(path))


def _archive(kind: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("a.txt", data)
            archive.writestr("b.jsonl", data)
    else:
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            for name in ("a.txt", "b.csv", "metadata.csv"):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@FUZZ
@given(data=ANY_BYTES, name=st.sampled_from(["c.txt", "c.jsonl", "c.csv", "c.tsv", "c.xml", "c.txt.gz", "c.jsonl.gz",
                                             "c.tar", "c.tgz", "c.zip", "c.xml.gz"]),
       wrap=st.sampled_from(["raw", "compressed", "archived"]), cut=st.integers(0, 64))
def test_corpus_readers_survive_any_bytes(data: bytes, name: str, wrap: str, cut: int) -> None:
    if wrap == "compressed" and name.endswith(".gz"):
        data = gzip.compress(data)
        data = data[: max(1, len(data) - cut)] if cut else data  # truncated streams too
    elif wrap == "archived" and name.endswith((".tar", ".tgz", ".zip")):
        data = _archive("zip" if name.endswith(".zip") else "tar", data)
        data = data[: max(1, len(data) - cut)] if cut % 2 else data
    path = _write(name, data)

    def read() -> None:
        stats = ReadStats()
        for source in resolve_corpus([str(path)]):
            for text in source.iter_texts(stats):
                assert isinstance(text, str)

    _survives(read)
