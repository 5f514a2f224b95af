"""Rows averaged over word2vec draws (issue 55, item 3): the lever against a gain that depends on one draw.

Invariants: each new row is the mean of the draws' rows for that word, rescaled to their mean norm; one draw is
the single-draw expansion itself; `adapt --w2v-draws K` trains K draws with seeds seed..seed+K-1 and reruns skip.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

CORPUS = [
    "the heart rate of patients with tachycardia rose after infection and sleep loss",
    "patients with leukemia and melanoma were treated with insulin in the study",
    "glioma cells and kinase activity were high in the sepsis group of patients",
]


def _corpus(path: Path) -> Path:
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(300):
        words = " ".join(CORPUS[int(rng.integers(3))] for _ in range(2)).split()
        rng.shuffle(words)
        lines.append(" ".join(words))
    path.write_text("\n".join(lines) + "\n")
    return path


def _new_rows(folder: Path) -> np.ndarray:
    from safetensors.numpy import load_file

    weights = load_file(str(folder / "model.safetensors"))
    key = next(k for k in weights if k.endswith("word_embeddings.weight"))
    first = json.loads((folder / "manifest.json").read_text())["stats"]["first_new_id"]
    return weights[key][first:].astype(np.float64)


def test_the_average_of_draws_is_their_mean_at_their_mean_norm() -> None:
    from greenadapt.adaptation.weights import average_draws

    rng = np.random.default_rng(1)
    a, b, c = (rng.normal(size=(5, 4)).astype(np.float32) for _ in range(3))
    (one,) = list(average_draws([lambda: iter([a])]))
    np.testing.assert_allclose(one, a, rtol=1e-6)
    (same,) = list(average_draws([lambda: iter([a]), lambda: iter([a])]))
    np.testing.assert_allclose(same, a, rtol=1e-6)
    (mixed,) = list(average_draws([lambda: iter([a]), lambda: iter([b]), lambda: iter([c])]))
    mean = (a.astype(np.float64) + b + c) / 3
    cosine = (mixed * mean).sum(axis=1) / np.linalg.norm(mixed, axis=1) / np.linalg.norm(mean, axis=1)
    np.testing.assert_allclose(cosine, 1.0, rtol=1e-6)  # the mean's direction
    np.testing.assert_allclose(np.linalg.norm(mixed, axis=1),
                               (np.linalg.norm(a, axis=1) + np.linalg.norm(b, axis=1) + np.linalg.norm(c, axis=1)) / 3, rtol=1e-5)
    with pytest.raises(ValueError):  # draws of different lengths are never zipped short
        list(average_draws([lambda: iter([a]), lambda: iter([a, b])]))


def test_adapt_with_three_draws_averages_the_single_draw_rows(tmp_path: Path, tiny_bert: Path) -> None:
    from greenadapt.adaptation.weights import average_draws
    from greenadapt.api import adapt, expand

    corpus = _corpus(tmp_path / "corpus.txt")
    common = {"model": str(tiny_bert), "workdir": tmp_path / "w", "dim": 8, "min_count": 2, "min_count_new": 2, "epochs": 3, "workers": 1}
    outcome = adapt([str(corpus)], w2v_draws=3, out=tmp_path / "averaged", **common)
    run = (tmp_path / "w").glob("*/*/w2v*")
    seeds = sorted(json.loads((d / "manifest.json").read_text())["config"]["seed"] for d in run)
    assert seeds == [42, 43, 44]
    aligns = sorted((tmp_path / "w").glob("*/*/align*"), key=lambda p: len(p.name))
    assert len(aligns) == 3
    draws = json.loads((outcome.expand.path / "manifest.json").read_text())["config"]["other_draws"]
    assert len(draws) == 2
    singles = [_new_rows(expand(align=a, model=str(tiny_bert), min_count=2, out=tmp_path / f"single-{i}").path)
               for i, a in enumerate(aligns)]
    assert not np.allclose(singles[0], singles[1])  # the draws differ, so averaging is visible
    expected = np.concatenate(list(average_draws([lambda s=s: iter([s.astype(np.float32)]) for s in singles])))
    np.testing.assert_allclose(_new_rows(outcome.expand.path), expected, rtol=1e-3, atol=1e-5)
    again = adapt([str(corpus)], w2v_draws=3, out=tmp_path / "averaged", **common)
    assert again.expand.skipped and again.w2v.skipped


def test_draws_are_refused_where_nothing_can_be_averaged(tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from cli_helpers import run_cli

    corpus = _corpus(tmp_path / "corpus.txt")
    for extra, says in ((["--method", "subword-mean", "--w2v-draws", "2"], "no word2vec vectors"),
                        (["--w2v-draws", "17"], "less than or equal to 16"),  # the bound at the declaration
                        (["--seed", "4294967295", "--w2v-draws", "2"], "out of range")):
        code, err = run_cli(["adapt", "-c", str(corpus), "-m", str(tiny_bert), "--dim", "8", "--w2v-min-count", "2", "--workdir",
                             str(tmp_path / "w"), *extra], monkeypatch, capsys)
        assert code == 2 and says in err, err
    assert not (tmp_path / "w").exists()
