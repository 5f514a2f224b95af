"""``expand``: the grown model folder, its two tokenizers, and the command."""

from __future__ import annotations

import json
import os
import shutil
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import HANG_S, build_tiny_bert
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from w2v_fixtures import DOMAIN_WORDS, linear_w2v, write_w2v_folder

from greenadapt.adaptation.align import align_stage
from greenadapt.adaptation.expand import expand_stage
from greenadapt.adaptation.vectors import read_counts, read_word2vec_binary
from greenadapt.adaptation.settings import NewRowsSettings
from greenadapt.artifacts.manifest import load_stage
from greenadapt.artifacts.workspace import corpus_key
from greenadapt.errors import EXIT_STAGE_CONFLICT, ModelError, StageError
from greenadapt.options import Run

REPO = Path(__file__).resolve().parent.parent
EMBEDDING = "bert.embeddings.word_embeddings.weight"
V = 161  # rows of the tiny model's embedding matrix (conftest.tiny_vocab)


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as reader:
        return {name: reader.get_tensor(name) for name in reader.keys()}


def _new_words(folder: Path) -> list[tuple[str, int, int]]:
    lines = (folder / "new_words.tsv").read_text(encoding="utf-8").splitlines()
    return [(w, int(i), int(c)) for w, i, c in (line.split("\t") for line in lines)]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("expand")
    w2v, _ = linear_w2v(root / "w2v", tiny_bert, noise=0.01)
    aligned = align_stage(w2v=w2v)
    expanded = expand_stage(align=aligned.path)
    return {"model": tiny_bert, "w2v": w2v, "align": aligned.path, "expand": expanded.path}


@pytest.fixture(scope="module")
def tokenizers(pipeline: dict[str, Path]) -> dict[str, Any]:
    from transformers import AutoTokenizer

    return {
        "lm": AutoTokenizer.from_pretrained(pipeline["model"]),
        "domain": AutoTokenizer.from_pretrained(pipeline["expand"]),
        "general": AutoTokenizer.from_pretrained(pipeline["expand"] / "general-tokenizer"),
    }


# --------------------------------------------------------------------------
# Weights


def test_original_rows_bit_identical_and_new_rows_are_W_v(pipeline: dict[str, Path]) -> None:
    before, after = _tensors(pipeline["model"]), _tensors(pipeline["expand"])
    assert set(before) == set(after)
    grown = after[EMBEDDING]
    assert grown.shape == (V + len(DOMAIN_WORDS), 32) and grown.dtype == before[EMBEDDING].dtype
    assert torch.equal(grown[:V], before[EMBEDDING])
    for name in set(before) - {EMBEDDING, "cls.predictions.bias"}:
        assert torch.equal(before[name], after[name]), name

    new = _new_words(pipeline["expand"])
    assert [i for _, i, _ in new] == list(range(V, V + len(new)))
    assert [(-c, w) for w, _, c in new] == sorted((-c, w) for w, _, c in new)  # documented order
    words, vectors = read_word2vec_binary(pipeline["w2v"] / "vectors.bin")
    W = np.load(pipeline["align"] / "map.npy", allow_pickle=False)
    expected = vectors[[words.index(w) for w, _, _ in new]].astype(np.float64) @ W.T
    np.testing.assert_allclose(grown[V:].numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["lstsq", "focus"])
