"""Any encoder family: byte-level BPE (RoBERTa, ModernBERT) and Unigram (DeBERTa-v3) adapt as WordPiece does.

Tiny models of each family, with tokenizers trained here on general text (tests/family_models.py), go
through the real ``adapt``; T̂'s invariants are checked per family, against T_LM, with the tokenizers
library and with plain transformers; then fine-tuning, prediction and the pipeline run on each.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from family_models import (
    DOMAIN_WORDS,
    FAMILIES,
    GENERAL_WORDS,
    assert_loads_without_parsing_its_vocabulary_in_python,
    build_family_model,
    domain_text,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import greenadapt
from greenadapt.errors import ModelError


@pytest.fixture(scope="module", params=FAMILIES)
def adapted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from tokenizers import Tokenizer

    root = tmp_path_factory.mktemp(request.param)
    model = build_family_model(request.param, root / "model")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(domain_text()) + "\n", encoding="utf-8")
    outcome = greenadapt.adapt(corpus=str(corpus), model=str(model), workdir=root / "work", epochs=2, min_count=5)
    expand = Path(outcome.path)
    new_words = [line.split("\t") for line in (expand / "new_words.tsv").read_text(encoding="utf-8").splitlines()]
    return {
        "family": request.param, "model": model, "expand": expand, "root": root,
        "new": {word: int(token_id) for word, token_id, _ in new_words},
        "lm": Tokenizer.from_file(str(model / "tokenizer.json")),
        "domain": Tokenizer.from_file(str(expand / "tokenizer.json")),
    }


def _pieces(tokenizer: Any, text: str) -> list[str]:
    normalized = tokenizer.normalizer.normalize_str(text) if tokenizer.normalizer is not None else text
    return [piece for piece, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized)]


def _new_tokens(adapted: dict[str, Any]) -> set[str]:
    return {adapted["domain"].id_to_token(i) for i in adapted["new"].values()}


def test_every_domain_word_is_new_and_one_token_in_running_text(adapted: dict[str, Any]) -> None:
    from transformers import AutoTokenizer

    assert set(DOMAIN_WORDS) <= set(adapted["new"])
    plain = AutoTokenizer.from_pretrained(adapted["expand"])  # plain transformers, as a user loads the folder
    for word, token_id in adapted["new"].items():
        text = f"the {word} was high"
        assert token_id in adapted["domain"].encode(text, add_special_tokens=False).ids, (word, adapted["domain"].encode(text).tokens)
        assert token_id in plain(text, add_special_tokens=False)["input_ids"], word
        assert len(adapted["lm"].encode(f" {word}", add_special_tokens=False).ids) > 1  # T_LM itself splits it


def test_old_rows_and_every_other_tensor_are_bit_identical(adapted: dict[str, Any]) -> None:
    from safetensors.numpy import load_file

    before = load_file(str(adapted["model"] / "model.safetensors"))
    after = load_file(str(adapted["expand"] / "model.safetensors"))
    n_new = len(adapted["new"])
    assert set(before) <= set(after)
    grown = 0
    for name, tensor in before.items():
        if after[name].shape == tensor.shape:
            assert np.array_equal(after[name], tensor), name
        else:
            grown += 1
            assert after[name].shape[0] == tensor.shape[0] + n_new, name
            assert np.array_equal(after[name][: tensor.shape[0]], tensor), name
    assert grown >= 1


def test_old_ids_keep_their_tokens(adapted: dict[str, Any]) -> None:
    lm, domain = adapted["lm"], adapted["domain"]
    for token, token_id in lm.get_vocab().items():
        assert domain.token_to_id(token) == token_id


_TEXT = st.lists(
    st.one_of(st.sampled_from(GENERAL_WORDS + list(DOMAIN_WORDS)), st.text(alphabet="abcdeilmnorsty.,-'é 0123", min_size=1, max_size=12)),
    min_size=1, max_size=12,
).map(" ".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXT)
def test_text_is_tokenized_as_by_the_general_tokenizer_except_where_a_piece_starts_with_a_new_word(adapted: dict[str, Any],
                                                                                                    text: str) -> None:
    lm, domain = adapted["lm"], adapted["domain"]
    new = _new_tokens(adapted)
    pieces = _pieces(lm, text)
    if adapted["family"] == "deberta":
        # Unigram: only a piece that starts with a new word can change (the prefix case, see families/unigram.py).
        touched = any(piece.startswith(token) for piece in pieces for token in new)
    else:
        touched = any(piece in new for piece in pieces)  # BPE: a new entry is only ever the whole piece
    if not touched:
        assert domain.encode(text).ids == lm.encode(text).ids


def test_a_new_word_inside_a_longer_word_is_never_its_token(adapted: dict[str, Any]) -> None:
    lm, domain = adapted["lm"], adapted["domain"]
    new_ids = set(adapted["new"].values())
    for word in DOMAIN_WORDS:
        for longer in (f"x{word}", f"{word}x", f"pre{word}post", f"{word}{word}"):
            ids = domain.encode(f"the {longer} was", add_special_tokens=False).ids
            if adapted["family"] == "deberta":
                general = lm.encode(f"the {longer} was", add_special_tokens=False).tokens
                # the prefix case: allowed only where T_LM itself splits right after the word
                if longer.startswith(word):
                    continue
                assert not (set(ids) & new_ids) or general == domain.encode(f"the {longer} was", add_special_tokens=False).tokens
            else:
                assert not (set(ids) & {adapted["new"][word]}), (longer, domain.encode(f"the {longer} was").tokens)
                # the longer word alone ("the" and "was" may be new words of the tiny vocabulary themselves)
                alone = f" {longer}"
                assert _pieces(lm, alone) == ["\u0120" + longer]
                assert domain.encode(alone, add_special_tokens=False).ids == lm.encode(alone, add_special_tokens=False).ids


def test_unigram_prefix_case_is_exactly_where_the_general_tokenizer_splits(adapted: dict[str, Any]) -> None:
    if adapted["family"] != "deberta":
        pytest.skip("the prefix case is Unigram's")
    lm, domain = adapted["lm"], adapted["domain"]
    for word in DOMAIN_WORDS:
        marker_word = "\u2581" + word
        for rest in ("s", "x", "ic", "ase", ",", "."):
            general = lm.encode(f" {word}{rest}", add_special_tokens=False).tokens
            ours = domain.encode(f" {word}{rest}", add_special_tokens=False).tokens
            split_after = [k for k in range(1, len(general) + 1) if "".join(general[:k]) == marker_word]
            if split_after:
                assert ours == [marker_word, *general[split_after[0]:]], (word, rest, general, ours)
            else:
                assert ours == general, (word, rest, general, ours)


def test_word_split_input_gets_the_new_tokens(adapted: dict[str, Any]) -> None:
    """greenadapt encodes pre-split words as in running text, so NER words hit T̂'s entries."""
    from transformers import AutoTokenizer

    from greenadapt.modeling.units import word_backend

    backend = word_backend(AutoTokenizer.from_pretrained(adapted["expand"]))
    words = ["the", "patients", "with", *DOMAIN_WORDS]
    encoding = backend.encode(words, is_pretokenized=True, add_special_tokens=False)
    for index, word in enumerate(DOMAIN_WORDS, start=3):
        ids = [i for i, w in zip(encoding.ids, encoding.word_ids, strict=True) if w == index]
        assert ids == [adapted["new"][word]], (word, encoding.tokens)


