"""``align``: the least-squares map, its ablations, the report and the command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_S
from w2v_fixtures import DOMAIN_WORDS, linear_w2v, write_w2v_folder

from greenadapt.adaptation.align import fit_linear_map, mean_cosine, align_stage
from greenadapt.artifacts.model_weights import read_input_embeddings
from greenadapt.artifacts.manifest import load_stage
from greenadapt.artifacts.workspace import corpus_key
from greenadapt.errors import EXIT_BAD_INPUT, EXIT_STAGE_CONFLICT, InputError, OutputExistsError, StageError
from greenadapt.options import Run

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def exact_w2v(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> tuple[Path, np.ndarray]:
    """w2v vectors that are an exact linear image (plus 1% noise) of the tiny model's embeddings."""
    return linear_w2v(tmp_path_factory.mktemp("w2v") / "w2v", tiny_bert, noise=0.01)


def test_fit_linear_map_matches_lstsq_and_recovers_the_map() -> None:
    rng = np.random.default_rng(0)
    W_true = rng.standard_normal((12, 20))
    X = rng.standard_normal((500, 20))
    Y = X @ W_true.T
    W, info = fit_linear_map(X, Y)
    assert info["solver"] == "normal_equations"
    assert W.shape == (12, 20)
    np.testing.assert_allclose(W, W_true, atol=1e-8)
    Y_noisy = Y + 0.1 * rng.standard_normal(Y.shape)
    W_noisy, _ = fit_linear_map(X, Y_noisy)
    np.testing.assert_allclose(W_noisy, np.linalg.lstsq(X, Y_noisy, rcond=None)[0].T, atol=1e-8)


def test_fit_linear_map_falls_back_to_lstsq_when_rank_deficient() -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((300, 8))
    X = np.hstack([X, X[:, :2]])  # two duplicated columns: XᵀX is singular
    Y = rng.standard_normal((300, 5))
    W, info = fit_linear_map(X, Y)
    assert info["solver"] == "lstsq"
    np.testing.assert_allclose(W, np.linalg.lstsq(X, Y, rcond=None)[0].T, atol=1e-10)


def test_mean_cosine() -> None:
    A = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    B = np.array([[2.0, 0.0], [0.0, -1.0], [1.0, 1.0]])
    assert mean_cosine(A, B) == pytest.approx((1 - 1 + 0) / 3)