def test_inside_adapt_the_vectors_are_parsed_once_and_the_model_is_the_same(
    pipeline: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """adapt keeps align's whole read for expand (keep_whole_reads): one parse of vectors.bin, identical weights."""
    import greenadapt.adaptation.vectors as vectors_module
    from greenadapt.adaptation.vectors import keep_whole_reads

    alone = expand_stage(align=align_stage(w2v=pipeline["w2v"], method=method, run=Run(out=tmp_path / "a1")).path,
                         run=Run(out=tmp_path / "e1"))
    parses: list[object] = []
    real = vectors_module.read_word2vec_binary
    monkeypatch.setattr(vectors_module, "read_word2vec_binary", lambda *a, **k: parses.append(k.get("rows")) or real(*a, **k))
    with keep_whole_reads():
        aligned = align_stage(w2v=pipeline["w2v"], method=method, run=Run(out=tmp_path / "a2"))
        together = expand_stage(align=aligned.path, run=Run(out=tmp_path / "e2"))
    assert parses == [None]  # align's whole read; expand took its rows from it
    weights = (alone.path / "model.safetensors").read_bytes()
    assert weights == (together.path / "model.safetensors").read_bytes()
    assert (alone.path / "new_words.tsv").read_bytes() == (together.path / "new_words.tsv").read_bytes()


def test_the_manifest_records_the_libraries_the_run_used(pipeline: dict[str, Path]) -> None:
    """A safetensors model grown by lstsq never loads torch or transformers: their versions say nothing of it."""
    libraries = load_stage(pipeline["expand"], "expand").section("libraries")
    assert {"numpy", "safetensors", "tokenizers"} <= set(libraries)
    assert not {"torch", "transformers"} & set(libraries)


def test_mlm_head_stays_tied_and_bias_is_extended_with_its_mean(pipeline: dict[str, Path]) -> None:
    from transformers import AutoModelForMaskedLM

    model, info = AutoModelForMaskedLM.from_pretrained(pipeline["expand"], output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    n = V + len(DOMAIN_WORDS)
    embeddings = model.get_input_embeddings().weight
    decoder = model.get_output_embeddings()
    assert decoder.weight.shape == (n, 32) and torch.equal(decoder.weight, embeddings)
    bias = _tensors(pipeline["model"])["cls.predictions.bias"]
    assert torch.equal(model.cls.predictions.bias[:V], bias)
    assert torch.all(model.cls.predictions.bias[V:] == bias.double().mean().float())
    logits = model(torch.tensor([[2, V, V + 1, 3]])).logits
    assert logits.shape == (1, 4, n)


def test_auto_classes_load_offline_and_sizes_agree(pipeline: dict[str, Path], tokenizers: dict[str, Any]) -> None:
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(pipeline["expand"])
    assert config.vocab_size == V + len(DOMAIN_WORDS) == len(tokenizers["domain"])
    model = AutoModel.from_pretrained(pipeline["expand"])
    assert model.get_input_embeddings().weight.shape[0] == config.vocab_size
    vocab_txt = (pipeline["expand"] / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(vocab_txt) == config.vocab_size
    assert all(tokenizers["domain"].convert_tokens_to_ids(t) == i for i, t in enumerate(vocab_txt))


def test_text_without_new_words_gives_identical_outputs(pipeline: dict[str, Path], tokenizers: dict[str, Any]) -> None:
    from transformers import AutoModel

    text = "the patients with heart disease were treated for infection."
    original = AutoModel.from_pretrained(pipeline["model"]).eval()
    expanded = AutoModel.from_pretrained(pipeline["expand"]).eval()
    ids_lm = tokenizers["lm"](text, return_tensors="pt")
    ids_domain = tokenizers["domain"](text, return_tensors="pt")
    assert torch.equal(ids_lm["input_ids"], ids_domain["input_ids"])
    with torch.no_grad():
        a = original(**ids_lm).last_hidden_state
        b = expanded(**ids_domain).last_hidden_state
    torch.testing.assert_close(a, b, rtol=0, atol=0)


# --------------------------------------------------------------------------
# Tokenizers

TEXT_PIECES = st.one_of(
    st.sampled_from(DOMAIN_WORDS),
    st.sampled_from(DOMAIN_WORDS).map(str.upper),
    st.sampled_from(DOMAIN_WORDS).flatmap(lambda w: st.text(string.ascii_lowercase, min_size=1, max_size=4).map(w.__add__)),
    st.sampled_from("the of heart sleep tachy card ##ia cells tumor".split()),
    st.text(string.ascii_letters + string.digits + string.punctuation + "éü ", min_size=1, max_size=15),
)
TEXTS = st.lists(TEXT_PIECES, min_size=1, max_size=12).map(" ".join)


def test_general_tokenizer_files_are_the_originals(pipeline: dict[str, Path]) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (pipeline["expand"] / "general-tokenizer" / name).read_bytes() == (pipeline["model"] / name).read_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.one_of(TEXTS, st.text(max_size=60)))
def test_general_tokenizer_tokenizes_like_the_original(tokenizers: dict[str, Any], text: str) -> None:
    assert tokenizers["general"](text)["input_ids"] == tokenizers["lm"](text)["input_ids"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS)
def test_domain_tokenizer_keeps_new_words_whole_and_changes_nothing_else(tokenizers: dict[str, Any], text: str) -> None:
    lm, domain = tokenizers["lm"], tokenizers["domain"]
    backend = lm.backend_tokenizer
    words = [w for w, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(text))]
    new = set(DOMAIN_WORDS)
    for word in words:
        pieces = domain.tokenize(word)
        if word in new:
            assert pieces == [word]
            assert domain.convert_tokens_to_ids(word) >= V
        elif not any(word.startswith(n) for n in new):
            assert pieces == lm.tokenize(word)
            assert all(i < V for i in domain.convert_tokens_to_ids(pieces))
    if not any(w.startswith(n) for w in words for n in new):
        assert domain(text)["input_ids"] == lm(text)["input_ids"]


def test_prefix_case_follows_the_reference_code(tokenizers: dict[str, Any]) -> None:
    lm, domain = tokenizers["lm"], tokenizers["domain"]
    assert lm.tokenize("tachycardias") == ["ta", "##chy", "##card", "##ias"]
    assert domain.tokenize("tachycardias") == ["tachycardia", "##s"]
    assert domain.tokenize("Tachycardia") == ["tachycardia"]  # normalized like T_LM first
    assert domain.tokenize("sleep") == lm.tokenize("sleep")  # no match inside words, unlike add_tokens


# --------------------------------------------------------------------------
# Choosing new words


@pytest.fixture(scope="module")
def general_tokenizer(tiny_bert: Path) -> Any:
    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer

    return load_general_tokenizer(tiny_bert)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(
        st.one_of(
            st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=8),
            st.text(string.ascii_letters + string.digits + "#-éß中 \u00a0", min_size=1, max_size=8),
        ),
        max_size=40,
    )
)
def test_reachable_words_fast_path_agrees_with_the_full_check(general_tokenizer: Any, words: list[str]) -> None:
    from greenadapt.adaptation.domain_tokenizer import reachable_words

    backend = general_tokenizer.backend

    def full(word: str) -> bool:
        pieces = backend.pre_tokenizer.pre_tokenize_str(word)
        return (
            not word.startswith("##")
            and backend.normalizer.normalize_str(word) == word
            and len(pieces) == 1
            and pieces[0][0] == word
        )

    assert reachable_words(general_tokenizer, words) == [full(w) for w in words]