def test_a_words_pieces_are_its_pieces_wherever_it_stands(adapted: dict[str, Any]) -> None:
    """word_pieces tokenizes each distinct word once, alone: right only if a word's pieces in a sentence, first or
    later, are its pieces alone. Held against the sentences encoded whole, for T_LM and T̂ of every family."""
    from transformers import AutoTokenizer

    from greenadapt.modeling.units import word_backend, word_pieces

    rng = random.Random(3)
    vocabulary = [*GENERAL_WORDS[:40], *DOMAIN_WORDS, "APC2,", "(IL-6)", "don't", "Ünïcode", "x"]
    sentences = [rng.sample(vocabulary, 12) for _ in range(30)] + [[word, *vocabulary[:3], word] for word in vocabulary]
    for folder in (adapted["model"], adapted["expand"]):
        backend = word_backend(AutoTokenizer.from_pretrained(folder))
        whole = backend.encode_batch(sentences, is_pretokenized=True, add_special_tokens=False)
        got = word_pieces(backend, sentences, unk_id=0)
        for sentence, encoding, pieces in zip(sentences, whole, got, strict=True):
            expected = [tuple(i for i, w in zip(encoding.ids, encoding.word_ids, strict=True) if w == index) or (0,)
                        for index in range(len(sentence))]
            assert pieces == expected, (adapted["family"], folder.name, sentence)


