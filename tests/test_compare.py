"""`greenadapt compare`: the statistics on constructed inputs, and the command end to end on tiny models."""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from greenadapt.comparison.examples import classification_contributions, ner_contributions
from greenadapt.comparison.statistics import Contributions, compare_pair, paired_bootstrap, t_interval
from greenadapt.data.metrics import classification_scores, entity_scores


def _accuracy(correct: list[int]) -> Contributions:
    """Per example (right, 1): accuracy."""
    rows = np.array([[c, 1] for c in correct], dtype=np.int64)
    return Contributions(rows, lambda sums: float(sums[0]) / float(sums[1]))


def test_the_seed_interval_is_students_t_by_hand() -> None:
    low, high = t_interval([1.0, 2.0, 3.0])  # type: ignore[misc]
    half = 4.302652729911275 / np.sqrt(3)  # t(0.975, df=2) × sd 1 / √3
    assert low == pytest.approx(2 - half) and high == pytest.approx(2 + half)
    assert t_interval([1.0]) is None


def test_identical_models_differ_by_exactly_zero_and_are_not_significant() -> None:
    rng = np.random.default_rng(0)
    same = _accuracy(list(rng.integers(0, 2, 500)))
    result = compare_pair("green", "base", "accuracy", {1: (0.7, 0.7), 2: (0.6, 0.6)}, {1: (same, same), 2: (same, same)})
    assert result.differences == [0.0, 0.0] and result.mean == 0.0
    assert result.seed_interval == (0.0, 0.0) and result.bootstrap_interval == (0.0, 0.0)
    assert not result.significant
    assert result.verdict().endswith("not significant at 95%")


def test_a_clear_gain_is_inside_its_interval_and_significant_a_tiny_one_is_not() -> None:
    base = [1] * 700 + [0] * 300
    better = [1] * 800 + [0] * 200  # right wherever base is, and on 100 more: +0.10
    result = compare_pair("green", "base", "accuracy", {1: (0.8, 0.7)}, {1: (_accuracy(better), _accuracy(base))})
    low, high = result.bootstrap_interval  # type: ignore[misc]
    assert low < 0.10 < high and low > 0.05
    assert result.significant and "one seed" in result.notes[-1]
    assert result.verdict(unit="accuracy").startswith("green vs base: +10.00 accuracy [")
    tiny = base.copy()
    tiny[700], tiny[5] = 1, 0  # one example gained, one lost elsewhere: a tie
    tie = compare_pair("green", "base", "accuracy", {1: (0.7, 0.7)}, {1: (_accuracy(tiny), _accuracy(base))})
    assert tie.bootstrap_interval[0] < 0 < tie.bootstrap_interval[1] and not tie.significant  # type: ignore[index]
    # Over seeds: three consistent gains, but a seed interval that spans 0 keeps it "not significant".
    spread = compare_pair("green", "base", "accuracy", {1: (0.80, 0.70), 2: (0.70, 0.72), 3: (0.75, 0.70)},
                          {s: (_accuracy(better), _accuracy(base)) for s in (1, 2, 3)})
    assert spread.bootstrap_interval[0] > 0 and spread.seed_interval[0] < 0 < spread.seed_interval[1]  # type: ignore[index]
    assert not spread.significant


def test_the_bootstrap_is_paired() -> None:
    """Both models are scored on the same resampled examples: the hard examples cancel out.

    The variant is right on the base's right examples plus 20 more; resampled
    independently the two scores wander apart by several points, resampled
    together the difference moves only with those 20 examples.
    """
    rng = np.random.default_rng(1)
    base = list(rng.integers(0, 2, 1000))
    wrong = [i for i, c in enumerate(base) if c == 0]
    variant = base.copy()
    for i in wrong[:20]:
        variant[i] = 1
    (low, high), draws = paired_bootstrap([_accuracy(variant)], [_accuracy(base)], replicates=2000, seed=3)
    assert draws.min() >= 0  # a resample can only keep or lose the 20 gains: never a loss
    rows_a = np.random.default_rng(4).integers(0, 1000, size=(2000, 1000))
    rows_b = np.random.default_rng(5).integers(0, 1000, size=(2000, 1000))
    unpaired = _accuracy(variant).scores(rows_a) - _accuracy(base).scores(rows_b)
    unpaired_low, unpaired_high = np.quantile(unpaired, [0.025, 0.975])
    assert (high - low) * 3 < unpaired_high - unpaired_low
    assert unpaired_low < 0 < low