def _custom_w2v(root: Path, model: Path, extra: dict[str, int]) -> Path:
    """The linear w2v of ``model`` plus ``extra`` words (word -> count) with random vectors."""
    words, vectors = read_word2vec_binary(linear_w2v(root / "base", model)[0] / "vectors.bin")
    counts = read_counts(root / "base" / "counts.tsv")
    rng = np.random.default_rng(7)
    words += list(extra)
    vectors = np.vstack([vectors, rng.standard_normal((len(extra), vectors.shape[1])).astype(np.float32)])
    return write_w2v_folder(root / "w2v", model, words, vectors, [counts.get(w, extra.get(w, 0)) for w in words])


def test_max_new_and_min_count_order_and_exclusions(tiny_bert: Path, tmp_path: Path) -> None:
    extra = {
        "zeta": 3,
        "alpha": 3,
        "omega": 9,
        "Covid": 50,  # the uncased normalizer changes it: T̂ could never produce it
        "covid-19": 50,  # punctuation splits it
        "##xyz": 50,  # would become a continuation piece
        "x" * 101: 50,  # longer than max_input_chars_per_word
        "rare": 1,
    }
    w2v = _custom_w2v(tmp_path, tiny_bert, extra)
    aligned = align_stage(w2v=w2v)
    all_new = expand_stage(align=aligned.path, min_count=1, run=Run(out=tmp_path / "all"))  # the paper's setting: every word
    stats = all_new.manifest["stats"]
    assert stats["excluded"] == {"below_min_count": 0, "too_long": 1, "unreachable": 3}
    names = [w for w, _, _ in _new_words(all_new.path)]
    # Counts 100, 99, … 91 for the domain words, then 9, 3, 3 (a tie, broken by the word) and 1.
    assert names == DOMAIN_WORDS + ["omega", "alpha", "zeta", "rare"]

    capped = expand_stage(align=aligned.path, rows=NewRowsSettings(max_new=4), min_count=3, run=Run(out=tmp_path / "capped"))
    assert [w for w, _, _ in _new_words(capped.path)] == names[:4]
    assert capped.manifest["stats"]["n_new"] == 4
    assert _tensors(capped.path)[EMBEDDING].shape[0] == V + 4
    only_frequent = expand_stage(align=aligned.path, min_count=4, run=Run(out=tmp_path / "frequent"))
    kept = [w for w, _, c in _new_words(only_frequent.path)]
    assert "alpha" not in kept and "rare" not in kept and "omega" in kept
    assert only_frequent.manifest["stats"]["excluded"]["below_min_count"] == 3

    # The default keeps words seen at least 20 times (issue 38's verdict), and the card says how to get the paper's choice.
    default = expand_stage(align=aligned.path, run=Run(out=tmp_path / "default"))
    assert [w for w, _, _ in _new_words(default.path)] == DOMAIN_WORDS
    assert default.manifest["stats"]["excluded"]["below_min_count"] == 4
    assert default.manifest["stats"]["selection"] == {"min_count": 20, "max_new": None}
    card = (default.path / "README.md").read_text(encoding="utf-8")
    assert "seen at least 20 times (4 rarer left out)" in card and "`expand --min-count-new 1`" in card


