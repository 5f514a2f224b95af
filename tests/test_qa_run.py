"""The ``qa`` stage end to end on tiny models: outputs, pooling, errors, CLI exit codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file

from greenadapt import errors
from greenadapt.errors import ModelError, UsageError
import greenadapt
from greenadapt.inference.qa.settings import AnswerSpanSettings

PAPER = (
    "Tachycardias in covid patients. The heart rate of patients with coronavirus infection was high, "
    "and myocarditis was associated with increased risk. Sleep study results: 3.5% of cells (n=12) "
    "showed expression of the protein; ventilation was the main treatment for the disease. "
) * 6


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from conftest import build_tiny_bert

    root = tmp_path_factory.mktemp("qa-run")
    return {
        "plain": build_tiny_bert(root / "plain", head="qa"),
        "expanded": build_tiny_expanded_qa(root / "expanded"),
        "base": build_tiny_bert(root / "base", head="base"),
    }


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("qa-data")
    return squad_file(
        folder / "papers.json",
        [
            {
                "paragraphs": [
                    paragraph(
                        PAPER,
                        ("q1", "What was high?", [("The heart rate", 32)]),
                        ("q2", "What was the main treatment?", [("ventilation", PAPER.index("ventilation") + 4)]),
                    ),
                    paragraph("Short one: fever.", ("q3", "What?", [("fever", 11)])),
                ]
            },
            {"paragraphs": [paragraph("", ("q4", "Empty?", [("x", 0)]))]},
        ],
    )


def _read(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text(encoding="utf-8"))


def test_outputs_are_exact_substrings_with_a_softmax_nbest(models: dict[str, Path], data: Path, tmp_path: Path) -> None:
    options = dict(max_length=48, batch_size=3, n_best=7, max_answer_chars=60)
    outcome = greenadapt.qa(data, model=str(models["expanded"]), **options, out=tmp_path / "out")
    assert not outcome.skipped and outcome.manifest["kind"] == "qa"
    assert outcome.manifest["config"]["pool"] == "mean"
    predictions = _read(outcome.path, "predictions.json")
    nbest = _read(outcome.path, "nbest.json")
    metrics = _read(outcome.path, "metrics.json")
    contexts = {"q1": PAPER, "q2": PAPER, "q3": "Short one: fever."}
    assert list(predictions) == ["q1", "q2", "q3", "q4"] and predictions["q4"] == "" and nbest["q4"] == []
    for qid, context in contexts.items():
        answers = nbest[qid]
        assert predictions[qid] == answers[0]["text"] and 0 < len(answers) <= 7
        assert abs(sum(a["probability"] for a in answers) - 1.0) < 1e-6
        for answer in answers:
            assert context[answer["start"] : answer["end"]] == answer["text"] and len(answer["text"]) <= 60
    assert metrics["questions"] == 4 and metrics["scored_questions"] == 4
    assert metrics["empty_context_questions"] == 1
    assert metrics["gold_offsets"] == {"gold_answers": 4, "mismatched": 2, "repaired": 1, "text_not_in_context": 1}
    assert 0.0 <= metrics["f1"] <= 100.0
    stats = outcome.manifest["stats"]
    # T̂ keeps the domain words whole, so it needs fewer wordpieces for the same papers.
    assert stats["context_wordpieces"]["domain"] < stats["context_wordpieces"]["general"]
    again = greenadapt.qa(data, model=str(models["expanded"]), **options, out=tmp_path / "out")
    assert again.skipped


def test_precision_reaches_the_answering_and_the_fingerprint_only_when_set(models: dict[str, Path], data: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`qa --precision` is predict's: answering runs in it (fp32 where auto would be bf16); a folder answered at the
    default keeps the fingerprint it had before the option, and a rerun in another precision is refused, not skipped."""
    import torch
    from qa_helpers import record_runner_dtypes

    from greenadapt.errors import OutputExistsError

    dtypes = record_runner_dtypes(monkeypatch)
    options = dict(model=str(models["expanded"]), max_length=48, limit=2, runtime="torch", device="cpu", progress=False)
    auto = greenadapt.qa(data, out=tmp_path / "auto", **options)  # type: ignore[arg-type]
    fp32 = greenadapt.qa(data, out=tmp_path / "fp32", precision="fp32", **options)  # type: ignore[arg-type]
    assert dtypes == [torch.bfloat16, None]
    assert "precision" not in auto.manifest["config"] and fp32.manifest["config"]["precision"] == "fp32"
    with pytest.raises(OutputExistsError, match="precision"):
        greenadapt.qa(data, out=tmp_path / "auto", precision="fp32", **options)  # type: ignore[arg-type]


