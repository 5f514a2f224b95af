"""Fine-tuning that does not learn is warned about, with the figures, once per kind."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from finetune_helpers import build_tiny_expanded, write_classify_file, write_ner_file

from greenadapt.inference.settings import LoadSettings
from greenadapt.compute.health import PATIENCE, WINDOW, TrainingHealth


def test_a_flat_loss_and_a_zero_dev_score_are_warned_about_after_patience() -> None:
    health = TrainingHealth()
    for _ in range(3 * WINDOW):
        health.record_loss(1.0)
    assert health.evaluated(0.0) == []  # too early: one evaluation
    new = health.evaluated(0.0)
    assert len(new) == 2 and PATIENCE == 2
    assert "dev score has stayed 0 after 2 evaluations" in new[0] and "--lr" in new[0]
    assert "has not fallen after 60 steps (mean 1.0000" in new[1]
    assert health.evaluated(0.0) == []  # each kind once


def test_a_learning_run_gets_no_warning() -> None:
    health = TrainingHealth()
    for step in range(3 * WINDOW):
        health.record_loss(2.0 / (1 + step))
    health.evaluated(0.1)
    assert health.evaluated(0.3) == [] and health.warnings == []


def test_finetune_records_the_warning_in_its_manifest(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from greenadapt import finetune

    model = build_tiny_expanded(tmp_path / "model")
    train = write_ner_file(tmp_path / "train.tsv", 48, seed=1)
    dev = write_ner_file(tmp_path / "dev.tsv", 16, seed=2)
    options = dict(task="ner", model=str(model), train=train, dev=dev, out=tmp_path / "run", device="cpu",
                              **dict(lr=1e-12, epochs=4, batch_size=4))
    with caplog.at_level(logging.WARNING, logger="greenadapt"):
        outcome = finetune(**options)
    warnings = next(iter(outcome.manifest["stats"]["training"].values()))["warnings"]
    assert any("training loss has not fallen" in w for w in warnings), warnings
    assert any("has not fallen" in r.getMessage() for r in caplog.records)
    json.dumps(warnings)


def test_a_constant_classifier_is_named_whatever_its_accuracy() -> None:
    from greenadapt.compute.health import prediction_warnings

    gold = ["neg"] * 7 + ["pos"] * 3
    constant = prediction_warnings("test", gold, ["neg"] * 10)
    assert len(constant) == 1 and "every prediction of test is 'neg'" in constant[0] and "majority-class" in constant[0]
    # Two labels predicted, yet no better than always answering 'neg' (70%): still nothing learned.
    at_majority = prediction_warnings("test", gold, ["neg"] * 6 + ["pos", "neg", "neg", "pos"])
    assert len(at_majority) == 1 and "accuracy 0.70, at the 0.70 majority-class rate (always answering 'neg')" in at_majority[0]
    assert prediction_warnings("test", gold, ["neg"] * 7 + ["pos", "pos", "neg"]) == []  # 90%: it learned something
    assert prediction_warnings("test", ["neg"] * 4, ["neg"] * 4) == []  # one gold label: no majority to beat


def test_an_ner_model_that_tags_nothing_or_one_tag_is_named() -> None:
    from greenadapt.compute.health import prediction_warnings

    gold = [["O", "B-Disease", "I-Disease"], ["B-Disease", "O"]]
    nothing = prediction_warnings("dev", gold, [["O", "O", "O"], ["O", "O"]])
    assert len(nothing) == 1 and "tags no entity in dev (2 gold entities)" in nothing[0]
    constant = prediction_warnings("dev", gold, [["I-Disease"] * 3, ["I-Disease"] * 2])
    assert len(constant) == 1 and "every word of dev is tagged 'I-Disease'" in constant[0]
    assert prediction_warnings("dev", gold, [["O", "B-Disease", "O"], ["B-Disease", "O"]]) == []


def test_a_majority_class_run_warns_in_its_summary_manifest_info_and_predict(tmp_path: Path) -> None:
    """The user's ChemProt run: 'test accuracy 36.67' headlined with no word that the model answers one class."""
    from greenadapt.artifacts.info import describe_folder, render
    from greenadapt.cli.finetune import _summary
    from greenadapt.inference.labelling import run_predict
    from greenadapt import finetune

    model = build_tiny_expanded(tmp_path / "model")
    train = write_classify_file(tmp_path / "train.jsonl", 24, seed=1)
    test = write_classify_file(tmp_path / "test.jsonl", 16, seed=2)
    options = dict(task="classify", model=str(model), train=train, test=test, out=tmp_path / "run", device="cpu",
                              **dict(lr=1e-12, epochs=1, batch_size=4))
    outcome = finetune(**options)
    warnings = outcome.manifest["stats"]["warnings"]
    assert any(w.startswith("seed 42: ") and "test" in w and "majority" in w for w in warnings), warnings
    assert "\nwarning: seed 42: " in _summary(outcome)
    info = describe_folder(outcome.path)
    assert any("majority" in w for w in info["warnings"])
    assert any(line.startswith("  warning") and "majority" in line for line in render(info).splitlines())
    predicted = run_predict(outcome.path, test, tmp_path / "pred.jsonl", options=LoadSettings(device="cpu"))
    assert predicted.metrics is not None and any("majority" in w for w in predicted.metrics["warnings"])


