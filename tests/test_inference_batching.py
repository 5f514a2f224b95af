"""How inference lays out its work: raw documents in windows, and a sentence both tokenizers read alike run once.

Invariants: a window never holds more documents or characters than asked (a longer document is a window alone) and
is handed on as soon as it is full, before the next document is read (a pipe's reader sees it), and at once where a
live input stalls (what a slow feed gave is predicted when it pauses), a reading error still raised; the domain view of a
unit with no domain word is the general view's, so pooling gives the same logits as running both views, and the
domain view runs only the units the tokenizers read differently.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import HANG_S, REPO
from finetune_helpers import build_tiny_expanded, write_ner_file
from greenadapt.errors import DataError
from greenadapt.inference.prediction_input import Record
from greenadapt.inference.windows import flushed_on_stalls, windows


def _records(texts: list[str]) -> Iterator[Record]:
    for text in texts:
        yield Record(text, {"text": text})


def test_windows_bound_documents_and_characters() -> None:
    texts = ["a" * n for n in (3, 4, 2, 9, 1, 1, 1, 1, 5)]
    made = [[r.text for r in w] for w in windows(_records(texts), 3, 8)]
    assert [t for w in made for t in w] == texts  # every document once, in order
    for window in made:
        assert len(window) <= 3
        assert sum(map(len, window)) <= 8 or len(window) == 1  # only a document longer than the bound stands alone
    assert ["a" * 9] in made
    assert [len(w) for w in windows(_records(["x"] * 7), 3, 10**6)] == [3, 3, 1]


def test_a_full_window_is_handed_on_before_the_next_document_is_read() -> None:
    def two_then_stuck() -> Iterator[Record]:
        yield from _records(["one", "two"])
        raise AssertionError("read past a full window")

    assert [r.text for r in next(windows(two_then_stuck(), 2, 10**6))] == ["one", "two"]
    assert [r.text for r in next(windows(two_then_stuck(), 5, 6))] == ["one", "two"]  # 6 characters: full


def test_a_stalled_live_input_hands_on_what_it_gave() -> None:
    import threading

    resume = threading.Event()

    def three_then_pause() -> Iterator[Record]:
        yield from _records(["one", "two", "three"])
        resume.wait(30)  # a feed that goes quiet: no fourth line, no end of input
        yield from _records(["four"])

    made = windows(flushed_on_stalls(three_then_pause(), 0.2, 2048), 2048, 10**6)
    assert [r.text for r in next(made)] == ["one", "two", "three"]  # not waiting for 2,048 documents or the end
    resume.set()
    assert [[r.text for r in w] for w in made] == [["four"]]


def test_a_reading_error_of_a_live_input_is_raised_where_it_is_predicted() -> None:
    def one_then_bad() -> Iterator[Record]:
        yield from _records(["one"])
        raise DataError("not UTF-8 text", path=Path("<stdin>"), line=2)

    with pytest.raises(DataError, match="not UTF-8"):
        list(windows(flushed_on_stalls(one_then_bad(), 0.2, 2048), 2048, 10**6))


class _Counting:
    """A torch model that records every sequence it is given (ids without padding)."""

    def __init__(self, model: Any) -> None:
        self.model, self.config, self.training, self.seen = model, model.config, False, []

    def __call__(self, **inputs: Any) -> Any:
        for ids, mask in zip(inputs["input_ids"], inputs["attention_mask"], strict=True):
            self.seen.append(tuple(ids[mask.bool()].tolist()))
        return self.model(**inputs)

    def eval(self) -> _Counting:
        return self

    def train(self, mode: bool = True) -> _Counting:
        return self


@pytest.fixture(scope="module")
def expanded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_expanded(tmp_path_factory.mktemp("batching") / "model")


def test_a_unit_both_tokenizers_read_alike_runs_once_and_pools_as_before(expanded: Path) -> None:
    import torch
    from transformers import AutoModelForTokenClassification

    from greenadapt.artifacts.model_folder import load_tokenizers
    from greenadapt.modeling.units import VIEW_DOMAIN, VIEW_GENERAL, ner_units
    from greenadapt.data.task_files import NerSentence
    from greenadapt.compute.distributed import DistContext
    from greenadapt.compute.pooling import pooled_logits, same_in_both_views, view_logits

    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_pretrained(str(expanded), num_labels=3).eval()
    pair = load_tokenizers(expanded)
    sentences = [["the", "patients", "with", "melanoma"], ["the", "study", "of", "cells"], ["sepsis", "and", "glioma", "in", "cells"],
                 ["high", "and", "the"], ["insulin", "kinase"], ["patients", "was", "high"]]
    examples = [NerSentence(tuple(words), None, (i + 1,) * len(words)) for i, words in enumerate(sentences)]
    units, _ = ner_units(examples, {"O": 0, "B": 1, "I": 2}, pair, max_words=30, max_length=64)
    alike = [same_in_both_views(u) for u in units]
    assert 0 < sum(alike) < len(units)  # the sentences without a new word, and only they

    counting = _Counting(model)  # batches of one: no batch is filled up with repeats of its last unit
    pooled = pooled_logits(counting, units, DistContext(), has_domain=True, pad_id=pair.pad_id, batch_size=1)
    assert len(counting.seen) == len(units) + sum(not a for a in alike)
    assert sorted(counting.seen[len(units):]) == sorted(tuple(u.ids[VIEW_DOMAIN].tolist())
                                                        for u, a in zip(units, alike, strict=True) if not a)

    # the same logits as running every unit under both views
    both = {view: view_logits(model, units, view, DistContext(), pad_id=pair.pad_id, batch_size=4) for view in (VIEW_GENERAL, VIEW_DOMAIN)}
    np.testing.assert_allclose(pooled["general"], both[VIEW_GENERAL], atol=1e-5)
    np.testing.assert_allclose(pooled["domain"], both[VIEW_DOMAIN], atol=1e-5)
    np.testing.assert_allclose(pooled["mean"], (both[VIEW_GENERAL] + both[VIEW_DOMAIN]) / 2, atol=1e-5)


def test_predict_on_a_live_pipe_answers_before_the_input_ends(expanded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The whole command: a feed that gives two lines and pauses gets their predictions while it is still open. With
    the predictions on stdout, the summary is a line on stderr, left out by --quiet."""
    import json
    import os
    import selectors
    import subprocess
    import sys

    import greenadapt

    run = tmp_path / "run"
    greenadapt.finetune("ner", write_ner_file(tmp_path / "ner.tsv", 16, seed=1), model=str(expanded), out=run, epochs=1, batch_size=8,
                        device="cpu", progress=False)
    env = {**os.environ, "PYTHONPATH": str(REPO), "GREENADAPT_HEARTBEAT": "0"}
    process = subprocess.Popen([sys.executable, "-m", "greenadapt", "predict", "-m", str(run), "-", "--format", "text", "-o", "-", "-q"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write("patients with leukemia\nthe study of cells\n")
        process.stdin.flush()
        ready = selectors.DefaultSelector()
        ready.register(process.stdout, selectors.EVENT_READ)
        assert ready.select(timeout=HANG_S), "no prediction while the input is open"
        first = [json.loads(process.stdout.readline()), json.loads(process.stdout.readline())]
        assert [line["text"] for line in first] == ["patients with leukemia", "the study of cells"]
        assert process.poll() is None  # still reading its input
        process.stdin.write("sepsis\n")
        process.stdin.close()
        rest = process.stdout.read()
        assert process.wait(timeout=HANG_S) == 0
        assert [json.loads(line)["text"] for line in rest.splitlines()] == ["sepsis"]
        # -q on unlabelled text: not even the summary, which the lines on stdout say (a labelled input's scores are said:
        # tests/test_api.py)
        assert process.stderr is not None and process.stderr.read() == ""
    finally:
        process.kill()
        process.wait()
    from cli_helpers import cli_output

    text = tmp_path / "notes.txt"
    text.write_text("patients with leukemia\n")
    code, out, err = cli_output(["predict", "-m", str(run), str(text), "--format", "text", "-o", "-"], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["text"] == "patients with leukemia"
    assert "\nwrote 1 prediction (mean pooling, text input) to stdout" in f"\n{err}", err