def _tags(rng: random.Random, n: int) -> list[str]:
    tags, inside = [], False
    for _ in range(n):
        roll = rng.random()
        tag = "B-Disease" if roll < 0.2 else ("I-Disease" if inside and roll < 0.5 else "O")
        inside = tag != "O"
        tags.append(tag)
    return tags


def test_contributions_give_exactly_the_metrics_finetune_reports() -> None:
    rng = random.Random(7)
    gold = [_tags(rng, rng.randint(1, 20)) for _ in range(200)]
    predicted = [_tags(rng, len(g)) if rng.random() < 0.5 else list(g) for g in gold]
    assert ner_contributions(gold, predicted).score() == pytest.approx(entity_scores(gold, predicted)["f1"], abs=1e-12)
    labels = ["CPR:3", "CPR:4", "CPR:9", "false"]
    gold_c = [rng.choice(labels) for _ in range(300)]
    pred_c = [g if rng.random() < 0.6 else rng.choice(labels) for g in gold_c]
    reported = classification_scores(gold_c, pred_c, positive="CPR:4")
    for metric in ("accuracy", "micro_f1", "macro_f1"):
        assert classification_contributions(gold_c, pred_c, metric).score() == pytest.approx(reported[metric], abs=1e-12)
    assert classification_contributions(gold_c, pred_c, "f1", "CPR:4").score() == pytest.approx(reported["f1"], abs=1e-12)


# --------------------------------------------------------------------------
# The command


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from finetune_helpers import tiny_comparison

    return tiny_comparison(tmp_path_factory.mktemp("compare"))