def test_random_ablation_is_seeded(pipeline: dict[str, Path], tmp_path: Path) -> None:
    aligned = align_stage(w2v=pipeline["w2v"], method="random", run=Run(out=tmp_path / "align"))
    a = expand_stage(align=aligned.path, seed=1, run=Run(out=tmp_path / "a"))
    b = expand_stage(align=aligned.path, seed=1, run=Run(out=tmp_path / "b"))
    c = expand_stage(align=aligned.path, seed=2, run=Run(out=tmp_path / "c"))
    assert (a.path / "model.safetensors").read_bytes() == (b.path / "model.safetensors").read_bytes()
    ta, tc = _tensors(a.path)[EMBEDDING], _tensors(c.path)[EMBEDDING]
    assert torch.equal(ta[:V], tc[:V]) and not torch.equal(ta[V:], tc[V:])
    mean = np.load(aligned.path / "gaussian_mean.npy")
    assert np.abs(ta[V:].double().mean(0).numpy() - mean).max() < 1.0  # draws centre on the embedding mean


# --------------------------------------------------------------------------
# Other heads, layouts and files


def test_qa_head_is_preserved(tmp_path: Path) -> None:
    from transformers import AutoModelForQuestionAnswering

    model = build_tiny_bert(tmp_path / "qa", head="qa")
    aligned = align_stage(w2v=linear_w2v(tmp_path / "w2v", model)[0])
    expanded = expand_stage(align=aligned.path)
    qa, info = AutoModelForQuestionAnswering.from_pretrained(expanded.path, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    before = _tensors(model)
    assert torch.equal(qa.qa_outputs.weight, before["qa_outputs.weight"])
    assert expanded.manifest["stats"]["extended_biases"] == []


def test_bin_checkpoint_with_separately_stored_decoder(tmp_path: Path) -> None:
    from transformers import AutoModelForMaskedLM

    folder = build_tiny_bert(tmp_path / "bin", head="mlm")
    state = {k: v.clone() for k, v in AutoModelForMaskedLM.from_pretrained(folder).state_dict().items()}
    assert "cls.predictions.decoder.weight" in state
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    aligned = align_stage(w2v=linear_w2v(tmp_path / "w2v", folder)[0])
    assert "torch" in aligned.manifest["libraries"] and "transformers" not in aligned.manifest["libraries"]
    expanded = expand_stage(align=aligned.path)
    after = _tensors(expanded.path)
    assert "cls.predictions.decoder.weight" in expanded.manifest["stats"]["extended_tensors"]
    assert torch.equal(after["cls.predictions.decoder.weight"], after[EMBEDDING])
    assert torch.equal(after["cls.predictions.decoder.bias"], after["cls.predictions.bias"])
    assert not (expanded.path / "pytorch_model.bin").exists()
    assert "torch" in expanded.manifest["libraries"]  # it read the pickled checkpoint
    model, info = AutoModelForMaskedLM.from_pretrained(expanded.path, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]


def test_embedding_rows_beyond_the_tokenizer(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    folder = build_tiny_bert(tmp_path / "padded", head="base")
    state = load_file(folder / "model.safetensors")
    key = "embeddings.word_embeddings.weight"
    state[key] = torch.cat([state[key], torch.zeros(7, state[key].shape[1])])
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": V + 7}))
    aligned = align_stage(w2v=linear_w2v(tmp_path / "w2v", folder)[0])
    expanded = expand_stage(align=aligned.path)
    assert expanded.manifest["stats"]["first_new_id"] == V + 7
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(expanded.path)
    assert tokenizer.convert_tokens_to_ids("tachycardia") == V + 7
    vocab_txt = (expanded.path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab_txt.index("tachycardia") == V + 7


def _sentence_transformers_folder(folder: Path) -> Path:
    build_tiny_bert(folder, head="base")
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64, "do_lower_case": False}))
    (folder / "README.md").write_text("---\nlibrary_name: sentence-transformers\n---\n# the base model's own card\n")
    return folder