def test_the_whole_chain_finetune_predict_pipeline(adapted: dict[str, Any]) -> None:
    from finetune_helpers import write_classify_file, write_ner_file

    root = adapted["root"]
    ner = write_ner_file(root / "ner.tsv", 24)
    texts = write_classify_file(root / "cls.jsonl", 24)
    ner_run = greenadapt.finetune("ner", ner, test=ner, model=str(adapted["expand"]), out=root / "ner", epochs=1, batch_size=8)
    cls_run = greenadapt.finetune("classify", texts, test=texts, model=str(adapted["expand"]), out=root / "cls", epochs=1, batch_size=8)
    for run in (ner_run, cls_run):
        metrics = json.loads((Path(run.path) / "metrics.json").read_text(encoding="utf-8"))
        assert metrics, run
    text = "the patients with tachycardia, were sick"
    (root / "in.txt").write_text(text + "\n", encoding="utf-8")
    greenadapt.predict(root / "in.txt", model=root / "ner", output=str(root / "pred.jsonl"))
    predicted = json.loads((root / "pred.jsonl").read_text(encoding="utf-8").splitlines()[0])
    for entity in predicted["entities"]:
        assert text[entity["start"]: entity["end"]] == entity["text"]
        assert not entity["text"].startswith(" ")  # word offsets carry no space marker
    entities = greenadapt.pipeline("ner", root / "ner")(text)
    assert all(text[e["start"]: e["end"]] == e["word"] for e in entities)
    label = greenadapt.pipeline("classify", root / "cls")(text)
    assert label["label"] in {"disease", "other"}
    for folder in (root / "ner", root / "ner" / "general-tokenizer"):  # as TokenizerPair.save writes a run's
        assert_loads_without_parsing_its_vocabulary_in_python(folder)


def test_the_domain_tokenizer_loads_without_parsing_its_vocabulary_in_python(adapted: dict[str, Any], tiny_bert: Path,
                                                                              tmp_path: Path) -> None:
    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer, write_domain_tokenizer

    assert_loads_without_parsing_its_vocabulary_in_python(adapted["expand"])  # as expand writes it, for this family
    general = load_general_tokenizer(tiny_bert)  # and WordPiece's
    (tmp_path / "wordpiece").mkdir()
    shutil.copyfile(tiny_bert / "config.json", tmp_path / "wordpiece" / "config.json")
    write_domain_tokenizer(general, ["tachycardia", "myocarditis"], general.size, tmp_path / "wordpiece")
    assert_loads_without_parsing_its_vocabulary_in_python(tmp_path / "wordpiece")


