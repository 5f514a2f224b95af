"""The initialisation-method registry: every method's new rows equal its formula; old rows never move.

Each method runs through ``align`` and ``expand`` on the tiny model with a
word2vec folder whose vectors are known (tests/w2v_fixtures.py); the new rows
are then rebuilt here from the method's definition, independently of its code
path (plain NumPy loops, float64).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from w2v_fixtures import DOMAIN_WORDS, linear_w2v

import greenadapt
from greenadapt.adaptation.align import align_stage
from greenadapt.adaptation.expand import expand_stage
from greenadapt.adaptation.methods import METHODS, get_method, method_help
from greenadapt.adaptation.settings import AlignSettings, MethodSettings
from greenadapt.options import declared_fields
from greenadapt.adaptation.methods.focus import focus_weights, sparsemax
from greenadapt.adaptation.vectors import read_word2vec_binary
from greenadapt.artifacts.model_weights import read_input_embeddings
from greenadapt.artifacts.manifest import load_stage
from greenadapt.errors import InputError, UsageError
from greenadapt.options import Run

EMBEDDING = "bert.embeddings.word_embeddings.weight"


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as reader:
        return {name: reader.get_tensor(name) for name in reader.keys()}


def _new_words(folder: Path) -> list[str]:
    return [line.split("\t")[0] for line in (folder / "new_words.tsv").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def w2v(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> Path:
    return linear_w2v(tmp_path_factory.mktemp("methods") / "w2v", tiny_bert, noise=0.05)[0]


def _expanded(w2v: Path, out: Path, method: str, **options: object) -> tuple[Path, Path]:
    aligned = align_stage(w2v=w2v, method=method, method_options=AlignSettings(**options),
                          run=Run(out=out / "align"))  # type: ignore[arg-type]
    return aligned.path, expand_stage(align=aligned.path, run=Run(out=out / "expand")).path


def _wordpiece_mean(model: Path, words: list[str]) -> np.ndarray:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    E = read_input_embeddings(model).astype(np.float64)
    rows = []
    for word in words:
        ids = tokenizer(word, add_special_tokens=False)["input_ids"]
        assert ids and tokenizer.pad_token_id not in ids
        rows.append(E[ids].mean(axis=0))
    return np.array(rows)


def test_the_registry_is_what_the_command_line_offers() -> None:
    assert list(METHODS) == ["lstsq", "identity", "random", "subword-mean", "focus", "hybrid", "context-mean", "distill"]
    for name, method in METHODS.items():
        assert method.name == name and method.summary and name in method_help()
        assert set(method.options) <= {field.name for field, _ in declared_fields(MethodSettings)}
    with pytest.raises(UsageError, match="unknown --method 'foo'.*lstsq, identity"):
        get_method("foo")
    from typer.testing import CliRunner

    from greenadapt.cli import _register, app

    _register()
    for command in ("align", "adapt"):
        text = CliRunner().invoke(app, [command, "--help"], terminal_width=400).output
        for name in METHODS:
            assert name in text, (command, name)


@pytest.mark.parametrize("method", ["lstsq", "subword-mean", "focus", "hybrid", "random"])
def test_old_rows_stay_bit_identical_and_a_rerun_is_byte_identical(method: str, w2v: Path, tiny_bert: Path, tmp_path: Path) -> None:
    _, expanded = _expanded(w2v, tmp_path / "a", method)
    before, after = _tensors(tiny_bert), _tensors(expanded)
    V = before[EMBEDDING].shape[0]
    assert torch.equal(after[EMBEDDING][:V], before[EMBEDDING])
    for name in set(before) - {EMBEDDING, "cls.predictions.bias"}:
        assert torch.equal(before[name], after[name]), name
    assert after[EMBEDDING].shape[0] == V + len(DOMAIN_WORDS)
    assert torch.isfinite(after[EMBEDDING]).all()
    _, again = _expanded(w2v, tmp_path / "b", method)
    assert (expanded / "model.safetensors").read_bytes() == (again / "model.safetensors").read_bytes()
    manifest = load_stage(expanded, "expand")
    assert manifest["stats"]["method_description"]["name"] == method


def test_subword_mean_rows_are_the_mean_of_the_wordpiece_rows(w2v: Path, tiny_bert: Path, tmp_path: Path) -> None:
    _, expanded = _expanded(w2v, tmp_path, "subword-mean")
    words = _new_words(expanded)
    V = read_input_embeddings(tiny_bert).shape[0]
    got = _tensors(expanded)[EMBEDDING][V:].numpy()
    np.testing.assert_allclose(got, _wordpiece_mean(tiny_bert, words), rtol=0, atol=1e-6)


def test_sparsemax_is_the_projection_onto_the_simplex() -> None:
    np.testing.assert_allclose(sparsemax(np.array([[2.0, 1.0, 0.1]])), [[1.0, 0.0, 0.0]])
    np.testing.assert_allclose(sparsemax(np.array([[0.5, 0.4, -3.0]])), [[0.55, 0.45, 0.0]])
    np.testing.assert_allclose(sparsemax(np.array([[1.0, 1.0, 1.0, 1.0]])), [[0.25] * 4])
    rng = np.random.default_rng(0)
    z = rng.standard_normal((200, 12)) * 3
    p = sparsemax(z)
    assert (p >= 0).all() and np.allclose(p.sum(axis=1), 1.0)
    # Projection: no other point of the simplex is closer (checked against random simplex points).
    for row, probs in zip(z[:20], p[:20]):
        others = rng.dirichlet(np.ones(12), size=500)
        assert np.linalg.norm(probs - row) <= np.linalg.norm(others - row, axis=1).min() + 1e-9


def test_focus_rows_are_sparse_convex_combinations_of_the_nearest_shared_words(w2v: Path, tiny_bert: Path, tmp_path: Path) -> None:
    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer

    k, temperature = 8, 0.05
    _, expanded = _expanded(w2v, tmp_path, "focus", focus_k=k, focus_temperature=temperature)
    general = load_general_tokenizer(tiny_bert)
    words, vectors = read_word2vec_binary(w2v / "vectors.bin")
    shared = [i for i, w in enumerate(words) if w in general.vocab]
    E = read_input_embeddings(tiny_bert).astype(np.float64)
    new = _new_words(expanded)
    queries = vectors[[words.index(w) for w in new]]
    top, weights = focus_weights(queries, vectors[shared], k, temperature)
    assert np.allclose(weights.sum(axis=1), 1.0) and (weights >= 0).all()
    assert (weights == 0).any(axis=1).all(), "sparsemax with a small temperature leaves some neighbours out"
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    expected = []
    for q, idx, w in zip(queries, top, weights):
        sims = unit[shared] @ (q / np.linalg.norm(q))
        assert set(idx) == set(np.argsort(-sims)[:k])  # the k nearest shared words, by cosine
        expected.append(sum(wi * E[general.vocab[words[shared[j]]]] for j, wi in zip(idx, w)))
    V = E.shape[0]
    np.testing.assert_allclose(_tensors(expanded)[EMBEDDING][V:].numpy(), np.array(expected), rtol=0, atol=1e-5)


def test_hybrid_is_the_weighted_sum_of_lstsq_and_subword_mean(w2v: Path, tiny_bert: Path, tmp_path: Path) -> None:
    aligned, expanded = _expanded(w2v, tmp_path, "hybrid", hybrid_weight=0.3)
    new = _new_words(expanded)
    words, vectors = read_word2vec_binary(w2v / "vectors.bin")
    W = np.load(aligned / "map.npy", allow_pickle=False)
    mapped = vectors[[words.index(w) for w in new]].astype(np.float64) @ W.T
    expected = 0.3 * mapped + 0.7 * _wordpiece_mean(tiny_bert, new)
    V = read_input_embeddings(tiny_bert).shape[0]
    np.testing.assert_allclose(_tensors(expanded)[EMBEDDING][V:].numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["lstsq", "focus"])
def test_match_norm_keeps_the_direction_and_sets_the_whole_word_norm(method: str, w2v: Path, tiny_bert: Path, tmp_path: Path) -> None:
    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer

    _, plain = _expanded(w2v, tmp_path / "plain", method)
    _, normed = _expanded(w2v, tmp_path / "normed", method, match_norm=True)
    general = load_general_tokenizer(tiny_bert)
    E = read_input_embeddings(tiny_bert).astype(np.float64)
    whole = [i for t, i in general.vocab.items() if not t.startswith("##") and not (t.startswith("[") and t.endswith("]"))]
    target = np.linalg.norm(E[whole], axis=1).mean()
    V = E.shape[0]
    a, b = _tensors(plain)[EMBEDDING][V:].double().numpy(), _tensors(normed)[EMBEDDING][V:].double().numpy()
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), target, rtol=1e-5)
    cos = np.einsum("ij,ij->i", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    np.testing.assert_allclose(cos, 1.0, atol=1e-6)
    assert load_stage(normed, "expand")["stats"]["match_norm_target"] == pytest.approx(target)


def test_method_options_count_only_for_their_method(w2v: Path, tmp_path: Path) -> None:
    first = align_stage(w2v=w2v, run=Run(out=tmp_path / "a"))
    # focus's options do not change lstsq's output, so it is up to date whatever they are.
    assert align_stage(w2v=w2v, method_options=AlignSettings(focus_k=3), run=Run(out=tmp_path / "a")).skipped
    assert "method_options" not in first.manifest["config"]
    focus = align_stage(w2v=w2v, method="focus", run=Run(out=tmp_path / "f"))
    assert focus.manifest["config"]["method_options"] == {"focus_k": 10, "focus_temperature": 0.1}
    with pytest.raises(UsageError, match="hybrid_weight must be at most 1"):
        align_stage(w2v=w2v, method="hybrid", method_options=AlignSettings(hybrid_weight=1.5), run=Run(out=tmp_path / "h"))


def test_adapt_with_subword_mean_trains_no_word2vec(tiny_bert: Path, tmp_path: Path) -> None:

    words = "the heart rate of patients with tachycardia rose after covid infection and sleeplessness".split()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(words[(i + j) % len(words)] for j in range(10)) for i in range(300)) + "\n")
    outcome = greenadapt.adapt([str(corpus)], model=str(tiny_bert), min_count=2, workers=1, method="subword-mean",
                               workdir=tmp_path / "work", out=tmp_path / "model")
    assert not (outcome.w2v.path / "vectors.bin").exists() and outcome.w2v.path.name == "w2v-counts"
    assert outcome.w2v.manifest["stats"]["word2vec_trained"] is False
    assert outcome.align.manifest["stats"]["word2vec_trained"] is False
    assert outcome.align.manifest["stats"]["method_description"]["word2vec_trained"] is False
    new = _new_words(outcome.expand.path)
    assert {"tachycardia", "covid", "sleeplessness"} <= set(new)
    V = read_input_embeddings(tiny_bert).shape[0]
    np.testing.assert_allclose(_tensors(outcome.expand.path)[EMBEDDING][V:].numpy(), _wordpiece_mean(tiny_bert, new), atol=1e-6)


def test_a_method_that_needs_vectors_refuses_a_counts_only_folder(tiny_bert: Path, tmp_path: Path) -> None:

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the heart rate of patients with tachycardia\n" * 20)
    counts = greenadapt.w2v([str(corpus)], model=str(tiny_bert), min_count=1, no_vectors=True, workdir=tmp_path / "w").path
    with pytest.raises(InputError, match="--method focus needs word vectors.*holds word counts only"):
        align_stage(w2v=counts, method="focus")


def test_align_warns_about_a_near_noise_fit_and_records_it(tiny_bert: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from w2v_fixtures import write_w2v_folder

    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer

    general = load_general_tokenizer(tiny_bert)
    words = [t for t in general.vocab if t.isalpha()][:60] + list(DOMAIN_WORDS)
    noise = np.random.default_rng(1).standard_normal((len(words), 40)).astype(np.float32)  # unrelated to the embeddings
    w2v = write_w2v_folder(tmp_path / "w2v", tiny_bert, words, noise, list(range(len(words), 0, -1)))
    with caplog.at_level(logging.WARNING, logger="greenadapt"):
        stats = align_stage(w2v=w2v, run=Run(out=tmp_path / "a")).manifest["stats"]
    assert stats["heldout_cosine"] < 0.2
    assert any("close to noise" in w and "corpus too small" in w and "--dim 100 --epochs 15" in w for w in stats["warnings"])
    assert any("close to noise" in r.getMessage() for r in caplog.records)
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["warnings"] == stats["warnings"]
    good = align_stage(w2v=linear_w2v(tmp_path / "good", tiny_bert, noise=0.01)[0], run=Run(out=tmp_path / "g")).manifest["stats"]
    assert good["warnings"] == [] and good["heldout_cosine"] > 0.9


def _context_corpus(path: Path) -> Path:
    words = "the heart rate of patients with tachycardia rose after covid infection and sleeplessness".split()
    path.write_text("\n".join(" ".join(words[(i + j) % len(words)] for j in range(8)) for i in range(60)) + "\n")
    return path


def test_context_vectors_are_the_mean_hidden_state_of_the_first_occurrences(tiny_bert: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModel, AutoTokenizer

    from greenadapt.adaptation import context_vectors

    monkeypatch.setattr(context_vectors, "LINES_PER_BATCH", 7)  # batches that end mid-corpus
    corpus = _context_corpus(tmp_path / "corpus.txt")
    cap, layer = 3, 1
    out = greenadapt.w2v([str(corpus)], model=str(tiny_bert), min_count=2, source="context", context_layer=layer, context_cap=cap,
                         workdir=tmp_path / "w").path
    assert out.name == "w2v-context"
    words, vectors = read_word2vec_binary(out / "vectors.bin")
    assert words == [line.split("\t")[0] for line in (out / "counts.tsv").read_text().splitlines()]
    manifest = load_stage(out, "w2v")
    assert manifest["config"]["vectors"] == "context" and manifest["stats"]["context"]["layer"] == layer
    assert {"torch", "transformers"} <= set(manifest["libraries"])  # it ran the model
    # Recompute "tachycardia" independently: one sentence at a time, its first `cap` occurrences.
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_bert))
    model = AutoModel.from_pretrained(str(tiny_bert)).eval()
    states = []
    for line in corpus.read_text().splitlines():
        split = line.split()
        if "tachycardia" not in split or len(states) == cap:
            continue
        encoded = tokenizer(split, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**encoded, output_hidden_states=True).hidden_states[layer][0].double().numpy()
        ids = encoded.word_ids(0)
        for position_word in range(len(split)):
            if split[position_word] == "tachycardia" and len(states) < cap:
                states.append(hidden[[i for i, w in enumerate(ids) if w == position_word]].mean(axis=0))
    np.testing.assert_allclose(vectors[words.index("tachycardia")], np.mean(states, axis=0), atol=1e-5)


def test_adapt_with_context_mean_maps_contextual_vectors_by_least_squares(tiny_bert: Path, tmp_path: Path) -> None:

    corpus = _context_corpus(tmp_path / "corpus.txt")
    outcome = greenadapt.adapt([str(corpus)], model=str(tiny_bert), min_count=2, workers=1, method="context-mean",
                               workdir=tmp_path / "work", out=tmp_path / "model")
    stats = outcome.align.manifest["stats"]
    assert stats["vector_source"] == "context" and stats["word2vec_trained"] is False and stats["map_file"] == "map.npy"
    words, vectors = read_word2vec_binary(outcome.w2v.path / "vectors.bin")
    W = np.load(outcome.align.path / "map.npy", allow_pickle=False)
    new = _new_words(outcome.expand.path)
    V = read_input_embeddings(tiny_bert).shape[0]
    expected = vectors[[words.index(w) for w in new]].astype(np.float64) @ W.T
    np.testing.assert_allclose(_tensors(outcome.expand.path)[EMBEDDING][V:].numpy(), expected, rtol=1e-5, atol=1e-5)
    # context-mean on word2vec vectors is refused: the name would promise what the rows are not
    w2v = linear_w2v(tmp_path / "w2v", tiny_bert)[0]
    with pytest.raises(InputError, match="needs the base model's contextual vectors"):
        align_stage(w2v=w2v, method="context-mean")


def test_expand_method_picks_that_methods_align_folder_or_refuses_another(tiny_bert: Path, tmp_path: Path) -> None:
    from greenadapt.adaptation.expand import expand_stage
    from greenadapt.errors import UsageError

    words = "the heart rate of patients with tachycardia rose after covid infection and sleeplessness".split()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(words[(i + j) % len(words)] for j in range(10)) for i in range(300)) + "\n")
    work = tmp_path / "work"
    greenadapt.adapt([str(corpus)], model=str(tiny_bert), min_count=2, workers=1, epochs=1, workdir=work)
    focus_align = align_stage(corpus=[str(corpus)], method="focus", run=Run(workdir=work))
    assert focus_align.path.name == "align-focus"

    focus = expand_stage(corpus=[str(corpus)], method="focus", run=Run(workdir=work))
    assert focus.path.name == "expand-focus" and focus.manifest["stats"]["method"] == "focus"
    lstsq = expand_stage(corpus=[str(corpus)], method="lstsq", run=Run(workdir=work))
    assert lstsq.skipped and lstsq.path.name == "expand"  # adapt's own output
    with pytest.raises(UsageError, match="--method lstsq, but .* was fitted with focus"):
        expand_stage(align=focus_align.path, method="lstsq", run=Run(out=tmp_path / "mismatch"))
    with pytest.raises(UsageError, match="unknown --method"):
        expand_stage(corpus=[str(corpus)], method="nope", run=Run(workdir=work))
    assert not (tmp_path / "mismatch").exists()
