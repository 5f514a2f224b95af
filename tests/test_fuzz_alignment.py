"""Word ↔ wordpiece alignment under arbitrary words (hypothesis).

Words here are any Unicode (controls, combining marks, zero-width and
whitespace-only words, characters no vocabulary has), in both views of an
expanded model. The invariants, per sentence:

* every word maps to at least one wordpiece ([UNK] when the tokenizer drops it);
* the units cover every word exactly once, in order, each within the length
  limit; a word's pieces in a unit are its own pieces, in order, cut only when
  the word alone exceeds the limit, and that cut is reported (``truncated_words``);
* offsets round-trip: each piece's offsets lie inside its own word, word ids
  never decrease, and the pieces of a word cover it from its first to its last
  non-space character.
"""

from __future__ import annotations

import numpy as np
import pytest
from finetune_helpers import build_tiny_expanded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenadapt.artifacts.model_folder import TokenizerPair, load_tokenizers
from greenadapt.data.task_files import NerSentence
from greenadapt.defaults import MIN_MAX_LENGTH
from greenadapt.modeling.units import ner_units, plain_backend, word_pieces

ANY_WORD = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=10)
NICE_WORD = st.sampled_from(["tachycardia", "the", "leukemia", "Café", "x7!", "APC2,", "naïve", "ﬁber", "日本"])
WORD = st.one_of(ANY_WORD, NICE_WORD, st.sampled_from(["\u200b", "\u0301", " ", "\x07", "\ufeff", "a\u0301"]))
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> TokenizerPair:
    return load_tokenizers(build_tiny_expanded(tmp_path_factory.mktemp("fuzz-align") / "model"))


@SETTINGS
@given(sentence=st.lists(WORD, min_size=1, max_size=40), max_words=st.integers(1, 50), max_length=st.integers(MIN_MAX_LENGTH, 24))
def test_units_align_arbitrary_words(pair: TokenizerPair, sentence: list[str], max_words: int, max_length: int) -> None:
    n = len(sentence)
    ner = NerSentence(tuple(sentence), ("O",) * n, tuple(range(1, n + 1)))
    units, stats = ner_units([ner], {"O": 0}, pair, max_words=max_words, max_length=max_length)
    budget = max_length - 2
    pieces_per_view = [word_pieces(plain_backend(tok), [sentence], pair.unk_id)[0] for tok in pair.views]
    expected_truncated = 0
    covered: list[int] = []
    for unit in units:
        first, count = unit.first_word, unit.n_rows
        assert count >= 1
        covered.extend(range(first, first + count))
        for view, pieces in enumerate(pieces_per_view):
            ids, rows = unit.ids[view], unit.rows[view]
            assert len(ids) <= max_length and ids[0] == pair.cls_id and ids[-1] == pair.sep_id
            assert len(rows) == count and rows[0] == 1 and np.all(np.diff(rows) >= 1)
            ends = [*rows[1:], len(ids) - 1]
            for k in range(count):
                own = pieces[first + k]
                assert len(own) >= 1  # every word has a piece
                got = list(ids[rows[k] : ends[k]])
                assert got == list(own[:budget])  # its own pieces, in order; cut only past the budget
                expected_truncated += len(own) > budget
    assert covered == list(range(n))  # every word exactly once, in order
    assert stats["truncated_words"] == expected_truncated  # every cut word is reported


@SETTINGS
@given(sentence=st.lists(WORD, min_size=1, max_size=20))
def test_offsets_round_trip_inside_each_word(pair: TokenizerPair, sentence: list[str]) -> None:
    for tokenizer in pair.views:
        encoding = plain_backend(tokenizer).encode(sentence, is_pretokenized=True, add_special_tokens=False)
        word_ids = [w for w in encoding.word_ids if w is not None]
        assert word_ids == sorted(word_ids)  # order preserved
        spans: dict[int, list[tuple[int, int]]] = {}
        for word, (start, end) in zip(encoding.word_ids, encoding.offsets, strict=True):
            assert word is not None
            assert 0 <= start <= end <= len(sentence[word])  # offsets are within the piece's own word
            spans.setdefault(word, []).append((start, end))
        for word, found in spans.items():
            assert [s for s, _ in found] == sorted(s for s, _ in found)  # pieces left to right
            assert found[0][0] >= 0 and found[-1][1] <= len(sentence[word])
        for word, text in enumerate(sentence):
            if word not in spans:
                # Dropped entirely (word_pieces gives it [UNK]): only if nothing in it survives normalization.
                assert not tokenizer.backend_tokenizer.normalizer.normalize_str(text).strip(), repr(text)