def test_inference_reads_each_tokenizer_from_its_files_as_transformers_loads_it(adapted: dict[str, Any], tiny_bert: Path,
                                                                                tmp_path: Path) -> None:
    """What prediction reads of a tokenizer without transformers (SavedTokenizer) is transformers' tokenizer of the
    folder: the same pieces and offsets of running text and of split words, special ids, length and limit. Every
    tokenizer greenadapt writes is read so; a BertTokenizer whose settings contradict its tokenizer.json is left to
    transformers (which rebuilds it from those settings)."""
    from transformers import AutoTokenizer

    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer, write_domain_tokenizer
    from greenadapt.artifacts.saved_tokenizer import read_saved_tokenizer
    from greenadapt.modeling.units import plain_backend

    wordpiece = tmp_path / "wordpiece"
    wordpiece.mkdir()
    shutil.copyfile(tiny_bert / "config.json", wordpiece / "config.json")
    general = load_general_tokenizer(tiny_bert)
    write_domain_tokenizer(general, ["tachycardia", "myocarditis"], general.size, wordpiece)
    words = [*DOMAIN_WORDS, *GENERAL_WORDS, "tachycardia", "caf\u00e9", "\u6771\u4eac", "x-ray!!", "don't"]
    rng = random.Random(3)
    texts = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(20)]
    for folder in (adapted["expand"], wordpiece, tiny_bert):
        saved, fast = read_saved_tokenizer(folder), AutoTokenizer.from_pretrained(folder)
        assert saved is not None, folder
        texts_with_specials = [*texts, f"{fast.cls_token} the {fast.mask_token} patients {fast.sep_token}"]
        mine, theirs = saved.backend_tokenizer, plain_backend(fast)
        for text in texts_with_specials:
            assert (mine.encode(text).ids, mine.encode(text).offsets) == (theirs.encode(text).ids, theirs.encode(text).offsets)
            split = text.split()
            assert mine.encode(split, is_pretokenized=True).ids == theirs.encode(split, is_pretokenized=True).ids
        assert [saved.cls_token_id, saved.sep_token_id, saved.pad_token_id, saved.unk_token_id, len(saved), saved.model_max_length] \
            == [fast.cls_token_id, fast.sep_token_id, fast.pad_token_id, fast.unk_token_id, len(fast), fast.model_max_length]
    contradicted = tmp_path / "cased-config"
    shutil.copytree(wordpiece, contradicted)
    config = json.loads((contradicted / "tokenizer_config.json").read_text(encoding="utf-8"))
    (contradicted / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": False}), encoding="utf-8")
    assert read_saved_tokenizer(contradicted) is None  # transformers would build a cased tokenizer from it


def test_word2vec_words_are_plain_text_for_every_family(adapted: dict[str, Any]) -> None:
    counts = next(adapted["root"].glob("work/*/*/w2v/counts.tsv"))
    words = [line.split("\t")[0] for line in counts.read_text(encoding="utf-8").splitlines()]
    assert set(DOMAIN_WORDS) <= set(words)
    assert not any(w.startswith(("\u0120", "\u2581")) or " " in w for w in words)


def test_unsupported_tokenizers_are_refused_in_one_line(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer

    model = build_family_model("roberta", tmp_path / "m")
    for name, tokenizer in {
        "word-level": Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]")),
        "character BPE": Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], end_of_word_suffix="</w>")),
    }.items():
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        folder = tmp_path / name.replace(" ", "-")
        shutil.copytree(model, folder)
        tokenizer.save(str(folder / "tokenizer.json"))
        with pytest.raises(ModelError) as info:
            load_general_tokenizer(folder)
        assert "cannot adapt" in info.value.message and "\n" not in str(info.value), name
        assert "RoBERTa" in str(info.value.hint)


def test_random_text_round_trip_through_plain_transformers(adapted: dict[str, Any]) -> None:
    """transformers loads T̂ as written: its ids equal the tokenizers library's on the same text."""
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(adapted["expand"])
    rng = random.Random(0)
    for _ in range(50):
        text = " ".join(rng.choices(GENERAL_WORDS + list(DOMAIN_WORDS), k=8))
        assert plain(text)["input_ids"] == adapted["domain"].encode(text).ids


