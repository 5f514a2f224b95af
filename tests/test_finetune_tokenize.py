"""Word ↔ wordpiece alignment, chunking and splitting, both views."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from finetune_helpers import build_tiny_expanded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenadapt.artifacts.model_folder import TokenizerPair, load_tokenizers
from greenadapt.data.metrics import chunks
from greenadapt.data.task_files import NerSentence, TextExample
from greenadapt.modeling.units import (
    IGNORE,
    VIEW_DOMAIN,
    VIEW_GENERAL,
    ner_units,
    plain_backend,
    split_ranges,
    text_units,
    word_pieces,
)


@pytest.fixture(scope="module")
def expanded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_expanded(tmp_path_factory.mktemp("expanded") / "model")


@pytest.fixture(scope="module")
def pair(expanded: Path) -> TokenizerPair:
    return load_tokenizers(expanded)


def test_loads_both_tokenizers(pair: TokenizerPair) -> None:
    assert pair.has_domain
    assert len(pair.domain) > len(pair.general) == pair.general_vocab_size
    general = pair.general.convert_ids_to_tokens(pair.general("tachycardia", add_special_tokens=False)["input_ids"])
    domain = pair.domain.convert_ids_to_tokens(pair.domain("tachycardia", add_special_tokens=False)["input_ids"])
    assert len(general) > 1 and domain == ["tachycardia"]


def test_plain_folder_has_one_view(tiny_bert_base: Path) -> None:
    pair = load_tokenizers(tiny_bert_base)
    assert not pair.has_domain and len(pair.views) == 1


WORDS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\t\n\r"),
    min_size=1,
    max_size=12,
).filter(lambda w: w.strip() == w and w != "")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sentence=st.lists(WORDS, min_size=1, max_size=20))
def test_word_pieces_align_every_word(pair: TokenizerPair, sentence: list[str]) -> None:
    for tokenizer in pair.views:
        backend = plain_backend(tokenizer)
        (pieces,) = word_pieces(backend, [sentence], pair.unk_id)
        assert len(pieces) == len(sentence)
        assert all(len(p) >= 1 for p in pieces)
        # Each word's pieces are the sentence's, encoded whole, at that word: alignment never shifts pieces between
        # words, and a word tokenized once, alone (as word_pieces does), is what it is in the sentence.
        whole = backend.encode(sentence, is_pretokenized=True, add_special_tokens=False)
        assert pieces == [tuple(i for i, w in zip(whole.ids, whole.word_ids, strict=True) if w == k) or (pair.unk_id,)
                          for k in range(len(sentence))]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tags=st.lists(st.sampled_from(["O", "B", "I"]), min_size=1, max_size=80),
    max_words=st.integers(1, 12),
    max_length=st.integers(8, 40),
)
def test_units_cover_every_word_once_without_splitting_entities(
    pair: TokenizerPair, tags: list[str], max_words: int, max_length: int
) -> None:
    vocabulary = ["tachycardia", "the", "leukemia", "sle", "x7!", "apoptosis", "cells"]
    words = tuple(vocabulary[i % len(vocabulary)] for i in range(len(tags)))
    sentence = NerSentence(words, tuple(tags), tuple(range(1, len(tags) + 1)))
    units, stats = ner_units([sentence], {"O": 0, "B": 1, "I": 2}, pair, max_words=max_words, max_length=max_length)
    covered = []
    for unit in units:
        assert len(unit.ids) == 2
        for view in (VIEW_GENERAL, VIEW_DOMAIN):
            ids, rows = unit.ids[view], unit.rows[view]
            assert len(ids) <= max_length
            assert ids[0] == pair.cls_id and ids[-1] == pair.sep_id
            assert len(rows) == unit.n_rows and np.all(np.diff(rows) > 0) and rows[0] == 1
        covered.extend(range(unit.first_word, unit.first_word + unit.n_rows))
        assert [ {0: "O", 1: "B", 2: "I"}[t] for t in unit.targets] == tags[unit.first_word : unit.first_word + unit.n_rows]
    assert covered == list(range(len(tags)))
    if stats["split_for_length"] == 0:
        starts = {u.first_word for u in units}
        for start, end, _ in chunks(tags):
            assert not any(start < s <= end for s in starts), "an entity was split"


def test_word_initial_pieces_carry_the_labels(pair: TokenizerPair) -> None:
    sentence = NerSentence(("tachycardia", "in", "leukemia"), ("B", "O", "B"), (1, 2, 3))
    (unit,), _ = ner_units([sentence], {"O": 0, "B": 1, "I": 2}, pair, max_words=30, max_length=64)
    general = pair.general.convert_ids_to_tokens(unit.ids[VIEW_GENERAL].tolist())
    domain = pair.domain.convert_ids_to_tokens(unit.ids[VIEW_DOMAIN].tolist())
    assert domain == ["[CLS]", "tachycardia", "in", "leukemia", "[SEP]"]
    assert unit.rows[VIEW_DOMAIN].tolist() == [1, 2, 3]
    assert [general[r] for r in unit.rows[VIEW_GENERAL]] == ["ta", "in", general[unit.rows[VIEW_GENERAL][2]]]
    assert not any(general[r].startswith("##") for r in unit.rows[VIEW_GENERAL])
    assert unit.targets.tolist() == [1, 0, 1]


def test_chunks_respect_max_words_but_keep_entities_whole(pair: TokenizerPair) -> None:
    tags = ("O", "O", "B", "I", "I", "I", "O", "O")
    sentence = NerSentence(("the",) * 8, tags, tuple(range(8)))
    units, _ = ner_units([sentence], {"O": 0, "B": 1, "I": 2}, pair, max_words=3, max_length=128)
    assert [(u.first_word, u.n_rows) for u in units] == [(0, 2), (2, 4), (6, 2)]  # the 4-word entity stays whole


def test_evaluated_files_are_cut_as_unlabelled_text_is(pair: TokenizerPair) -> None:
    """Scores must be what prediction on the same words gives, so gold labels may not place the cuts."""
    tags = ("O", "O", "B", "I", "I", "I", "O", "O")
    labelled = NerSentence(("the",) * 8, tags, tuple(range(8)))
    label2id = {"O": 0, "B": 1, "I": 2}
    evaluated, _ = ner_units([labelled], label2id, pair, max_words=3, max_length=128, cut_at_entities=False)
    unlabelled, _ = ner_units([NerSentence(labelled.words, None, labelled.lines)], None, pair, max_words=3, max_length=128)
    assert [(u.first_word, u.n_rows) for u in evaluated] == [(u.first_word, u.n_rows) for u in unlabelled] == [(0, 3), (3, 3), (6, 2)]
    assert np.concatenate([u.targets for u in evaluated]).tolist() == [label2id[t] for t in tags]


def test_long_word_is_truncated_not_dropped(pair: TokenizerPair) -> None:
    sentence = NerSentence(("a" * 40, "the"), ("B", "O"), (1, 2))
    units, stats = ner_units([sentence], {"O": 0, "B": 1, "I": 2}, pair, max_words=30, max_length=10)
    assert stats["truncated_words"] >= 1
    assert sum(u.n_rows for u in units) == 2
    assert all(len(ids) <= 10 for u in units for ids in u.ids)


def test_split_ranges_hard_and_soft() -> None:
    everywhere = lambda p: True  # noqa: E731
    assert split_ranges(0, 7, lambda a, b: b - a <= 3, everywhere, hard=True) == [(0, 3), (3, 6), (6, 7)]
    only_at_5 = lambda p: p == 5  # noqa: E731
    assert split_ranges(0, 7, lambda a, b: b - a <= 3, only_at_5, hard=False) == [(0, 5), (5, 7)]
    assert split_ranges(0, 7, lambda a, b: b - a <= 3, only_at_5, hard=True) == [(0, 3), (3, 5), (5, 7)]


def test_text_units_pairs_and_truncation(pair: TokenizerPair) -> None:
    examples = [TextExample("tachycardia in the cells", "leukemia", "a", 1), TextExample("the " * 100, None, None, 2)]
    units, stats = text_units(examples, {"a": 0}, pair, max_length=24)
    assert stats["truncated"] == 1
    first = units[0]
    assert first.targets.tolist() == [0] and units[1].targets.tolist() == [IGNORE]
    for view in (VIEW_GENERAL, VIEW_DOMAIN):
        assert first.type_ids[view] is not None and first.type_ids[view][-1] == 1 and first.type_ids[view][0] == 0
        assert first.rows[view].tolist() == [0]
        assert len(units[1].ids[view]) == 24 and units[1].type_ids[view] is None
    assert len(first.ids[VIEW_DOMAIN]) < len(first.ids[VIEW_GENERAL])


@pytest.mark.parametrize("enabled_before", [True, False])
def test_units_are_built_with_the_cycle_collector_held_off_and_left_as_found(pair: TokenizerPair, enabled_before: bool,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Units hold no reference cycles; the collector's full passes over a loaded model's objects took up to a third of
    the time to build them (docs/benchmarks.md). Its state afterwards is the caller's, whatever happened inside."""
    import gc

    from greenadapt.modeling import units as units_module

    seen = []
    word_pieces = units_module.word_pieces
    monkeypatch.setattr(units_module, "word_pieces", lambda *a: seen.append(gc.isenabled()) or word_pieces(*a))
    sentence = NerSentence(("tachycardia", "in", "leukemia"), ("B", "O", "B"), (1, 2, 3))
    (gc.enable if enabled_before else gc.disable)()
    try:
        ner_units([sentence], {"O": 0, "B": 1, "I": 2}, pair, max_words=30, max_length=64)
        assert seen == [False, False] and gc.isenabled() is enabled_before  # one call per view
        with pytest.raises(KeyError):
            ner_units([sentence], {"O": 0}, pair, max_words=30, max_length=64)  # a label the map lacks
        assert gc.isenabled() is enabled_before
    finally:
        gc.enable()


