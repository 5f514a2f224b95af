"""Words (whitespace, then punctuation runs) and the wordpiece → word map."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from greenadapt.corpus.words import _kind, split_words
from greenadapt.inference.qa.words import word_max, wordpiece_words


def _texts(text: str) -> list[str]:
    words = split_words(text)
    return [text[s:e] for s, e in zip(words.starts, words.ends, strict=True)]


def test_whitespace_then_punctuation_runs() -> None:
    text = "Sleep, x-ray  (COVID-19)?! 3.5%\ncafé—done…"
    assert _texts(text) == [
        "Sleep", ",", "x", "-", "ray", "(", "COVID", "-", "19", ")?!", "3", ".", "5", "%", "café", "—", "done", "…",
    ]
    assert _texts("") == [] and _texts("  \n\t ") == []


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab1 \t\n.,-()éü—’") + ["\u00a0", "中"]), max_size=60))
def test_words_partition_the_non_space_characters(text: str) -> None:
    words = split_words(text)
    assert (np.diff(words.starts) > 0).all() and (words.ends > words.starts).all()
    assert (words.starts[1:] >= words.ends[:-1]).all()
    pieces = _texts(text)
    assert "".join(pieces) == "".join(text.split())
    for piece in pieces:
        kinds = {_kind(ch) for ch in piece}
        assert len(kinds) == 1 and 0 not in kinds  # all punctuation or none, never whitespace


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from conftest import build_tiny_bert
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(build_tiny_bert(tmp_path_factory.mktemp("qa-words") / "m", head="qa"))


def test_every_wordpiece_lies_inside_its_word(tokenizer) -> None:  # type: ignore[no-untyped-def]
    text = "Tachycardias, in COVID-19 patients (n=3.5%)! Café’s sleep\u00a0study—done.\tÉTUDE"
    encoding = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    offsets = np.asarray(encoding.offsets)
    words = split_words(text)
    piece_word = wordpiece_words(words, offsets[:, 0], offsets[:, 1])
    assert (piece_word >= 0).all()
    for (start, end), word in zip(offsets, piece_word, strict=True):
        assert words.starts[word] <= start < end <= words.ends[word]
    # Every word is covered by at least one wordpiece, so every word gets a logit.
    assert set(piece_word.tolist()) == set(range(len(words)))


def test_word_max_pools_over_pieces() -> None:
    piece_word = np.array([0, 0, 1, -1, 3, 3, 3])
    values = np.array([1.0, 5.0, -2.0, 99.0, 0.5, 7.0, 3.0])
    np.testing.assert_array_equal(word_max(values, piece_word, 4), [5.0, -2.0, -np.inf, 7.0])