def test_the_report_shows_a_runs_warnings_beside_its_scores(tmp_path: Path) -> None:
    from greenadapt.reporting.collection import collect
    from greenadapt.reporting.render import html_page, markdown
    from greenadapt import finetune

    model = build_tiny_expanded(tmp_path / "model")
    train = write_classify_file(tmp_path / "train.jsonl", 16, seed=1)
    run = tmp_path / "runs" / "chemprot"
    finetune(**dict(task="classify", model=str(model), train=train, test=train, out=run, device="cpu",
                                 **dict(lr=1e-12, epochs=1, batch_size=4)))
    data = collect([tmp_path / "runs"])
    assert [w["stage"] for w in data["warnings"]] == ["runs/chemprot"] and "majority" in data["warnings"][0]["warning"]
    assert "## Warnings" in markdown(data) and "majority-class" in markdown(data)
    assert "<h2>Warnings</h2>" in html_page(data, {})


def test_a_question_answering_model_that_learned_nothing_is_named() -> None:
    from greenadapt.compute.health import answer_warnings

    golds = {"q1": ["the heart rate"], "q2": ["ventilation"], "q3": ["fever"]}
    assert "answers no question" in answer_warnings("test", golds, {"q1": "", "q2": "", "q3": ""})[0]
    assert "every question of test gets the answer 'covid' (3 questions)" in answer_warnings(
        "test", golds, {"q1": "covid", "q2": "covid", "q3": "covid"})[0]
    long_answer = "x" * 70  # quoted in one line, however long --max-answer-chars lets an answer be
    assert f"'{'x' * 59}…' (3 questions)" in answer_warnings("test", golds, dict.fromkeys(golds, long_answer))[0]
    assert "overlaps" in answer_warnings("test", golds, {"q1": "sleep study", "q2": "cells", "q3": "expression"})[0]
    # A model that answers some questions right, or only partly right, is not warned about.
    assert answer_warnings("test", golds, {"q1": "heart rate", "q2": "", "q3": "covid"}) == []
    assert answer_warnings("test", golds, {"q1": "the heart rate", "q2": "ventilation", "q3": "fever"}) == []
    # Too few questions with gold answers to judge, and one gold answer everywhere (a constant answer can be right).
    assert answer_warnings("test", {"q1": ["fever"]}, {"q1": ""}) == []
    assert answer_warnings("test", {"q1": ["fever"], "q2": ["fever"]}, {"q1": "fever", "q2": "fever"}) == []


def test_a_qa_run_answering_nothing_warns_in_its_summary_manifest_and_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The `qa` stage and QA fine-tuning record the warning (here forced: every question answered with nothing)."""
    from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file

    import greenadapt.inference.qa.answering as answering
    import greenadapt
    import greenadapt.inference.qa.run as qa_stage
    from greenadapt.artifacts.info import describe_folder, render
    from greenadapt.cli.finetune import _summary as finetune_summary
    from greenadapt.cli.qa import _summary as qa_summary
    from greenadapt import finetune

    context = "The heart rate of patients with coronavirus infection was high; ventilation was the main treatment."
    data = squad_file(tmp_path / "qa.json", [{"paragraphs": [paragraph(
        context, ("q1", "What was high?", [("The heart rate", 0)]), ("q2", "What was the treatment?",
                                                                     [("ventilation", context.index("ventilation"))]),
    )]}])
    real = answering.answer_questions

    def answering_nothing(*args, **kwargs):  # type: ignore[no-untyped-def]
        for question, _ in real(*args, **kwargs):
            yield question, []

    monkeypatch.setattr(answering, "answer_questions", answering_nothing)
    monkeypatch.setattr(qa_stage, "answer_questions", answering_nothing)
    model = build_tiny_expanded_qa(tmp_path / "model")
    trained = finetune(**dict(task="qa", model=str(model), train=data, test=data, out=tmp_path / "run", device="cpu",
                                           **dict(epochs=1, batch_size=2, lr=1e-4)))
    assert any("test" in w and "answers no question" in w for w in trained.manifest["stats"]["warnings"])
    assert "\nwarning: " in finetune_summary(trained) and "answers no question" in finetune_summary(trained)

    answered = greenadapt.qa(data, model=trained.path, device="cpu", out=tmp_path / "answers")
    assert any("answers no question of qa.json" in w for w in answered.manifest["stats"]["warnings"])  # the file it read
    assert "answers no question" in qa_summary(answered)
    assert any(line.startswith("  warning") and "answers no question" in line
               for line in render(describe_folder(answered.path)).splitlines())