def test_other_files_are_copied_but_stale_exports_and_the_base_card_are_not(tmp_path: Path) -> None:
    folder = _sentence_transformers_folder(tmp_path / "st")
    (folder / "generation_config.json").write_text("{}")
    (folder / "onnx").mkdir()
    (folder / "onnx" / "model.onnx").write_bytes(b"old")
    (folder / "flax_model.msgpack").write_bytes(b"old")
    aligned = align_stage(w2v=linear_w2v(tmp_path / "w2v", folder)[0])
    out = expand_stage(align=aligned.path).path
    assert (out / "generation_config.json").read_text() == "{}"
    assert not (out / "onnx").exists() and not (out / "flax_model.msgpack").exists()
    # sentence-transformers would tokenize with the domain tokenizer alone: its files stay behind
    assert not (out / "1_Pooling").exists() and not (out / "modules.json").exists() and not (out / "sentence_bert_config.json").exists()
    card = (out / "README.md").read_text()
    assert "the base model's own card" not in card and "library_name: transformers" in card


def test_the_folder_describes_itself_in_config_and_model_card(tmp_path: Path) -> None:
    from transformers import AutoConfig

    folder = _sentence_transformers_folder(tmp_path / "st")
    aligned = align_stage(w2v=linear_w2v(tmp_path / "w2v", folder)[0])
    expanded = expand_stage(align=aligned.path)
    stats = expanded.manifest["stats"]
    block = AutoConfig.from_pretrained(str(expanded.path)).greenadapt  # plain transformers keeps it
    assert block["method"] == "lstsq" and block["pooling"] == "mean" and block["general_tokenizer"] == "general-tokenizer"
    assert block["new_rows"] == {"first": stats["first_new_id"], "count": stats["n_new"]}
    assert isinstance(block["corpus"], list) and set(block["vectors_cost"]) == {"wall_seconds", "cpu_hours", "gpu_seconds", "energy_kwh"}
    # ...and a card written for a model fine-tuned from it says what it starts from.
    from greenadapt.artifacts.model_card import finetuned_card

    tuned = finetuned_card(base_model="m", base_model_hub_id=None, task="ner", pipeline_tag="token-classification", labels=["O", "B-X"],
                           metric="f1", summary={}, seeds=[1], mix=0.5,
                           pool="mean", two_tokenizers=True, general_tokenizer="general-tokenizer", adaptation=block)
    assert "## Adaptation" in tuned and f"{stats['n_new']} new words" in tuned and "`lstsq`" in tuned
    assert 'greenadapt.pipeline("token-classification"' in tuned
    card = (expanded.path / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers")  # a local base model: no base_model the Hub would reject
    assert f"{stats['vocab_size_before']:,} → {stats['vocab_size_after']:,}" in card
    assert f"{aligned.manifest['stats']['heldout_cosine']:.3f}" in card
    assert "general-tokenizer" in card and "Not a sentence-transformers model" in card


def test_sentence_transformers_does_not_silently_load_the_expanded_folder(tmp_path: Path) -> None:
    """The base folder is a sentence-transformers model; the expanded one must not pass for one."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    folder = _sentence_transformers_folder(tmp_path / "st")
    assert sentence_transformers.SentenceTransformer(str(folder), device="cpu") is not None  # the base loads as one
    aligned = align_stage(w2v=linear_w2v(tmp_path / "w2v", folder)[0])
    out = expand_stage(align=aligned.path).path
    assert not (out / "modules.json").exists()
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("sentence_transformers")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        sentence_transformers.SentenceTransformer(str(out), device="cpu")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    # Without modules.json it builds a fresh model and says so (at INFO level in sentence-transformers 6),
    # rather than reusing the base's pipeline as if nothing had changed.
    assert any("modules.json" in r.getMessage() or "No sentence-transformers model found" in r.getMessage() for r in records)


# --------------------------------------------------------------------------
# Errors and lookups


def test_non_wordpiece_model_is_a_clear_error(tiny_bert: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer

    folder = tmp_path / "bpe"
    shutil.copytree(tiny_bert, folder)
    bpe = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "ab": 2, "[UNK]": 3}, merges=[("a", "b")], unk_token="[UNK]"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    bpe.save(str(folder / "tokenizer.json"))
    with pytest.raises(ModelError, match="WordPiece") as info:
        load_general_tokenizer(folder)
    assert "BPE" in info.value.message
    w2v, _ = linear_w2v(tmp_path / "w2v", tiny_bert)
    with pytest.raises(ModelError, match="WordPiece"):
        align_stage(w2v=w2v, model=str(folder))


def test_wrong_kind_and_changed_inputs(pipeline: dict[str, Path], tmp_path: Path, tiny_bert: Path) -> None:
    with pytest.raises(StageError, match="'w2v' folder"):
        expand_stage(align=pipeline["w2v"], run=Run(out=tmp_path / "x"))
    w2v = shutil.copytree(pipeline["w2v"], tmp_path / "w2v")
    aligned = align_stage(w2v=w2v)
    linear_w2v(w2v, tiny_bert, seed=9)  # w2v redone after align
    with pytest.raises(StageError, match="changed after align"):
        expand_stage(align=aligned.path)


def test_vectors_and_counts_listing_different_words(tiny_bert: Path, tmp_path: Path) -> None:
    from greenadapt.adaptation.vectors import write_counts, write_word2vec_binary
    from greenadapt.artifacts.stage import StageRun

    good = linear_w2v(tmp_path / "good", tiny_bert)[0]
    words, vectors = read_word2vec_binary(good / "vectors.bin")
    counts = read_counts(good / "counts.tsv")
    manifest = load_stage(good, "w2v")
    with StageRun("w2v", tmp_path / "bad", manifest["config"], [], force=True) as run:
        write_word2vec_binary(run.tmp / "vectors.bin", words, vectors)
        write_counts(run.tmp / "counts.tsv", list(reversed(counts.items())))
        run.commit()
    aligned = align_stage(w2v=tmp_path / "bad")
    with pytest.raises(StageError, match="list different words"):
        expand_stage(align=aligned.path)


def test_model_with_another_vocabulary_is_refused(pipeline: dict[str, Path], tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(pipeline["model"], other)
    spec = json.loads((other / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab["zzz"] = vocab.pop("##s")
    (other / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ModelError, match="vocabulary"):
        expand_stage(align=pipeline["align"], model=str(other), run=Run(out=tmp_path / "x"))


def test_finds_align_by_corpus_and_skips_when_unchanged(tiny_bert: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    w2v = linear_w2v(workdir / corpus_key(["mycorpus"]) / "tiny" / "w2v", tiny_bert)[0]
    align_stage(w2v=w2v)
    first = expand_stage(corpus=["mycorpus"], run=Run(workdir=workdir))
    assert first.path == w2v.parent / "expand" and not first.skipped
    again = expand_stage(corpus=["mycorpus"], run=Run(workdir=workdir))
    assert again.skipped
    manifest = load_stage(first.path, "expand")
    assert manifest["config"]["model"]["path"] == str(tiny_bert)
    assert manifest["config"]["align"]["stage"] == "align"


def test_cli_summary_and_error_exit_code(pipeline: dict[str, Path], tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "greenadapt", "expand", "--align", str(pipeline["align"])]
    done = subprocess.run([*command, "--out", str(tmp_path / "e"), "--max-new", "3", "-q"], capture_output=True, text=True,
                          env=env, timeout=HANG_S)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("expand done: 3 new rows (vocabulary 161 -> 164)") and str(tmp_path / "e") in done.stdout
    wrong = subprocess.run(
        [sys.executable, "-m", "greenadapt", "expand", "--align", str(pipeline["w2v"]), "--out", str(tmp_path / "f")],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
    )
    assert wrong.returncode == EXIT_STAGE_CONFLICT
    assert wrong.stderr.startswith("error:") and "Traceback" not in wrong.stderr


# --------------------------------------------------------------------------
# The real model


@pytest.mark.integration
def test_minilm_expand_end_to_end(minilm_path: Path, tmp_path: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    domain = ["tachycardias", "cardiomyopathy", "immunohistochemistry", "sarscov", "thrombocytopenia"]
    w2v, _ = linear_w2v(tmp_path / "w2v", minilm_path, dim=384, noise=0.05, new_words=domain)
    aligned = align_stage(w2v=w2v, probes=["surgeon"])
    assert aligned.manifest["stats"]["heldout_cosine"] > 0.95
    expanded = expand_stage(align=aligned.path)
    n = 30522 + len(domain)
    assert expanded.manifest["stats"]["vocab_size_after"] == n
    tokenizer = AutoTokenizer.from_pretrained(expanded.path)
    assert tokenizer.tokenize("Cardiomyopathy") == ["cardiomyopathy"]
    model = AutoModel.from_pretrained(expanded.path).eval()
    base = AutoModel.from_pretrained(minilm_path).eval()
    assert torch.equal(model.get_input_embeddings().weight[:30522], base.get_input_embeddings().weight)
    text = "The surgeon reviewed the scan."
    general = AutoTokenizer.from_pretrained(expanded.path / "general-tokenizer")
    with torch.no_grad():
        a = base(**general(text, return_tensors="pt")).last_hidden_state
        b = model(**tokenizer(text, return_tensors="pt")).last_hidden_state
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    # the sentence-transformers modules stay behind; the folder's own card replaces MiniLM's
    assert not (expanded.path / "1_Pooling").exists() and not (expanded.path / "modules.json").exists()
    assert "vocabulary-expanded with greenadapt" in (expanded.path / "README.md").read_text()


@pytest.mark.integration
def test_domain_tokenizer_on_real_biomedical_text(minilm_path: Path, shared_data: Path, tmp_path: Path) -> None:
    import gzip
    from collections import Counter

    from transformers import AutoTokenizer

    corpus = shared_data / "corpora" / "biomed-10m.txt.gz"
    if not corpus.is_file():
        pytest.skip(f"{corpus} is absent")
    lm = AutoTokenizer.from_pretrained(minilm_path)
    backend = lm.backend_tokenizer
    with gzip.open(corpus, "rt", encoding="utf-8") as handle:
        lines = [line for _, line in zip(range(5000), handle)]
    counts: Counter[str] = Counter()
    for line in lines:
        counts.update(w for w, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(line)))
    vocab = lm.get_vocab()
    new = [w for w, c in counts.most_common() if w not in vocab and c >= 2][:2000]
    w2v, _ = linear_w2v(tmp_path / "w2v", minilm_path, dim=384, new_words=new, new_counts=[counts[w] for w in new])
    expanded = expand_stage(align=align_stage(w2v=w2v).path, min_count=2)  # every word of the sample, down to its own floor
    domain = AutoTokenizer.from_pretrained(expanded.path)
    new_set = set(new)
    assert expanded.manifest["stats"]["n_new"] == len(new)
    changed = 0
    for line in lines[:1000]:
        for word, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(line)):
            pieces = domain.tokenize(word)
            if word in new_set:
                assert pieces == [word]
                changed += 1
            elif not any(word.startswith(n) for n in new_set if len(n) < len(word)):
                assert pieces == lm.tokenize(word)
    assert changed > 0


def test_expand_records_and_shows_what_the_domain_tokenizer_changed(pipeline: dict[str, Path], tokenizers: dict[str, Any]) -> None:
    """The method at work at any corpus size: how many wordpieces T_LM split the new words into, each now one T̂ token."""
    from greenadapt.artifacts.manifest import load_stage
    from greenadapt.cli.expand import _summary

    manifest = load_stage(pipeline["expand"], "expand")
    change = manifest["stats"]["tokenization"]
    new_words = [line.split("\t")[0] for line in (pipeline["expand"] / "new_words.tsv").read_text(encoding="utf-8").splitlines()]
    measured = new_words[: change["words_measured"]]
    assert change["words_measured"] == min(len(new_words), 10_000) > 0
    pieces = [tokenizers["lm"].tokenize(word) for word in measured]  # the base model's own tokenizer, through transformers
    assert change["general_pieces_mean"] == pytest.approx(sum(map(len, pieces)) / len(pieces), abs=1e-3)
    assert [e["word"] for e in change["examples"]] == measured[:5]
    assert [e["general"] for e in change["examples"]] == pieces[:5]
    assert all(tokenizers["domain"].tokenize(e["word"]) == [e["word"]] for e in change["examples"])
    # A tokenizer.json that pads and truncates (MiniLM's pads to 128) changes nothing: words are split, not padded.
    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer, tokenization_change

    general = load_general_tokenizer(pipeline["model"])
    general.backend.enable_padding(length=64)
    general.backend.enable_truncation(max_length=2)
    assert tokenization_change(general, measured) == change

    class Outcome:
        path, skipped = pipeline["expand"], True

    Outcome.manifest = manifest  # type: ignore[attr-defined]
    line = _summary(Outcome).splitlines()[-1]
    assert line.startswith("what changed:") and f"{change['general_pieces_mean']:.2f} wordpieces" in line
    assert f"{change['examples'][0]['word']}: {' '.join(change['examples'][0]['general'])}" in line
