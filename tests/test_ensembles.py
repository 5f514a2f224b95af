"""Ensembles (issue 55): several fine-tuned runs as one model whose output is the mean of their probabilities.

The invariants: an ensemble's probabilities are the mean of its members' (not of their logits, not the first
member's); a one-member ensemble is the run itself; predict, the Python API and compare give the same thing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli
from finetune_helpers import build_tiny_expanded, write_classify_file, write_ner_file

from greenadapt.errors import EXIT_USAGE


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two NER runs of one expanded model (seeds 1 and 2), a classification run, and their data."""
    from greenadapt.api import finetune

    root = tmp_path_factory.mktemp("ensembles")
    model = build_tiny_expanded(root / "model")
    train = write_ner_file(root / "train.tsv", 40, seed=1)
    test = write_ner_file(root / "test.tsv", 16, seed=2)
    made = {"root": root, "model": model, "train": train, "test": test}
    for seed in (1, 2):
        finetune(task="ner", train=train, test=test, model=model, out=root / f"ner-{seed}", seed=seed, max_steps=6, device="cpu")
        made[f"ner-{seed}"] = root / f"ner-{seed}"
    classify = write_classify_file(root / "classify.jsonl", 24, seed=1)
    finetune(task="classify", train=classify, model=model, out=root / "classify", max_steps=2, device="cpu")
    made["classify"] = root / "classify"
    made["classify-data"] = classify
    return made