def test_lstsq_heldout_cosine_near_one_for_a_linear_image(exact_w2v: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    w2v, W_true = exact_w2v
    outcome = align_stage(w2v=w2v, run=Run(out=tmp_path / "align"))
    report = json.loads((outcome.path / "report.json").read_text())
    assert report["method"] == "lstsq" and report["solver"] == "normal_equations"
    assert report["n_new"] == len(DOMAIN_WORDS)
    assert report["n_heldout"] == round(0.1 * report["n_shared"])
    assert report["n_train"] + report["n_heldout"] == report["n_shared"]
    assert report["heldout_cosine"] > 0.995
    assert report["train_cosine"] > 0.995
    W = np.load(outcome.path / "map.npy", allow_pickle=False)
    assert W.shape == (32, 40) and W.dtype == np.float64
    # The map must send word2vec vectors back onto the model's own embeddings.
    embeddings = read_input_embeddings(Path(outcome.manifest["config"]["model"]["path"]))
    images = embeddings.astype(np.float64) @ np.linalg.pinv(W_true).T
    assert mean_cosine(images @ W.T, embeddings) > 0.99
    assert outcome.manifest["stats"]["heldout_cosine"] == report["heldout_cosine"]


def test_heldout_cosine_is_low_for_unrelated_vectors(tiny_bert: Path, tmp_path: Path) -> None:
    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer

    general = load_general_tokenizer(tiny_bert)
    words = [t for t in general.vocab if not t.startswith(("##", "["))]
    vectors = np.random.default_rng(3).standard_normal((len(words), 40)).astype(np.float32)
    w2v = write_w2v_folder(tmp_path / "w2v", tiny_bert, words, vectors, list(range(len(words), 0, -1)))
    report = align_stage(w2v=w2v).manifest["stats"]
    assert report["heldout_cosine"] < 0.5 < report["train_cosine"]


def test_manifest_records_inputs_and_default_out_is_the_sibling(exact_w2v: tuple[Path, np.ndarray], tiny_bert: Path) -> None:
    w2v, _ = exact_w2v
    outcome = align_stage(w2v=w2v, run=Run(force=True))
    assert outcome.path == w2v.parent / "align"
    manifest = load_stage(outcome.path, "align")
    assert manifest["config"]["model"]["path"] == str(tiny_bert)
    stages = [i for i in manifest["inputs"] if i.get("stage") == "w2v"]
    assert stages and stages[0]["path"] == str(w2v.resolve())
    assert manifest["config"]["method"] == "lstsq"
    # It read a safetensors model: neither torch nor transformers took part.
    assert set(manifest["libraries"]) == {"python", "greenadapt", "numpy", "scipy", "safetensors", "tokenizers"}


def test_rerun_skips_and_the_seed_counts_only_for_the_random_method(exact_w2v: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    w2v, _ = exact_w2v
    first = align_stage(w2v=w2v, seed=1, run=Run(out=tmp_path / "a"))
    again = align_stage(w2v=w2v, seed=1, run=Run(out=tmp_path / "a"))
    assert not first.skipped and again.skipped
    # lstsq is deterministic: another seed names the same output (w2v -> align -> adapt with other defaults works).
    assert align_stage(w2v=w2v, seed=2, run=Run(out=tmp_path / "a")).skipped
    align_stage(w2v=w2v, method="random", seed=1, run=Run(out=tmp_path / "r"))
    with pytest.raises(OutputExistsError, match="seed"):
        align_stage(w2v=w2v, method="random", seed=2, run=Run(out=tmp_path / "r"))


def test_the_heldout_split_is_fixed_whatever_the_seed(exact_w2v: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    w2v, _ = exact_w2v
    a = json.loads((align_stage(w2v=w2v, seed=5, run=Run(out=tmp_path / "a")).path / "report.json").read_text())
    c = json.loads((align_stage(w2v=w2v, seed=6, run=Run(out=tmp_path / "c")).path / "report.json").read_text())
    assert a == c and a["seed"] is None and a["heldout_seed"] == 0
    assert (tmp_path / "a" / "map.npy").read_bytes() == (tmp_path / "c" / "map.npy").read_bytes()


def test_identity_needs_equal_dimensions(exact_w2v: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    w2v, _ = exact_w2v
    with pytest.raises(InputError) as info:
        align_stage(w2v=w2v, method="identity", run=Run(out=tmp_path / "i"))
    assert "32" in info.value.message and "40" in info.value.message
    assert "--method lstsq" in (info.value.hint or "")
    assert not (tmp_path / "i").exists()


def test_identity_with_equal_dimensions(tiny_bert: Path, tmp_path: Path) -> None:
    w2v, _ = linear_w2v(tmp_path / "w2v", tiny_bert, dim=32)
    outcome = align_stage(w2v=w2v, method="identity")
    np.testing.assert_array_equal(np.load(outcome.path / "map.npy", allow_pickle=False), np.eye(32))
    assert outcome.manifest["stats"]["method"] == "identity"


def test_random_stores_the_gaussian_and_is_seeded(exact_w2v: tuple[Path, np.ndarray], tiny_bert: Path, tmp_path: Path) -> None:
    w2v, _ = exact_w2v
    a = align_stage(w2v=w2v, method="random", seed=3, run=Run(out=tmp_path / "a"))
    b = align_stage(w2v=w2v, method="random", seed=3, run=Run(out=tmp_path / "b"))
    assert not (a.path / "map.npy").exists()
    mean = np.load(a.path / "gaussian_mean.npy", allow_pickle=False)
    cov = np.load(a.path / "gaussian_cov.npy", allow_pickle=False)
    embeddings = read_input_embeddings(tiny_bert).astype(np.float64)
    np.testing.assert_allclose(mean, embeddings.mean(axis=0), atol=1e-9)
    np.testing.assert_allclose(cov, np.cov(embeddings, rowvar=False), atol=1e-9)
    assert (a.path / "report.json").read_text() == (b.path / "report.json").read_text()
    assert a.manifest["stats"]["heldout_cosine"] < 0.5


def test_empty_shared_vocabulary_is_a_clear_error(tiny_bert: Path, tmp_path: Path) -> None:
    words = ["Zyxwvut", "Qwertyuiop"]  # capitalised: never entries of an uncased vocabulary
    w2v = write_w2v_folder(tmp_path / "w2v", tiny_bert, words, np.ones((2, 4), np.float32), [3, 2])
    with pytest.raises(InputError, match="empty shared vocabulary"):
        align_stage(w2v=w2v)


def test_normalization_mismatch_is_a_clear_error(tiny_bert: Path, tmp_path: Path) -> None:
    w2v, _ = linear_w2v(tmp_path / "w2v", tiny_bert, lowercase=False)
    with pytest.raises(InputError) as info:
        align_stage(w2v=w2v)
    assert "lowercase=False" in info.value.message and "lowercase=True" in info.value.message


def test_wrong_kind_of_folder(exact_w2v: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    w2v, _ = exact_w2v
    aligned = align_stage(w2v=w2v, run=Run(out=tmp_path / "align"))
    with pytest.raises(StageError, match="'align' folder"):
        align_stage(w2v=aligned.path, run=Run(out=tmp_path / "again"))
    with pytest.raises(StageError, match="no w2v output"):
        align_stage(w2v=tmp_path / "absent")


def test_finds_w2v_by_corpus_in_the_workspace(tiny_bert: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    w2v_dir = workdir / corpus_key(["mycorpus"]) / "tiny" / "w2v"
    linear_w2v(w2v_dir, tiny_bert)
    outcome = align_stage(corpus=["mycorpus"], run=Run(workdir=workdir))
    assert outcome.path == w2v_dir.parent / "align"
    with pytest.raises(StageError, match="no w2v output"):
        align_stage(corpus=["othercorpus"], run=Run(workdir=workdir))


def test_neighbour_table_within_and_cross_space(tiny_bert: Path, tmp_path: Path) -> None:
    w2v, _ = linear_w2v(tmp_path / "w2v", tiny_bert)
    from greenadapt.adaptation.vectors import read_counts, read_word2vec_binary

    words, vectors = read_word2vec_binary(w2v / "vectors.bin")
    counts = read_counts(w2v / "counts.tsv")
    # Make "cardiomyopathy" a near-copy of "heart": its within-space and its
    # cross-space nearest neighbour must then both be "heart".
    vectors[words.index("cardiomyopathy")] = vectors[words.index("heart")] * 1.01
    w2v = write_w2v_folder(tmp_path / "w2v2", tiny_bert, words, vectors, [counts[w] for w in words])
    outcome = align_stage(w2v=w2v, probes=["Heart", "nonexistentword"])
    rows = {r["word"]: r for r in json.loads((outcome.path / "report.json").read_text())["neighbours"]}
    frequent = [r for r in rows.values() if r["kind"] == "frequent"]
    # The ten most frequent new domain words, most frequent first (seven qualify here).
    assert [r["word"] for r in frequent][:5] == ["tachycardia", "cardiomyopathy", "myocarditis", "hypertension", "thrombosis"]
    assert 5 < len(frequent) <= 10
    card = rows["cardiomyopathy"]
    assert card["within"][0][0] == "heart" and card["within"][0][1] > 0.999
    assert card["cross"][0][0] == "heart"
    assert len(card["within"]) == 5 and all(w != "cardiomyopathy" for w, _ in card["within"])
    scores = [s for _, s in card["within"]]
    assert scores == sorted(scores, reverse=True)
    assert rows["heart"]["kind"] == "probe" and rows["heart"]["in_vocab"]  # probes are normalized
    assert rows["nonexistentword"]["in_w2v"] is False and rows["nonexistentword"]["within"] == []


def test_vectors_that_share_one_direction_are_named_with_their_mean_cosine(tiny_bert: Path, tmp_path: Path) -> None:
    """word2vec on little text: every vector leans one way and every neighbour shows cosine 1.00 (issue 37)."""
    import numpy as np

    from greenadapt.adaptation.align import SHARED_DIRECTION_COSINE, mean_pairwise_cosine
    from greenadapt.adaptation.vectors import read_counts, read_word2vec_binary

    w2v, _ = linear_w2v(tmp_path / "w2v", tiny_bert)
    words, vectors = read_word2vec_binary(w2v / "vectors.bin")
    counts = read_counts(w2v / "counts.tsv")
    rng = np.random.default_rng(0)
    spread = rng.normal(size=vectors.shape)
    unit = spread / np.linalg.norm(spread, axis=1, keepdims=True)
    exact = float(((unit @ unit.T).sum() - len(unit)) / (len(unit) * (len(unit) - 1)))
    assert mean_pairwise_cosine(spread.astype(np.float32), chunk=7) == pytest.approx(exact, abs=1e-6)  # chunked = exact
    healthy = align_stage(
        w2v=write_w2v_folder(tmp_path / "ok", tiny_bert, words, spread.astype(np.float32), [counts[w] for w in words]),
        run=Run(out=tmp_path / "align-ok"),
    )
    assert healthy.manifest["stats"]["w2v_mean_cosine"] < SHARED_DIRECTION_COSINE
    assert not any("share one direction" in w for w in healthy.manifest["stats"]["warnings"])
    leaning = (spread + 30 * np.ones(vectors.shape[1]) / np.sqrt(vectors.shape[1])).astype(np.float32)
    outcome = align_stage(
        w2v=write_w2v_folder(tmp_path / "lean", tiny_bert, words, leaning, [counts[w] for w in words]),
        run=Run(out=tmp_path / "align-lean"),
    )
    stats = outcome.manifest["stats"]
    assert stats["w2v_mean_cosine"] > 0.9
    assert any(f"share one direction (mean cosine between two words {stats['w2v_mean_cosine']:.2f})" in w for w in stats["warnings"])


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "greenadapt", "align", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=HANG_S
    )


def test_cli_summary_table_and_error_exit_code(exact_w2v: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    w2v, _ = exact_w2v
    done = _cli("--w2v", str(w2v), "--out", str(tmp_path / "a"), "--probe", "heart", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first, *rest = done.stdout.splitlines()
    assert first.startswith("align done:") and "113 shared words, 10 new" in first
    assert float(re.search(r"held-out cosine (\d\.\d+)", first).group(1)) > 0.99
    table = "\n".join(rest)
    assert "tachycardia" in table and "heart" in table

    wrong = _cli("--w2v", str(tmp_path / "a"), "--out", str(tmp_path / "b"), cwd=tmp_path)
    assert wrong.returncode == EXIT_STAGE_CONFLICT
    assert wrong.stderr.strip().startswith("error:") and len(wrong.stderr.strip().splitlines()) == 1
    assert "Traceback" not in wrong.stderr


def test_cli_json_and_identity_error(exact_w2v: tuple[Path, np.ndarray], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from greenadapt.cli import _register, app

    _register()
    w2v, _ = exact_w2v
    result = CliRunner().invoke(app, ["align", "--w2v", str(w2v), "--out", str(tmp_path / "a"), "--json", "-q"])
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.stdout)
    assert manifest["kind"] == "align" and manifest["stats"]["n_shared"] == 113
    result = CliRunner().invoke(app, ["align", "--w2v", str(w2v), "--method", "identity", "--out", str(tmp_path / "c")])
    assert isinstance(result.exception, InputError) and result.exception.exit_code == EXIT_BAD_INPUT


def test_frequent_new_words_take_the_fast_path_only_when_it_gives_the_same_table(tiny_bert: Path) -> None:
    import random

    from greenadapt.adaptation.neighbours import N_FREQUENT, frequent_new_words
    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer

    general = load_general_tokenizer(tiny_bert)
    rng = random.Random(0)
    new = sorted({"".join(rng.choice("bdfgklmnprstvz") for _ in range(rng.randint(6, 9))) for _ in range(400)})
    words = new + ["patients", "tumor", "x1-word", "short"]
    counts_by_word = {w: rng.choice([3, 5, 5, 8, 8, 8, 13, 40]) for w in words}  # many ties at the cut
    expected = sorted((w for w in words if len(w) >= 6 and w.isalpha() and not general.is_known(w)),
                      key=lambda w: (-counts_by_word[w], w))[:N_FREQUENT]
    # w2v's order (most frequent first, ties in any order): the early stop must still see every tie.
    in_order = sorted(words, key=lambda w: (-counts_by_word[w], rng.random()))
    assert frequent_new_words(general, in_order, {w: counts_by_word[w] for w in in_order}) == expected
    # Any other order: the full scan gives the same table.
    shuffled = list(words)
    rng.shuffle(shuffled)
    assert frequent_new_words(general, shuffled, {w: counts_by_word[w] for w in shuffled}) == expected
    assert frequent_new_words(general, in_order, {w: counts_by_word[w] for w in shuffled}) == expected



def test_the_neighbours_table_is_read_from_the_report_and_a_bad_report_only_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from greenadapt.adaptation.align import REPORT_FILE, neighbours_of

    rows = [{"word": "upregulation", "in_w2v": True, "within": [["downregulation", 0.8]], "cross": []}]
    (tmp_path / REPORT_FILE).write_text(json.dumps({"method": "lstsq", "neighbours": [*rows, "not a row"]}), encoding="utf-8")
    assert neighbours_of(tmp_path) == rows
    for damaged in ("{not json", '{"neighbours": 3}', "[1, 2]"):
        (tmp_path / REPORT_FILE).write_text(damaged, encoding="utf-8")
        assert neighbours_of(tmp_path) == []
    assert "cannot be read" in caplog.text  # the first damaged file: said, never a traceback
    (tmp_path / REPORT_FILE).unlink()
    assert neighbours_of(tmp_path) == []