def test_bpe_counts_old_entries_its_merges_never_rebuild(tmp_path: Path) -> None:
    """``ignore_merges`` would keep such an entry whole where T_LM splits it: expand records how many there are."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer, write_domain_tokenizer

    vocab = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "<unk>": 6}
    # "b c" ranks first, so "abc" becomes a + bc and the entry "abc" is never produced by merges.
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[("b", "c"), ("a", "b"), ("ab", "c")], unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    assert tokenizer.encode("abc").tokens == ["a", "bc"]
    general = load_general_tokenizer(tmp_path)
    assert general.family.entries_merges_miss(general) == ["abc"]
    out = tmp_path / "domain"
    out.mkdir()
    facts = write_domain_tokenizer(general, ["cab"], 7, out)
    assert facts == {"family": "BPE", "old_entries_now_whole": 1}
    domain = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert domain.encode("abc").tokens == ["abc"]  # the change the count warns of
    assert domain.encode("x cab").tokens[-1] == "\u0120cab"


def test_multitask_pals_and_gmap_on_each_family(adapted: dict[str, Any]) -> None:
    """PALs run on every family (ModernBERT's pre-norm layers included); G-MAP runs where the attention is
    BERT-style and is refused in one line where it is not (DeBERTa's disentangled attention, ModernBERT's fused one)."""
    from finetune_helpers import write_classify_file, write_ner_file

    root = adapted["root"]
    ner = write_ner_file(root / "mt-ner.tsv", 16)
    texts = write_classify_file(root / "mt-cls.jsonl", 16)
    run = greenadapt.multitask([f"name=ner,type=ner,train={ner}", f"name=cls,type=classify,train={texts}"],
                               model=str(adapted["expand"]), out=root / "multitask", epochs=1, batch_size=8)
    assert (Path(run.path) / "manifest.json").is_file()
    gmap = {"model": str(adapted["expand"]), "out": root / "gmap", "epochs": 1, "batch_size": 8, "gmap": "chunk"}
    if adapted["family"] == "roberta":
        assert (Path(greenadapt.finetune("ner", ner, **gmap).path) / "metrics.json").is_file()
    else:
        with pytest.raises(ModelError, match="G-MAP supports BERT-style encoders") as info:
            greenadapt.finetune("ner", ner, **gmap)
        assert "\n" not in info.value.message


def test_subword_mean_rows_are_the_mean_of_the_pieces_in_running_text(adapted: dict[str, Any]) -> None:
    """Methods that read a word's pieces use each family's own split of the word after a space (``Ġ``/``▁`` piece)."""
    from safetensors.numpy import load_file

    root = adapted["root"]
    outcome = greenadapt.adapt(corpus=str(root / "corpus.txt"), model=str(adapted["model"]), workdir=root / "work-sm",
                               method="subword-mean", min_count=5)
    rows = next(v for k, v in load_file(str(Path(outcome.path) / "model.safetensors")).items()
                if k.endswith(("word_embeddings.weight", "tok_embeddings.weight")))
    new = dict(line.split("\t")[:2] for line in (Path(outcome.path) / "new_words.tsv").read_text(encoding="utf-8").splitlines())
    lm = adapted["lm"]
    lm.no_padding()
    for word in DOMAIN_WORDS:
        pieces = lm.encode(f" {word}", add_special_tokens=False).ids
        assert lm.encode(f"the {word}", add_special_tokens=False).ids[-len(pieces):] == pieces  # the running-text split
        np.testing.assert_allclose(rows[int(new[word])], rows[pieces].mean(axis=0), rtol=1e-5, atol=1e-6)


def test_question_answering_on_each_family(adapted: dict[str, Any]) -> None:
    from qa_helpers import paragraph, squad_file

    root = adapted["root"]
    context = "the patients with tachycardia were treated with insulin and the leukemia cases were high"
    articles = [{"title": "t", "paragraphs": [paragraph(context, (f"q{i}", question, [(answer, context.index(answer))]))]}
                for i, (question, answer) in enumerate([("what were the patients with", "tachycardia"),
                                                        ("what were they treated with", "insulin")] * 4)]
    data = squad_file(root / "squad.json", articles)
    run = greenadapt.finetune("qa", data, model=str(adapted["expand"]), out=root / "qa-run", epochs=1, batch_size=4)
    greenadapt.qa(data, root / "qa-answers", model=str(run.path))
    answers = json.loads(next((root / "qa-answers").glob("predictions*.json")).read_text(encoding="utf-8"))
    assert answers and all(isinstance(text, str) and (not text or text in context) for text in answers.values())


def test_distill_fits_rows_on_each_family(adapted: dict[str, Any]) -> None:
    """--method distill reads windows with each family's word split and feeds new rows through its embeddings."""
    from safetensors.numpy import load_file

    root = adapted["root"]
    outcome = greenadapt.adapt(corpus=str(root / "corpus.txt"), model=str(adapted["model"]), workdir=root / "work", epochs=2,
                               min_count=5, method="distill", distill_sentences=96, distill_epochs=2)
    assert outcome.w2v.skipped  # the same vectors as the fixture's lstsq model: only the rows' method differs
    stats = outcome.expand.manifest["stats"]["distill"]
    assert stats["windows"] > 0 and stats["heldout_loss_after"] < stats["heldout_loss_before"]

    def rows(folder: Path) -> np.ndarray:
        tensors = load_file(str(folder / "model.safetensors"))
        return next(v for k, v in tensors.items() if k.endswith(("word_embeddings.weight", "tok_embeddings.weight")))

    fitted, lstsq, base = rows(Path(outcome.path)), rows(adapted["expand"]), rows(adapted["model"])
    assert fitted.shape == lstsq.shape
    np.testing.assert_array_equal(fitted[: len(base)], base)
    moved = [w for w, i in adapted["new"].items() if not np.array_equal(fitted[i], lstsq[i])]
    assert set(DOMAIN_WORDS) & set(moved), "no domain word's row was fitted"


def test_tokens_are_shown_as_text_not_as_their_family_markers(adapted: dict[str, Any]) -> None:
    """Issue 57, point 7: the align report's wordpiece neighbours read `disease` and `##ase` for every family,
    never `Ġdisease`, `▁disease` or a special token such as `<s>`."""
    from greenadapt.adaptation.align import neighbours_of

    (align,) = adapted["root"].glob("work/*/*/align")
    shown = [piece for row in neighbours_of(align) for piece, _ in row["cross"]]
    assert shown, "the report has no wordpiece neighbours to show"
    assert not any(p.startswith(("\u0120", "\u2581")) or "\u0120" in p or (p.startswith("<") and p.endswith(">")) for p in shown), shown
    assert all(p and p.isprintable() and not any(c.isspace() for c in p) and "\ufffd" not in p for p in shown), shown


@pytest.mark.parametrize(("family", "token", "shown"), [
    ("BPE", "\u0120disease", "disease"), ("BPE", "ase", "##ase"), ("BPE", "\u0120caf\u00c3\u00a9", "caf\u00e9"),
    ("BPE", "\u00c3", "##<0xC3>"), ("BPE", "\u0120", "<0x20>"), ("BPE", "\u010a", "##<0x0A>"),
    ("Unigram", "\u2581disease", "disease"), ("Unigram", "ase", "##ase"),
    ("WordPiece", "disease", "disease"), ("WordPiece", "##ase", "##ase"),
])
def test_readable_tokens(family: str, token: str, shown: str) -> None:
    from greenadapt.families.bpe import ByteLevelBpeFamily
    from greenadapt.families.unigram import UnigramFamily
    from greenadapt.families.wordpiece import WordPieceFamily

    spec: dict[str, Any] = {"model": {"vocab": []}, "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581"}}
    made = {"BPE": ByteLevelBpeFamily, "Unigram": UnigramFamily, "WordPiece": WordPieceFamily}[family](spec)
    assert made.readable(token) == shown