def test_each_tokenizer_is_copied_once_however_many_batches_and_again_when_it_grows(expanded: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Prediction builds units every batch it streams; copying a million-word T̂'s backend each time cost 1.4 CPU-s a
    batch. The copies are made once per tokenizer, and a token added to it later is seen."""
    from greenadapt.modeling import units

    pair = load_tokenizers(expanded)  # tokenizers no other test has used
    copies: list[object] = []
    monkeypatch.setattr(units, "plain_backend", lambda tok: copies.append(tok) or plain_backend(tok))
    sentences = [NerSentence(("Tachycardia", "was", "seen"), None, (1, 2, 3))]
    for _ in range(3):
        ner_units(sentences, None, pair, max_words=None, max_length=32)
        text_units([TextExample("tachycardia was seen", None, None, 1)], None, pair, max_length=32)
    assert len(copies) == 2 * len(pair.views)  # the word and the truncating backend of each view, once

    from greenadapt.modeling.gmap.wiring import attach_memory

    memory_tokenizer = load_tokenizers(expanded).general  # G-MAP's general model reads another tokenizer, every batch
    units_of_batch = ner_units(sentences, None, pair, max_words=None, max_length=32)[0]
    copies.clear()
    for _ in range(3):
        attach_memory(units_of_batch, sentences, memory_tokenizer, 32)
    assert copies == [memory_tokenizer]

    pair.general.add_tokens(["zzqx"])
    (ids,) = (u.ids[VIEW_GENERAL] for u in text_units([TextExample("zzqx", None, None, 1)], None, pair, max_length=32)[0])
    assert ids[1] == len(pair.general) - 1


def test_a_saved_tokenizers_backend_is_shared_and_never_changed(expanded: Path) -> None:
    """Inference reads its tokenizers from their files (SavedTokenizer) and uses each one's backend as it is, without
    the copy a transformers tokenizer needs (1.5 CPU-s for a million-word T̂); a truncating backend is a copy, and
    the units are those of transformers' tokenizers."""
    from greenadapt.modeling.units import shared_backend

    saved, fast = load_tokenizers(expanded, inference=True), load_tokenizers(expanded)
    sentences = [NerSentence(("Tachycardia", "was", "seen", "in", "myocarditis"), None, (1, 2, 3, 4, 5))]
    examples = [TextExample("tachycardia was seen " * 20, None, None, 1)]
    for tok in saved.views:
        assert shared_backend(tok, words=True) is tok.backend_tokenizer  # WordPiece words are read as running text
        assert shared_backend(tok, max_length=8) is not tok.backend_tokenizer
    for _ in range(2):
        got = ner_units(sentences, None, saved, max_words=None, max_length=32)[0] + text_units(examples, None, saved, max_length=16)[0]
        expected = ner_units(sentences, None, fast, max_words=None, max_length=32)[0] + text_units(examples, None, fast, max_length=16)[0]
        assert [[ids.tolist() for ids in u.ids] for u in got] == [[ids.tolist() for ids in u.ids] for u in expected]
        assert [[rows.tolist() for rows in u.rows] for u in got] == [[rows.tolist() for rows in u.rows] for u in expected]
    for tok in saved.views:
        assert tok.backend_tokenizer.truncation is None and tok.backend_tokenizer.padding is None