def _probabilities(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def test_an_ensembles_probabilities_are_the_mean_of_its_members(runs: dict[str, Path]) -> None:
    from greenadapt.inference.labelling import find_model_folder, label_file

    one = [find_model_folder(runs["ner-1"])]
    two = [find_model_folder(runs["ner-2"])]
    _, first = label_file(one, runs["test"])
    _, second = label_file(two, runs["test"])
    request, both = label_file([*one, *two], runs["test"])
    expected = (_probabilities(first) + _probabilities(second)) / 2
    assert not np.allclose(_probabilities(first), _probabilities(second))  # the members differ, so the check can fail
    np.testing.assert_allclose(np.exp(both), expected, rtol=1e-9, atol=1e-12)
    # the mean of probabilities, not of logits (which would rank some rows otherwise)
    assert not np.allclose(np.exp(both), _probabilities((first + second) / 2))
    assert len(both) == sum(len(s.words) for s in request.task_file.examples)


def test_a_one_member_ensemble_is_the_run_itself(runs: dict[str, Path]) -> None:
    """Scored through the ensemble's path, one member gives the run's own test scores, to the last digit."""
    from greenadapt.inference.labelling import find_model_folder, label_file

    request, logits = label_file([find_model_folder(runs["ner-1"])], runs["test"])
    scores, _ = request.task.score_modes(request.task_file, {request.mode: logits}, find_model_folder(runs["ner-1"])[1])
    recorded = json.loads((runs["ner-1"] / "metrics.json").read_text())["per_seed"]["1"]["test"]
    assert request.mode == "mean"
    for key, value in recorded["mean"].items():
        if isinstance(value, int | float):
            assert scores["mean"][key] == pytest.approx(value, abs=1e-12), key


def test_the_python_api_loads_an_ensemble(runs: dict[str, Path]) -> None:
    import greenadapt

    texts = ["the patients with tachycardia and leukemia", "insulin kinase in glioma cells"]
    alone = [greenadapt.load(runs[name], device="cpu") for name in ("ner-1", "ner-2")]
    ensemble = greenadapt.load([runs["ner-1"], runs["ner-2"]], device="cpu")
    assert "ensemble of 2" in repr(ensemble)
    from greenadapt.data.task_files import NerSentence

    examples = [NerSentence(tuple(t.split()), None, (i + 1,) * len(t.split())) for i, t in enumerate(texts)]
    np.testing.assert_allclose(ensemble._probabilities(examples),
                               (alone[0]._probabilities(examples) + alone[1]._probabilities(examples)) / 2, rtol=1e-9)
    single = greenadapt.load([runs["ner-1"]], device="cpu")
    np.testing.assert_array_equal(single._probabilities(examples), alone[0]._probabilities(examples))
    assert [e.to_dict() for e in greenadapt.load([runs["ner-1"]], device="cpu").predict(texts[0])] == \
        [e.to_dict() for e in alone[0].predict(texts[0])]


def test_predict_takes_several_models_as_one(runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from greenadapt.inference.labelling import find_model_folder, label_file
    from greenadapt.tasks import argmax_labels

    out = tmp_path / "ensemble.tsv"
    code, err = run_cli(["predict", "-m", str(runs["ner-1"]), "-m", str(runs["ner-2"]), "--input", str(runs["test"]), "-o", str(out)],
                        monkeypatch, capsys)
    assert code == 0, err
    request, logits = label_file([find_model_folder(runs["ner-1"]), find_model_folder(runs["ner-2"])], runs["test"])
    expected = argmax_labels(logits, find_model_folder(runs["ner-1"])[1].labels)
    written = [line.split("\t")[-1] for line in out.read_text().splitlines() if line.strip()]
    assert written == list(expected)
    code, err = run_cli(["predict", "-m", str(runs["ner-1"]), "-m", str(runs["ner-1"]), "--input", str(runs["test"])], monkeypatch, capsys)
    assert code == EXIT_USAGE and "same model twice" in err
    code, err = run_cli(["predict", "-m", str(runs["ner-1"]), "-m", str(runs["classify"]), "--input", str(runs["test"])],
                        monkeypatch, capsys)
    assert code == EXIT_USAGE and "ensemble members differ" in err, err


def test_compare_scores_an_ensemble_per_seed_and_counts_every_member(runs: dict[str, Path], tmp_path: Path) -> None:
    from greenadapt.api import compare
    from greenadapt.artifacts.manifest import read_manifest
    from greenadapt.inference.labelling import find_model_folder, label_file
    from greenadapt.machine.energy import cost_of, sum_costs

    out = tmp_path / "cmp"
    result = compare("ner", runs["train"], runs["test"], {"base": str(runs["model"]), "base-x2": str(runs["model"])},
                     out=out, seeds=[3], epochs=1, batch_size=8, device="cpu", bootstrap=200, ensembles={"base-x2": 2}, keep_going=True)
    members = [out / "base-x2" / "seed-3", out / "base-x2" / "seed-3-member-1"]
    assert [read_manifest(m)["config"]["seeds"] for m in members] == [[3], [100_003]]
    # the first member is the base run of the same seed and recipe
    base_metrics = json.loads((out / "base" / "seed-3" / "metrics.json").read_text())["per_seed"]["3"]["test"]
    first_metrics = json.loads((members[0] / "metrics.json").read_text())["per_seed"]["3"]["test"]
    assert first_metrics == base_metrics
    request, logits = label_file([find_model_folder(m) for m in members], runs["test"])
    scores, _ = request.task.score_modes(request.task_file, {request.mode: logits}, find_model_folder(members[0])[1])
    variant = next(v for v in result.variants if v.name == "base-x2")
    assert variant.scores[3]["mean" if "mean" in variant.scores[3] else "general"]["f1"] == pytest.approx(scores[request.mode]["f1"])
    expected_cost = sum_costs([cost_of(read_manifest(m) or {}) for m in members])
    assert variant.finetune_cost["cpu_seconds"] == pytest.approx(expected_cost["cpu_seconds"])
    (pair,) = result.pairs
    assert pair.variant == "base-x2" and len(pair.seeds) == 1
    # a rerun trains nothing and reads the kept ensemble scores
    stamp = (out / "base-x2" / "seed-3.ensemble.json").stat().st_mtime_ns
    compare("ner", runs["train"], runs["test"], {"base": str(runs["model"]), "base-x2": str(runs["model"])},
            out=out, seeds=[3], epochs=1, batch_size=8, device="cpu", bootstrap=200, ensembles={"base-x2": 2}, keep_going=True)
    assert (out / "base-x2" / "seed-3.ensemble.json").stat().st_mtime_ns == stamp


@pytest.mark.parametrize("ensemble,says", [(["nobody=2"], "names no --model"), (["base=0"], "1 to 16"), (["base"], "NAME=N")])
def test_compare_refuses_a_bad_ensemble_before_training(ensemble: list[str], says: str, runs: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["compare", "--task", "ner", "--train", str(runs["train"]), "--test", str(runs["test"]), "-m", f"base={runs['model']}",
            "-m", f"green={runs['model']}", "--out", str(tmp_path / "cmp"), *[x for e in ensemble for x in ("--ensemble", e)]]
    code, err = run_cli(args, monkeypatch, capsys)
    assert code == EXIT_USAGE and says in err, err
    assert not (tmp_path / "cmp").exists()
