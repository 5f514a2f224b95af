"""`greenadapt finetune --task qa`: the shared options reach the QA trainer, the result is a QA model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_S, REPO
from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file

from greenadapt.errors import UsageError
from greenadapt.runners.finetune.settings import FinetuneSettings
from greenadapt.tasks import get_task

CONTEXT = (
    "The heart rate of covid patients was high. Myocarditis was associated with tachycardias. "
    "Ventilation was the main treatment for the disease in most patients. "
) * 2


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "GREENADAPT_WORKDIR": str(cwd / "work")}
    return subprocess.run(
        [sys.executable, "-m", "greenadapt", "finetune", "--task", "qa", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=HANG_S,
    )


@pytest.fixture(scope="module")
def expanded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_expanded_qa(tmp_path_factory.mktemp("qa-cli") / "model")


@pytest.fixture(scope="module")
def squad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return squad_file(
        tmp_path_factory.mktemp("qa-cli-data") / "squad.json",
        [
            {
                "paragraphs": [
                    paragraph(
                        CONTEXT,
                        ("q1", "What was high?", [("heart rate", 4)]),
                        ("q2", "What was associated with tachycardias?", [("Myocarditis", 43)]),
                        ("q3", "What was the main treatment?", [("Ventilation", 89)]),
                    )
                ]
            }
        ],
    )


@pytest.mark.slow
def test_cli_trains_a_qa_model_that_loads_and_answers(expanded: Path, squad: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import AutoModelForQuestionAnswering

    from greenadapt.cli import main

    out = tmp_path / "run"
    done = _cli(
        "--train", str(squad), "--test", str(squad), "--model", str(expanded), "--out", str(out),
        "--max-steps", "6", "--batch-size", "4", "--grad-accum", "2", "--lr", "3e-3", "--max-length", "48",
        "--doc-stride", "16", "--seed", "5", "--device", "cpu", "--json", "-q",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    manifest = json.loads(done.stdout)
    assert manifest["kind"] == "finetune" and manifest["stats"]["task"] == "qa"
    config = manifest["config"]
    assert config["task"] == {"task": "qa", "max_length": 48, "doc_stride": 16, "max_question_tokens": 64, "has_domain_tokenizer": True}
    # Set options arrive as given; the others take the QA defaults, not ner/classify's (3 epochs, 5e-5).
    assert {k: config["train"][k] for k in ("max_steps", "batch_size", "grad_accum", "lr", "seed", "epochs", "mix")} == {
        "max_steps": 6, "batch_size": 4, "grad_accum": 2, "lr": 3e-3, "seed": 5, "epochs": 2, "mix": 0.5,
    }
    assert config["pool"] == "mean" and manifest["stats"]["steps"] == 6
    test_scores = manifest["stats"]["test"]
    assert test_scores["questions"] == 3 and 0.0 <= test_scores["f1"] <= 100.0 and test_scores["pool"] == "mean"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test"]["f1"] == test_scores["f1"] and metrics["test"]["scored_questions"] == 3
    assert set(json.loads((out / "predictions" / "test.json").read_text())) == {"q1", "q2", "q3"}
    assert json.loads((out / "greenadapt_task.json").read_text())["task"] == "qa"
    assert type(AutoModelForQuestionAnswering.from_pretrained(out)).__name__ == "BertForQuestionAnswering"

    # The run folder is a model for `greenadapt qa`; `greenadapt predict` sends the user there.
    for argv, code, fragment in [
        (["qa", "--model", str(out), "--data", str(squad), "--out", str(tmp_path / "qa"), "-q"], 0, "qa: 3 questions, pool mean"),
        (["predict", "--model", str(out), "--input", str(squad), "--output", str(tmp_path / "p.json")], 2, "greenadapt qa"),
    ]:
        monkeypatch.setattr(sys, "argv", ["greenadapt", *argv])
        try:
            main()
            status = 0
        except SystemExit as exit_:
            status = exit_.code
        captured = capsys.readouterr()
        assert status == code, captured.err
        assert fragment in (captured.out if code == 0 else captured.err)


def test_cli_refuses_options_qa_has_no_use_for(expanded: Path, squad: Path, tmp_path: Path) -> None:
    # 30 is --max-words' default: typed on the command line, it is still refused.
    done = _cli("--train", str(squad), "--model", str(expanded), "--out", str(tmp_path / "r"), "--max-words", "30",
                "--label-field", "tags", cwd=tmp_path)
    assert done.returncode == 2
    err = done.stderr.strip()
    assert err.startswith("error:") and "\n" not in err and "--max-words, --label-field do not apply to --task qa" in err
    assert not (tmp_path / "r").exists()


def test_cli_refuses_a_line_based_task_file(expanded: Path, tmp_path: Path) -> None:
    ner = tmp_path / "train.tsv"
    ner.write_text("the\tO\nheart\tB-X\n")
    done = _cli("--train", str(ner), "--model", str(expanded), "-q", cwd=tmp_path)
    assert done.returncode == 2 and "SQuAD-style JSON, not a .tsv file" in done.stderr and "\n" not in done.stderr.strip()


def test_shared_options_map_onto_qa_options(squad: Path) -> None:
    qa = get_task("qa")
    base = {"task": "qa", "train": squad}
    # Options left unset (None) take QA's own defaults, not ner/classify's (3 epochs, batch 32, 5e-5).
    filled = qa.filled(FinetuneSettings(**base, lr=1e-4, pool="general"))
    assert (filled.lr, filled.epochs, filled.batch_size) == (1e-4, 2, 16)
    assert filled.pool == "general" and filled.max_length is None and filled.doc_stride is None
    filled = qa.filled(FinetuneSettings(**base))
    assert (filled.lr, filled.epochs, filled.batch_size) == (3e-5, 2, 16)
    assert filled.pool is None  # the trainer picks by the model's tokenizers
    filled = qa.filled(FinetuneSettings(**base, epochs=5, train_embeddings="new", seeds=(9,), max_length=256, doc_stride=64))
    assert (filled.epochs, filled.lr, filled.seed_list) == (5, 3e-5, (9,))
    assert filled.train_embeddings == "new" and (filled.max_length, filled.doc_stride) == (256, 64)
    with pytest.raises(UsageError, match="metric does not apply to task qa"):
        FinetuneSettings(**base, metric="f1")
    with pytest.raises(UsageError, match="one model, not one per seed"):
        FinetuneSettings(**base, seeds=(1, 2))


def test_every_task_fills_in_its_own_defaults() -> None:
    """The API leaves task-dependent options at None; each task's filled() puts its own in, given values win."""
    from greenadapt.tasks import TASKS

    for task in TASKS.values():
        filled = task.filled(FinetuneSettings(task=task.name, train=Path("x"), batch_size=7))
        assert (filled.epochs, filled.lr, filled.batch_size) == (task.defaults.epochs, task.defaults.lr, 7)
    assert (TASKS["qa"].defaults.epochs, TASKS["ner"].defaults.epochs) == (2, 3)


def test_doc_stride_is_for_qa_only(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="^doc_stride does not apply to task ner"):
        FinetuneSettings(task="ner", train=tmp_path / "x.tsv", doc_stride=32)
    with pytest.raises(UsageError, match="^max_words, doc_stride do not apply to task classify"):
        FinetuneSettings(task="classify", train=tmp_path / "x.tsv", max_words=30, doc_stride=32)