def test_mean_pool_is_the_average_of_both_tokenizers(models: dict[str, Path]) -> None:
    import torch

    from greenadapt.artifacts.model_folder import load_tokenizers
    from greenadapt.artifacts.pretrained import resolve_model
    from greenadapt.corpus.words import split_words
    from greenadapt.data.squad import Document, Question
    from greenadapt.inference.qa.infer import QaRunner
    from greenadapt.inference.qa.model import load_qa_model
    from greenadapt.inference.qa.answering import answer_questions

    ref = resolve_model(models["expanded"])
    runner = QaRunner(load_qa_model(ref, torch.device("cpu")), torch.device("cpu"))
    tokenizers = load_tokenizers(ref.path)
    document = Document(PAPER, None, "d", (Question("q", "What was high?", None, False, "q"),))
    words = split_words(PAPER)

    def best(pool: str, n_best: int) -> list[dict]:
        chosen = tokenizers.for_pool(pool)
        [(_, answers)] = answer_questions(
            runner, [document], chosen, max_length=40, batch_size=4, n_best=n_best, spans=AnswerSpanSettings(max_answer_chars=10_000)
        )
        return answers

    # With an unlimited span length and n-best over every pair, each word's logits can be read back.
    def word_logits(pool: str) -> tuple[np.ndarray, np.ndarray]:
        start = np.full(len(words), np.nan)
        end = np.full(len(words), np.nan)
        index = {int(s): i for i, s in enumerate(words.starts)}
        index_end = {int(e): i for i, e in enumerate(words.ends)}
        for answer in best(pool, n_best=len(words) * (len(words) + 1) // 2):
            start[index[answer["start"]]] = answer["start_logit"]
            end[index_end[answer["end"]]] = answer["end_logit"]
        return start, end

    general, domain, mean = word_logits("general"), word_logits("domain"), word_logits("mean")
    assert not np.isnan(general[0]).any()
    np.testing.assert_allclose(mean[0], (general[0] + domain[0]) / 2, atol=1e-5)
    np.testing.assert_allclose(mean[1], (general[1] + domain[1]) / 2, atol=1e-5)
    assert not np.allclose(general[0], domain[0])  # the two tokenizations really differ


def test_plain_model_defaults_to_general_and_refuses_mean(models: dict[str, Path], data: Path, tmp_path: Path) -> None:
    outcome = greenadapt.qa(data, model=str(models["plain"]), max_length=64, limit=1, out=tmp_path / "plain")
    assert outcome.manifest["config"]["pool"] == "general" and outcome.manifest["stats"]["questions"] == 1
    for pool in ("mean", "domain"):
        with pytest.raises(UsageError, match="only one"):
            greenadapt.qa(data, model=str(models["plain"]), pool=pool, out=tmp_path / "x")


def test_model_without_qa_head_says_how_to_get_one(models: dict[str, Path], data: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelError) as caught:
        greenadapt.qa(data, model=str(models["base"]), out=tmp_path / "x")
    assert "no question-answering head" in caught.value.message and "SQuAD" in (caught.value.hint or "")


def test_headless_checkpoint_without_architectures_is_detected(models: dict[str, Path], tmp_path: Path, data: Path) -> None:
    import shutil

    folder = tmp_path / "anon"
    shutil.copytree(models["base"], folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("architectures")
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="qa_outputs"):
        greenadapt.qa(data, model=str(folder), out=tmp_path / "x")


def _main(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    import logging

    from greenadapt.cli import main

    monkeypatch.setattr(sys, "argv", ["greenadapt", *argv])
    try:
        with pytest.raises(SystemExit) as caught:
            main()
    finally:
        # The CLI logs to the stderr capsys swaps in; later tests must not write to it once closed.
        root = logging.getLogger()
        for handler in [h for h in root.handlers if getattr(h, "_greenadapt", False)]:
            root.removeHandler(handler)
    return int(caught.value.code or 0)


def test_cli_success_and_typed_errors(
    models: dict[str, Path], data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli"
    code = _main(["qa", "--model", str(models["plain"]), "--data", str(data), "--out", str(out), "--limit", "2", "-q", "--max-length",
                  "64"], monkeypatch)
    captured = capsys.readouterr()
    assert code == 0 and captured.out.startswith("qa: 2 questions, pool general; EM ")
    assert (out / "predictions.json").is_file()

    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n  {"paragraphs": [}\n]}', encoding="utf-8")
    cases = [
        (["--model", str(models["plain"]), "--data", str(broken)], errors.EXIT_BAD_INPUT, f"{broken}:2:"),
        (["--model", str(models["base"]), "--data", str(data)], errors.EXIT_BAD_INPUT, "no question-answering head"),
        (["--model", str(models["plain"]), "--data", str(data), "--pool", "mean"], errors.EXIT_USAGE, "--pool general"),
        (["--model", str(models["plain"]), "--data", str(data), "--max-length", "4096"], errors.EXIT_USAGE, "position"),
        (["--model", str(models["plain"]), "--data", str(tmp_path / "none.json")], errors.EXIT_BAD_INPUT, "not found"),
        (["--model", str(models["plain"]), "--data", str(data), "--out", str(out), "--limit", "1", "--max-length", "64"],
         errors.EXIT_STAGE_CONFLICT, "--force"),
    ]
    for extra, expected, fragment in cases:
        argv = ["qa", *extra] if "--out" in extra else ["qa", *extra, "--out", str(tmp_path / "o")]
        code = _main([*argv, "-q"], monkeypatch)
        err = capsys.readouterr().err
        failures = [line for line in err.splitlines() if line.startswith("error: ")]
        assert code == expected, err
        assert len(failures) == 1 and fragment in failures[0] and "Traceback" not in err, err


@pytest.mark.integration
def test_minilm_with_a_fresh_qa_head_on_one_covid_question(shared_data: Path, minilm_path: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForQuestionAnswering.from_pretrained(minilm_path)
    model.save_pretrained(tmp_path / "minilm-qa")
    AutoTokenizer.from_pretrained(minilm_path).save_pretrained(tmp_path / "minilm-qa")
    covid = shared_data / "qa" / "covid-qa-200423.json"
    outcome = greenadapt.qa(covid, model=str(tmp_path / "minilm-qa"), limit=1, max_length=256, out=tmp_path / "out")
    nbest = _read(outcome.path, "nbest.json")
    [(qid, answers)] = nbest.items()
    assert len(answers) == 20 and all(len(a["text"]) <= 500 for a in answers)
    pieces = outcome.manifest["stats"]["context_wordpieces"]["general"]
    assert pieces > 2_000 and outcome.manifest["stats"]["windows"] >= pieces // 127
