"""pretrain data: BERT masking statistics, whole-word masking, packing, held-out split, the token cache."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from greenadapt.errors import CorpusError
from greenadapt.runners.pretrain.data import (
    IGNORE,
    Masker,
    MixedCorpus,
    PackedCorpus,
    epoch_order,
    heldout_count,
    masked_batch,
    sequence_rng,
    token_dtype,
)

VOCAB = 200
SPECIAL_IDS = (0, 1, 2, 3, 4)  # pad, unk, cls, sep, mask
MASK_ID = 4
CONTINUATION_IDS = np.arange(150, 200)  # "##" pieces


def _masker(*, whole_word: bool = False, probability: float = 0.15) -> Masker:
    special = np.zeros(VOCAB, dtype=bool)
    special[list(SPECIAL_IDS)] = True
    continuation = np.zeros(VOCAB, dtype=bool)
    continuation[CONTINUATION_IDS] = True
    return Masker(MASK_ID, special, continuation, np.flatnonzero(~special), probability, whole_word)


def _sequence(rng: np.random.Generator, length: int = 126) -> np.ndarray:
    body = rng.integers(5, VOCAB, size=length)
    body[rng.random(length) < 0.05] = 1  # some [UNK]
    return np.concatenate([[2], body, [3], [0, 0, 0]])  # [CLS] body [SEP] padding


def test_masking_statistics_80_10_10_and_specials_untouched() -> None:
    masker = _masker()
    data_rng = np.random.default_rng(0)
    chosen = masked = randomised = kept = 0
    for index in range(400):
        ids = _sequence(data_rng)
        inputs, labels = masker.mask(ids, sequence_rng(1, 0, index))
        special = np.isin(ids, SPECIAL_IDS)
        targets = labels != IGNORE
        assert not (targets & special).any()  # specials and padding are never targets
        assert np.array_equal(inputs[special], ids[special])  # ... and never changed
        assert np.array_equal(inputs[~targets], ids[~targets])  # only targets change
        assert np.array_equal(labels[targets], ids[targets])
        assert targets.sum() == round(0.15 * (~special).sum())
        chosen += targets.sum()
        masked += (inputs[targets] == MASK_ID).sum()
        changed = targets & (inputs != ids) & (inputs != MASK_ID)
        assert not np.isin(inputs[changed], SPECIAL_IDS).any()  # random replacements are never special
        randomised += changed.sum()
        kept += (targets & (inputs == ids)).sum()
    # ~7,000 targets: binomial standard deviations of about 0.5% and 0.36%
    assert abs(masked / chosen - 0.8) < 0.025
    # a random replacement equal to the original token counts as "kept" (probability 1/195)
    assert abs(randomised / chosen - 0.1) < 0.02
    assert abs(kept / chosen - 0.1) < 0.02


def test_masking_is_deterministic_per_sequence_and_seed() -> None:
    masker = _masker()
    ids = _sequence(np.random.default_rng(3))
    a = masker.mask(ids, sequence_rng(5, 2, 17))
    b = masker.mask(ids, sequence_rng(5, 2, 17))
    c = masker.mask(ids, sequence_rng(6, 2, 17))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[1], c[1])


def test_whole_word_masking_takes_all_pieces_of_a_word() -> None:
    masker = _masker(whole_word=True)
    data_rng = np.random.default_rng(1)
    total_targets = total_candidates = 0
    for index in range(80):
        ids = _sequence(data_rng)
        _, labels = masker.mask(ids, sequence_rng(0, 0, index))
        targets = labels != IGNORE
        candidates = ~np.isin(ids, SPECIAL_IDS)
        # words: a candidate that is not a continuation piece, or follows a non-candidate, starts one
        word = -1
        words = np.full(len(ids), -1)
        for position in range(len(ids)):
            if not candidates[position]:
                continue
            if not np.isin(ids[position], CONTINUATION_IDS) or not candidates[position - 1]:
                word += 1
            words[position] = word
        for w in range(word + 1):
            in_word = targets[words == w]
            assert in_word.all() or not in_word.any(), f"word {w} partly masked"
        assert targets.sum() <= max(round(0.15 * candidates.sum()), (words == words[targets][0]).sum())
        total_targets += targets.sum()
        total_candidates += candidates.sum()
    assert 0.12 < total_targets / total_candidates < 0.155  # per-sequence rounding of the 15% budget


def test_packing_covers_the_stream_in_order() -> None:
    tokens = np.arange(10, 10 + 95).astype(np.uint16)
    corpus = PackedCorpus.build(tokens, max_length=12, cls_id=2, sep_id=3, heldout=4)
    assert len(corpus) == 10  # ceil(95 / 10)
    sequences = [corpus.sequence(i) for i in range(len(corpus))]
    assert all(s[0] == 2 and s[-1] == 3 and len(s) <= 12 for s in sequences)
    assert [len(s) for s in sequences] == [corpus.sequence_length(i) for i in range(len(corpus))]
    assert np.array_equal(np.concatenate([s[1:-1] for s in sequences]), tokens)
    assert corpus.n_heldout == 1  # at most a tenth
    assert list(corpus.heldout_indices) == [0] and list(corpus.train_indices) == list(range(1, 10))


def test_heldout_rules() -> None:
    assert heldout_count(5000, 256) == 256
    assert heldout_count(100, 256) == 10
    assert heldout_count(3, 256) == 1
    with pytest.raises(CorpusError, match="at least 2"):
        heldout_count(1, 256)


def test_epoch_order_is_a_permutation_that_changes_per_epoch() -> None:
    indices = np.arange(5, 105)
    a, b = epoch_order(indices, 1, 0), epoch_order(indices, 1, 1)
    assert sorted(a) == list(indices) and sorted(b) == list(indices)
    assert not np.array_equal(a, b)
    assert np.array_equal(a, epoch_order(indices, 1, 0))


def test_masked_batch_pads_and_labels() -> None:
    tokens = np.arange(10, 10 + 25)
    corpus = PackedCorpus.build(tokens, max_length=12, cls_id=2, sep_id=3, heldout=1)
    batch = masked_batch(corpus, [1, 2], _masker(), seed=0, epoch=0, pad_id=0)  # 10 + 5 body tokens
    assert batch.input_ids.shape == (2, 12)
    assert batch.attention_mask.sum(axis=1).tolist() == [12, 7]
    assert (batch.labels[1, 7:] == IGNORE).all() and (batch.input_ids[1, 7:] == 0).all()
    assert batch.n_targets == round(0.15 * 10) + round(0.15 * 5)


def test_token_dtype() -> None:
    assert token_dtype(30522) == "uint16" and token_dtype(65536) == "uint16" and token_dtype(65537) == "int32"


def test_token_cache_matches_the_tokenizer_and_is_reused(tiny_bert: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from greenadapt.corpus import resolve_corpus
    from greenadapt.runners.pretrain.data import tokenize_corpus

    lines = ["The patients were treated, with Insulin!", "tachycardia of the heart", "", "cells"]
    text = tmp_path / "c.txt"
    text.write_text("\n".join(lines) + "\n")
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert))
    sources = resolve_corpus([str(text)])
    cache = tokenize_corpus(sources, tokenizer, tmp_path / "cache", workers=1)
    expected = [i for line in lines for i in tokenizer(line, add_special_tokens=False)["input_ids"]]
    assert cache.array().tolist() == expected and not cache.cached
    again = tokenize_corpus(sources, tokenizer, tmp_path / "cache", workers=1)
    assert again.cached and again.array().tolist() == expected


def test_mixed_corpus_draws_each_view_at_its_share_and_never_trains_on_heldout_text() -> None:
    # The same "text" packed by two tokenizers: the general one needs twice the ids (offset 1000 marks its ids).
    domain = PackedCorpus.build(np.arange(10, 10 + 5000).astype(np.uint32), max_length=12, cls_id=2, sep_id=3, heldout=40)
    general = PackedCorpus.build(np.arange(1000, 1000 + 10000).astype(np.uint32), max_length=12, cls_id=2, sep_id=3, heldout=40)
    mixed = MixedCorpus(domain, general, share=0.5, seed=7)
    assert len(mixed) == len(domain) and mixed.n_heldout == domain.n_heldout == 40
    # the general view holds out the same share of the text: twice the sequences
    assert general.n_heldout == 80
    # held-out sequences are the domain view's, unchanged
    for i in mixed.heldout_indices:
        assert np.array_equal(mixed.sequence(int(i)), domain.sequence(int(i)))
    train = [int(i) for i in mixed.train_indices]
    from_domain = np.array([mixed.from_domain(i) for i in train])
    assert 0.45 < from_domain.mean() < 0.55
    general_seen = [mixed.sequence(i) for i in train if not mixed.from_domain(i)]
    assert all(s[1] >= 1000 for s in general_seen)  # really the general packing
    # no training sequence of the general view lies in its held-out text (ids below 1000 + 80 * 10)
    assert min(int(s[1:-1].min()) for s in general_seen) >= 1000 + 80 * 10
    assert [len(mixed.sequence(i)) for i in train[:50]] == [mixed.sequence_length(i) for i in train[:50]]
    # the draw is fixed by the seed, and 0 and 1 are the pure views
    again = MixedCorpus(domain, general, share=0.5, seed=7)
    assert all(again.from_domain(i) == mixed.from_domain(i) for i in train)
    other = MixedCorpus(domain, general, share=0.5, seed=8)
    assert any(other.from_domain(i) != mixed.from_domain(i) for i in train)
    assert all(MixedCorpus(domain, general, share=1.0, seed=7).from_domain(i) for i in train)
    assert not any(MixedCorpus(domain, general, share=0.0, seed=7).from_domain(i) for i in train)