def _cli(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    import sys

    from greenadapt.cli import main

    # The tiny models here learn little in a step or an epoch: these tests are of compare's mechanics, so they ask it to
    # go on past a run that learned nothing (failing fast has its own test).
    keep_going = ["--keep-going"] if args and args[0] == "compare" and "--keep-going" not in args else []
    monkeypatch.setattr(sys, "argv", ["greenadapt", *args, *keep_going, "--quiet"])
    with pytest.raises(SystemExit) as done:
        main()
    captured = capsys.readouterr()
    return int(done.value.code or 0), captured.out, captured.err


def _two_models_two_seeds(setup: dict[str, Path], out: Path, *recipe: str) -> list[str]:
    return ["compare", "--task", "ner", "--train", str(setup["train"]), "--test", str(setup["test"]),
            "--model", f"base={setup['base']}", "--model", f"green={setup['green']}", "--seeds", "1,2", *recipe,
            "--batch-size", "8", "--device", "cpu", "--out", str(out), "--bootstrap", "200"]


@pytest.mark.slow
def test_compare_fine_tunes_every_model_on_every_seed_and_pairs_them(setup: dict[str, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    args = _two_models_two_seeds(setup, out, "--epochs", "3", "--lr", "1e-2")  # a recipe the tiny models learn from: a verdict
    code, stdout, err = _cli(args, monkeypatch, capsys)
    assert code == 0, err
    lines = stdout.splitlines()
    assert lines[0].split()[:2] == ["variant", "seeds"] and lines[1].startswith("base") and lines[2].startswith("green")
    verdict = next(line for line in lines if line.startswith("green vs base: "))
    assert "over 2 seeds" in verdict and "test-set bootstrap" in verdict and verdict.endswith("at 95%")
    result = json.loads((out / "compare.json").read_text())
    green = next(v for v in result["variants"] if v["name"] == "green")
    base = next(v for v in result["variants"] if v["name"] == "base")
    assert green["headline_pool"] == "mean" and base["headline_pool"] == "general"
    assert set(green["summary"]) == {"mean", "general", "domain"}
    (pair,) = result["pairs"]
    for seed, difference in zip(pair["seeds"], pair["differences"], strict=True):
        assert difference == pytest.approx(green["scores"][str(seed)]["mean"]["f1"] - base["scores"][str(seed)]["general"]["f1"])
    assert pair["bootstrap_replicates"] == 200 and pair["seed_interval95"] is not None
    assert green["finetune_cost"]["cpu_seconds"] > 0
    # What proves a pair (issue 91): the data files' and models' SHA-256, the precision each run used, the versions
    import hashlib

    provenance = result["provenance"]
    assert provenance["data_sha256"] == {role: hashlib.sha256(setup[role].read_bytes()).hexdigest() for role in ("train", "test")}
    assert provenance["precision_used"] == {"base": "fp32", "green": "fp32"}  # auto on a CPU test run: resolved, not "auto"
    digests = provenance["models_sha256"]
    assert len(digests["base"]) == 64 and digests["base"] != digests["green"]
    assert provenance["libraries"]["torch"] and provenance["libraries"]["greenadapt"]
    # The run folders are finetune stages: a rerun trains nothing and gives the same result.
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/seed-*/manifest.json")}
    assert len(stamps) == 4
    code, again, err = _cli(args, monkeypatch, capsys)
    assert code == 0 and again == stdout, err
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/seed-*/manifest.json")} == stamps
    # --json: the same document as compare.json
    code, as_json, _ = _cli([*args, "--json"], monkeypatch, capsys)
    assert json.loads(as_json)["pairs"][0]["differences"] == pair["differences"]
    # Another recipe in the same folder is refused, never paired with the runs of the old one.
    code, _, err = _cli([("2" if i and args[i - 1] == "--epochs" else a) for i, a in enumerate(args)], monkeypatch, capsys)
    assert code == 4 and "made with other inputs or options" in err and len(err.strip().splitlines()) == 1, err
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/seed-*/manifest.json")} == stamps


@pytest.mark.slow
def test_parallel_runs_give_the_same_scores_as_one_at_a_time(setup: dict[str, Path], tmp_path: Path) -> None:
    import greenadapt

    common = {"task": "ner", "train": setup["train"], "test": setup["test"], "models": {"base": str(setup["base"]),
                                                                                        "green": str(setup["green"])},
              "seeds": [3, 4], "epochs": 1, "batch_size": 8, "device": "cpu", "bootstrap": 200, "keep_going": True}
    one = greenadapt.compare(**common, out=tmp_path / "one")  # type: ignore[arg-type]
    two = greenadapt.compare(**common, out=tmp_path / "two", parallel=2)  # type: ignore[arg-type]
    assert [v.scores for v in one.variants] == [v.scores for v in two.variants]
    # Two workers trained the four runs: each started once and took run after run, each run's log in its own file.
    logs = sorted((tmp_path / "two").glob("*/seed-*.log"))
    assert len(logs) == 4
    workers = [re.search(r"worker (\d+): (\S+) seed (\d+)", log.read_text()) for log in logs]
    assert all(workers) and {(m[2], m[3]) for m in workers if m} == {(v, s) for v in ("base", "green") for s in ("3", "4")}
    assert len({m[1] for m in workers if m}) <= 2 and os.getpid() not in {int(m[1]) for m in workers if m}
    assert all("read 32 examples" in log.read_text() for log in logs)
    assert "green vs base" in repr(one) and len(repr(one)) < 400


def test_bad_options_are_refused_before_any_training(setup: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    base = ["compare", "--task", "ner", "--train", str(setup["train"]), "--test", str(setup["test"]), "--out", str(tmp_path / "cmp")]
    for extra, says in [
        (["--model", f"base={setup['base']}"], "at least two"),
        (["--model", f"a={setup['base']}", "--model", f"a={setup['green']}"], "share a name"),
        (["--model", f"base={setup['base']}", "--model", f"green={setup['green']}", "--against", "dapt"],
         "--against 'dapt' names no --model"),
        (["--model", f"base={setup['base']}", "--model", f"green={setup['green']}", "--seeds", "1,1"], "distinct"),
        (["--model", f"base={setup['base']}", "--model", str(setup["green"])], "is not NAME=MODEL"),
        (["--model", f"base={setup['base']}", "--model", f"green={tmp_path / 'nothing'}"], "nothing"),
    ]:
        code, _, err = _cli([*base, *extra], monkeypatch, capsys)
        assert code in (2, 3) and says in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "cmp").exists()


@pytest.mark.slow
def test_a_run_made_by_an_explicit_finetune_of_the_same_recipe_is_reused(setup: dict[str, Path], tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The study script's run folders (`finetune --mix 0.5 --pool mean --seed S`) are compare's own stages."""
    out = tmp_path / "cmp"
    recipe = ["--task", "ner", "--train", str(setup["train"]), "--test", str(setup["test"]), "--epochs", "1", "--batch-size", "8",
              "--device", "cpu"]
    code, _, err = _cli(["finetune", *recipe, "--model", str(setup["green"]), "--mix", "0.5", "--pool", "mean", "--seed", "4",
                         "--save-every", "100", "--resume", "--out", str(out / "green" / "seed-4")], monkeypatch, capsys)
    assert code == 0, err
    made = (out / "green" / "seed-4" / "manifest.json").stat().st_mtime_ns
    code, _, err = _cli(["compare", *recipe, "--model", f"base={setup['base']}", "--model", f"green={setup['green']}",
                         "--seeds", "4", "--bootstrap", "200", "--out", str(out)], monkeypatch, capsys)
    assert code == 0, err
    assert (out / "green" / "seed-4" / "manifest.json").stat().st_mtime_ns == made


@pytest.mark.slow
def test_adapt_methods_become_variants_adapted_from_the_baseline(setup: dict[str, Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import build_tiny_bert

    model = build_tiny_bert(tmp_path / "model")
    corpus = tmp_path / "corpus.txt"
    words = "patients with tachycardia and leukemia were treated the insulin kinase study of cells".split()
    corpus.write_text("\n".join(" ".join(words[i % 7 :] + words[: i % 7]) for i in range(300)) + "\n")
    out = tmp_path / "cmp"
    args = ["compare", "--task", "ner", "--train", str(setup["train"]), "--test", str(setup["test"]), "--model", f"base={model}",
            "--corpus", str(corpus), "--adapt-methods", "lstsq,subword-mean", "--workdir", str(tmp_path / "work"),
            "--seeds", "1", "--epochs", "1", "--batch-size", "8", "--device", "cpu", "--bootstrap", "200", "--out", str(out)]
    code, stdout, err = _cli(args, monkeypatch, capsys)
    assert code == 0, err
    result = json.loads((out / "compare.json").read_text())
    assert [v["name"] for v in result["variants"]] == ["base", "lstsq", "subword-mean"]
    assert [p["variant"] for p in result["pairs"]] == ["lstsq", "subword-mean"] and "lstsq vs base: " in stdout
    for method in ("lstsq", "subword-mean"):
        variant = next(v for v in result["variants"] if v["name"] == method)
        assert variant["model"] == str(out / "adapted" / method) and variant["headline_pool"] == "mean"
        assert variant["adaptation_cost"]["cpu_seconds"] > 0  # from the w2v/align/expand manifests it was made through
    made = {p: p.stat().st_mtime_ns for p in (out / "adapted").glob("*/manifest.json")}
    code, _, err = _cli(args, monkeypatch, capsys)  # a rerun reuses the adapted models and the runs
    assert code == 0 and {p: p.stat().st_mtime_ns for p in (out / "adapted").glob("*/manifest.json")} == made, err
    code, _, err = _cli([a for a in args if a not in ("--corpus", str(corpus))], monkeypatch, capsys)
    assert code == 2 and "--adapt-methods and --corpus go together" in err


def test_qa_contributions_give_exactly_the_f1_qa_reports() -> None:
    from greenadapt.comparison.examples import qa_contributions
    from greenadapt.data.squad_metrics import evaluate

    golds = {"q1": ["a fast heart rate"], "q2": ["insulin", "the insulin"], "q3": ["kinase"], "q4": ["cells"]}
    predictions = {"q1": "fast heart rate", "q2": "the insulin", "q3": "a kinase study"}  # q4 unanswered: 0
    assert qa_contributions(predictions, golds).score() == pytest.approx(evaluate(predictions, golds)["f1"] / 100)


@pytest.mark.slow
def test_qa_models_are_compared_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import build_tiny_bert
    from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file

    base = build_tiny_bert(tmp_path / "base", head="qa")
    green = build_tiny_expanded_qa(tmp_path / "green")
    qas = [(f"q{i}", "what is tachycardia ?", [("a fast heart rate", 15)]) for i in range(8)]
    data = squad_file(tmp_path / "squad.json", [{"paragraphs": [paragraph("tachycardia is a fast heart rate .", *qas)]}])
    out = tmp_path / "cmp"
    code, stdout, err = _cli(["compare", "--task", "qa", "--train", str(data), "--test", str(data), "--model", f"base={base}",
                              "--model", f"green={green}", "--seeds", "1,2", "--epochs", "15", "--lr", "0.01", "--batch-size", "4",
                              "--device", "cpu",
                              "--bootstrap", "200", "--out", str(out)], monkeypatch, capsys)
    assert code == 0, err
    result = json.loads((out / "compare.json").read_text())
    green_variant = next(v for v in result["variants"] if v["name"] == "green")
    assert result["metric"] == "f1" and set(green_variant["scores"]) == {"1", "2"}
    (pair,) = result["pairs"]
    assert pair["bootstrap_interval95"] is not None and len(pair["differences"]) == 2 and "green vs base: " in stdout
    for seed, difference in zip(pair["seeds"], pair["differences"], strict=True):
        mine = green_variant["scores"][str(seed)][green_variant["headline_pool"]]["f1"]
        assert 0.0 < mine <= 1.0  # the models learned the answer; QA's percentages as the other tasks' fractions
        base_variant = next(v for v in result["variants"] if v["name"] == "base")
        assert difference == pytest.approx(mine - base_variant["scores"][str(seed)][base_variant["headline_pool"]]["f1"])


def test_a_cut_qa_run_of_compare_resumes_from_its_checkpoint(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """compare gives a QA run the checkpoints every task's run keeps (--save-every, --resume): a run cut after a
    checkpoint continues from it when compare starts it again, and ends as the uncut run does."""
    import greenadapt
    from finetune_helpers import comparison
    from interrupt_helpers import Crash, CrashAt
    from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file
    from safetensors.numpy import load_file

    from greenadapt.comparison.recipe import finetune_arguments

    green = build_tiny_expanded_qa(tmp_path / "green")
    qas = [(f"q{i}", "what is tachycardia ?", [("a fast heart rate", 15)]) for i in range(8)]
    data = squad_file(tmp_path / "squad.json", [{"paragraphs": [paragraph("tachycardia is a fast heart rate .", *qas)]}])
    options = comparison(tmp_path / "cmp", task="qa", train=data, test=data, models=(("base", str(green)), ("green", str(green))),
                         max_steps=6, batch_size=4, max_length=32, device="cpu", save_every=2)

    def run(folder: str, **extra: Any) -> Any:
        return greenadapt.finetune(**finetune_arguments(options, str(green), 1, tmp_path / folder, name="green"), **extra)

    run("uncut", progress=False)
    with pytest.raises(Crash):
        run("cut", progress=CrashAt(5))
    with caplog.at_level("INFO", logger="greenadapt"):
        run("cut", progress=False)
    assert any("resuming from" in record.getMessage() for record in caplog.records)
    uncut, resumed = load_file(str(tmp_path / "uncut" / "model.safetensors")), load_file(str(tmp_path / "cut" / "model.safetensors"))
    for key, value in uncut.items():
        np.testing.assert_allclose(resumed[key], value, rtol=0, atol=1e-6, err_msg=key)


def test_compare_passes_entity_type_and_max_steps_to_every_run(setup: dict[str, Path], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """What finetune's warning suggests (--entity-type) and its --max-steps, taken by compare for every model and seed."""
    out = tmp_path / "cmp"
    code, _, err = _cli(["compare", "--task", "ner", "--train", str(setup["train"]), "--test", str(setup["test"]),
                         "--model", f"base={setup['base']}", "--model", f"green={setup['green']}", "--seeds", "1",
                         "--max-steps", "2", "--entity-type", "Disease", "--batch-size", "8", "--device", "cpu",
                         "--bootstrap", "200", "--out", str(out)], monkeypatch, capsys)
    assert code == 0, err
    for name in ("base", "green"):
        manifest = json.loads((out / name / "seed-1" / "manifest.json").read_text())
        assert manifest["config"]["train"]["max_steps"] == 2
        assert set(manifest["stats"]["labels"]) == {"O", "B-Disease", "I-Disease"}
    code, _, err = _cli(["compare", "--task", "classify", "--train", str(setup["train"]), "--test", str(setup["test"]),
                         "--model", f"base={setup['base']}", "--model", f"green={setup['green']}", "--entity-type", "Disease",
                         "--out", str(tmp_path / "cmp2")], monkeypatch, capsys)
    assert code == 2 and "--entity-type is for --task ner" in err, err


def test_one_adapted_model_is_compared_with_the_model_it_was_made_from(setup: dict[str, Path], tmp_path: Path, tiny_bert: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from greenadapt.api import adapt
    from greenadapt.comparison.folders import recorded_base_model

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("patients with tachycardia and leukemia were treated with insulin in the study of cells\n" * 60)
    adapted = adapt([str(corpus)], model=str(tiny_bert), workdir=tmp_path / "w", dim=8, min_count=1, min_count_new=1, epochs=1,
                    workers=1).expand.path
    assert Path(str(recorded_base_model(str(adapted)))).resolve() == tiny_bert.resolve()
    assert recorded_base_model(str(tiny_bert)) is None  # a model greenadapt did not make names no base
    out = tmp_path / "cmp"
    code, _, err = _cli(["compare", "--task", "ner", "--train", str(setup["train"]), "--test", str(setup["test"]),
                         "--model", f"green={adapted}", "--seeds", "1", "--max-steps", "1", "--batch-size", "8", "--device", "cpu",
                         "--bootstrap", "200", "--out", str(out)], monkeypatch, capsys)
    assert code == 0, err
    result = json.loads((out / "compare.json").read_text())
    assert [v["name"] for v in result["variants"]] == ["base", "green"]
    assert Path(result["variants"][0]["model"]).resolve() == tiny_bert.resolve()
    assert result["pairs"][0]["variant"] == "green"
    code, _, err = _cli(["compare", "--task", "ner", "--train", str(setup["train"]), "--test", str(setup["test"]),
                         "--model", f"plain={tiny_bert}", "--out", str(tmp_path / "cmp2")], monkeypatch, capsys)
    assert code == 2 and "at least two --model" in err, err


def test_runs_that_learned_nothing_are_named_and_no_verdict_is_given() -> None:
    from greenadapt.comparison.health import collapse_notes, degenerate

    assert degenerate("ner", [["B-D", "O"]], [["O", "O"], ["O"]]) == "tagged no entity"
    assert degenerate("ner", [["B-D", "O", "O"]], [["B-D", "O", "O"]]) is None  # the entity found, words better than all-O
    # issue 65, point 1: entities predicted at random (a random head): none of them right (issue 72: F1 under 10 is no verdict)
    assert degenerate("ner", [["B-D", "O", "O", "O"]], [["O", "B-D", "B-D", "O"]]) == "reached entity F1 0.0 (0 of 1 gold entities)"
    # an entity found among words tagged no better than all-O (issue 72: at the floor, not only below it)
    assert degenerate("ner", [["B-D", "O", "O"]],
                      [["B-D", "O", "I-D"]]) == "tagged words with accuracy 0.67, at the 0.67 of tagging every word 'O'"
    assert degenerate("classify", ["a", "b", "a"], ["a", "a", "a"]) == "gave every test example the label 'a'"
    assert degenerate("classify", ["a", "a"], ["a", "a"]) is None  # one gold label: one predicted label is right
    assert degenerate("classify", ["a", "b"], ["a", "b"]) is None
    notes = collapse_notes({"base": {1: "tagged no entity", 3: "tagged no entity"}, "green": {}}, "green", "base")
    assert notes == ["not a verdict: base tagged no entity on seeds 1, 3: a run that learned nothing "
                     "(train longer (--epochs), try another --lr, or check the training file's labels)"]
    assert collapse_notes({"base": {}, "green": {}}, "green", "base") == []


@pytest.mark.slow
def test_a_collapsed_baseline_is_named_under_the_verdict_and_in_compare_json(setup: dict[str, Path], tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 57, point 2: base tagged no entity, so "green vs base: +16.83 F1" is no verdict, and compare says so."""
    args = _two_models_two_seeds(setup, out := tmp_path / "cmp", "--max-steps", "2")
    first = _cli(args, monkeypatch, capsys)
    stdout = first[1]
    assert first[0] == 0, first[2]
    assert not any("not a verdict" in note for note in json.loads((out / "compare.json").read_text())["pairs"][0]["notes"]) or \
        "not a verdict" in stdout  # whatever these tiny runs learned, the notes and the output agree
    # Seed 2 of base "tags no entity": compare reads its predictions as a run that learned nothing leaves them
    # (its files are checksummed by its manifest, so they are changed as they are read, not on disk).
    from greenadapt.comparison import run as compare_run

    real = compare_run.read_by_pool

    read: list[Path] = []

    def collapsed_base(folder: Path) -> dict[str, Any] | None:
        read.append(folder)
        by_pool = real(folder)
        if by_pool is not None and folder == out / "base" / "seed-2":
            by_pool["pools"]["general"] = [["O"] * len(sentence) for sentence in by_pool["pools"]["general"]]
        return by_pool

    monkeypatch.setattr(compare_run, "read_by_pool", collapsed_base)
    code, stdout, err = _cli(args, monkeypatch, capsys)
    assert code == 0, err
    (pair,) = json.loads((out / "compare.json").read_text())["pairs"]
    notes = [note for note in pair["notes"] if note.startswith("not a verdict")]
    assert notes and "base tagged no entity" in notes[0] and " 2:" in notes[0] and "--epochs" in notes[0]
    assert sorted(read) == sorted(set(read)) and len(read) == 4  # each run's predictions read once (2 models x 2 seeds)
    lines = stdout.splitlines()
    verdict = next(i for i, line in enumerate(lines) if line.startswith("green vs base: "))
    assert lines[verdict + 1].strip() == notes[0]
    assert "base tagged no entity" in err  # the warning, on stderr as well (--quiet keeps warnings)
    # Issue 57, point 4: `info` describes a compare folder (it has compare.json, no manifest).
    code, shown, err = _cli(["info", str(out)], monkeypatch, capsys)
    assert code == 0, err
    assert "kind        compare" in shown and f"verdict     {lines[verdict]}" in shown and f"note        {notes[0]}" in shown
    base_row = next(line for line in shown.splitlines() if line.startswith("  variant     base "))
    assert "(2 seeds)" in base_row and "(general pooling)" in base_row
    code, as_json, err = _cli(["info", str(out), "--json"], monkeypatch, capsys)
    assert json.loads(as_json)["verdicts"] == [lines[verdict]] and [v["name"] for v in json.loads(as_json)["variants"]] == ["base", "green"]


def test_compare_stops_at_the_first_run_that_learned_nothing_unless_asked_to_go_on(setup: dict[str, Path], tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 65, point 1: a learning rate that teaches nothing (a random head tags hundreds of entities, at a word
    accuracy below always answering O) stops the comparison after its first run, in one line that says why."""
    import sys

    from greenadapt.cli import main

    args = _two_models_two_seeds(setup, tmp_path / "cmp", "--epochs", "1", "--lr", "1e-9")
    monkeypatch.delenv("GREENADAPT_KEEP_GOING", raising=False)
    monkeypatch.setattr(sys, "argv", ["greenadapt", *args, "--quiet"])  # not _cli: it would add --keep-going
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert done.value.code == 4 and "compare stopped: base seed 1" in err and "learned nothing" in err
    assert "3 fine-tuning(s) not started" in err
    assert "--keep-going" in err and "--lr" in err
    assert sorted(p.name for p in (tmp_path / "cmp").glob("*/seed-*") if p.is_dir()) == ["seed-1"]  # one run, the rest never started
    code, stdout, err = _cli([*args, "--keep-going"], monkeypatch, capsys)
    assert code == 0, err
    assert len(list((tmp_path / "cmp").glob("*/seed-*/manifest.json"))) == 4 and "not a verdict" in stdout
