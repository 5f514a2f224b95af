"""A researcher's week, round 5 (issue 95): a compare cut short is readable and says how to finish it, the API
imports from the clone's parent folder, and the report marks a barely-trained row and shows no spread for one seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import cli_output
from interrupt_helpers import Crash, CrashAt
from conftest import build_tiny_bert
from finetune_helpers import write_ner_file

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("week5")
    return {"root": root, "plain": build_tiny_bert(root / "plain", head="base"),
            "other": build_tiny_bert(root / "other", head="base", seed=3),
            "train": write_ner_file(root / "train.tsv", 24, seed=1), "test": write_ner_file(root / "test.tsv", 8, seed=2)}




def test_a_compare_cut_after_its_first_run_is_read_by_info_and_the_report_and_finished_by_a_rerun(
        data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A Ctrl-C (or a kill -9: the same files are left, no handler runs) after the first of four fine-tunings."""
    from greenadapt.runners.finetune import run as finetune_module

    out = tmp_path / "cmp"
    args = ["compare", "--task", "ner", "--train", str(data["train"]), "--test", str(data["test"]), "--model", f"a={data['plain']}",
            "--model", f"b={data['other']}", "--seeds", "1,2", "--max-steps", "2", "--batch-size", "8", "--device", "cpu",
            "--out", str(out), "--keep-going", "--quiet"]
    real, calls = finetune_module.run_finetune, []

    def cut(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(finetune_module, "run_finetune", cut)
    code, _, err = cli_output(args, monkeypatch, capsys)
    assert code == 130, err
    monkeypatch.setattr(finetune_module, "run_finetune", real)
    said = "not finished: 1 of 4 fine-tunings done; rerun the same command to continue"
    code, shown, err = cli_output(["info", str(out)], monkeypatch, capsys)
    assert code == 0 and said in shown, (shown, err)
    assert "  finished    a seed 1\n" in shown and "metric None" not in shown, shown  # which run is kept
    code, _, err = cli_output(["report", str(out), "--html", str(tmp_path / "r.html")], monkeypatch, capsys)
    assert code == 0 and said in (tmp_path / "r.html").read_text(), err
    calls.clear()
    monkeypatch.setattr(finetune_module, "run_finetune", cut)
    forced = [arg for arg in args if arg != "--quiet"] + ["--force"]
    code, _, err = cli_output(forced, monkeypatch, capsys)  # --force retrains the finished run, and is cut in turn
    assert code == 130 and "--force: the 1 finished fine-tuning(s) are trained again" in err and "(0 finished)" in err, err
    code, shown, err = cli_output(["info", str(out)], monkeypatch, capsys)
    assert "rerun the same command without --force to continue" in shown, shown  # with it, the finished run is redone
    monkeypatch.setattr(finetune_module, "run_finetune", real)
    code, _, err = cli_output(args, monkeypatch, capsys)  # the same command finishes it
    assert code == 0, err
    code, shown, _ = cli_output(["info", str(out)], monkeypatch, capsys)
    assert "not finished" not in shown and "verdict" in shown


def test_the_api_imports_from_the_clones_parent_folder(tmp_path: Path) -> None:
    """A script run beside a folder named greenadapt (the clone, seen from its parent) gets the installed package, not
    an empty namespace package of that folder (README's install: an editable install that puts the checkout on the
    path)."""
    (tmp_path / "greenadapt").mkdir()
    (tmp_path / "greenadapt" / "README.md").write_text("a clone's top level: no __init__.py\n")
    done = subprocess.run([sys.executable, "-c", "import greenadapt; print(greenadapt.__file__); print(callable(greenadapt.pipeline))"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    where, callable_ = done.stdout.split()
    assert Path(where).name == "__init__.py" and callable_ == "True"



def test_a_kill_after_the_save_interval_resumes_from_the_checkpoint_taken_by_time(data: dict[str, Path], tmp_path: Path,
                                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """No --save-every: the checkpoint comes from --save-minutes alone (here a tiny interval, so every step is due)."""
    import greenadapt
    from greenadapt.training.checkpoint import latest_checkpoint
    from greenadapt.training.job import checkpoint_folder

    options = {"task": "ner", "train": data["train"], "model": str(data["plain"]), "out": tmp_path / "run", "max_steps": 6,
               "batch_size": 4, "seed": 1, "device": "cpu", "entity_type": "Disease", "save_minutes": 1e-6}
    with pytest.raises(Crash):
        greenadapt.finetune(**options, progress=CrashAt(4))
    found = latest_checkpoint(checkpoint_folder(tmp_path / "run") / "seed-1")
    assert found is not None and 1 <= found[1]["step"] < 4
    with caplog.at_level("INFO", logger="greenadapt"):
        done = greenadapt.finetune(**options, resume=True, progress=False)
    assert any(f"step {found[1]['step']}" in r.getMessage() and "resuming from" in r.getMessage() for r in caplog.records)
    assert done.manifest["stats"]["training"]["1"]["steps"] == 6  # type: ignore[attr-defined]
    with pytest.raises(Crash):  # the interval off: by steps alone, and no step was due
        greenadapt.finetune(**{**options, "out": tmp_path / "off", "save_minutes": 0}, progress=CrashAt(4))
    assert latest_checkpoint(checkpoint_folder(tmp_path / "off") / "seed-1") is None


def test_predict_speaks_while_a_slow_window_runs(data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A cron log hears from predict at its heartbeat interval even while one window of documents takes long (issue
    95, item 4): here the window is made slow by hand and the interval short."""
    import time

    import greenadapt
    from greenadapt.inference import predict_text

    run = tmp_path / "run"
    greenadapt.finetune("ner", data["train"], model=str(data["plain"]), out=run, max_steps=2, seed=1, device="cpu", progress=False,
                        entity_type="Disease")
    (tmp_path / "in.txt").write_text("the patients with tachycardia\nfever and covid\n" * 5)
    real = predict_text._predict_batch

    def slow(model: object, texts: list[str]) -> list[dict[str, object]]:
        time.sleep(1.5)
        return real(model, texts)

    monkeypatch.setattr(predict_text, "_predict_batch", slow)
    monkeypatch.setattr(predict_text, "HEARTBEAT_CHECK_SECONDS", 0.05)
    monkeypatch.setattr("greenadapt.progress.FIRST_LINE_SECONDS", 0.2)
    monkeypatch.setenv("GREENADAPT_HEARTBEAT", "0.3")
    code, out, err = cli_output(["predict", str(tmp_path / "in.txt"), "-m", str(run), "-o", str(tmp_path / "out.jsonl")],
                                monkeypatch, capsys)
    assert code == 0, err
    beats = [line for line in err.splitlines() if "predicting a window of 10 documents" in line]
    assert len(beats) >= 2, err  # within the one window: ~1.5 s at 0.3 s
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 10


def test_a_changed_general_tokenizer_makes_a_qa_run_out_of_date(tmp_path: Path) -> None:
    """QA training names its model by every file, the general tokenizer's too (issue 93): a run made before the
    second view changed is not taken as up to date."""
    import json

    import greenadapt
    from greenadapt.errors import GreenAdaptError
    from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file

    context = "Heart rate was high in myocarditis. Ventilation was the main treatment of covid patients."
    data = squad_file(tmp_path / "train.json", [{"paragraphs": [paragraph(context, ("q1", "What was high?", [("Heart rate", 0)]))]}])
    model = build_tiny_expanded_qa(tmp_path / "model")
    options = {"task": "qa", "train": data, "model": str(model), "out": tmp_path / "ft", "max_length": 32, "doc_stride": 8,
               "batch_size": 4, "max_steps": 2, "seed": 3, "device": "cpu", "progress": False}
    greenadapt.finetune(**options)
    assert greenadapt.finetune(**options).skipped  # unchanged: up to date
    config = model / "general-tokenizer" / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "model_max_length": 64}))
    with pytest.raises(GreenAdaptError, match="made with other inputs or options"):
        greenadapt.finetune(**options)


def test_a_killed_qa_training_resumes_to_the_uninterrupted_runs_weights_and_scores(tmp_path: Path) -> None:
    """QA training runs in the training stage every runner uses (issue 93): checkpoints, --resume, SIGTERM."""
    import json

    import greenadapt
    import numpy as np
    from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file
    from safetensors.numpy import load_file

    context = "Heart rate was high in myocarditis. Ventilation was the main treatment of covid patients."
    qas = [(f"q{i}", "What was high?" if i % 2 else "What was the main treatment?",
            [("Heart rate", 0)] if i % 2 else [("Ventilation", 36)]) for i in range(12)]
    data = squad_file(tmp_path / "train.json", [{"paragraphs": [paragraph(context, *qas)]}])
    model = build_tiny_expanded_qa(tmp_path / "model")
    options = {"task": "qa", "train": data, "test": data, "model": str(model), "max_length": 32, "doc_stride": 8, "batch_size": 4,
               "max_steps": 8, "seed": 3, "device": "cpu", "save_every": 2, "save_minutes": 0}
    reference = greenadapt.finetune(**options, out=tmp_path / "reference", progress=False)
    with pytest.raises(Crash):
        greenadapt.finetune(**options, out=tmp_path / "run", progress=CrashAt(5))
    assert (tmp_path / "run.checkpoint").is_dir() and not (tmp_path / "run").exists()
    resumed = greenadapt.finetune(**options, out=tmp_path / "run", resume=True, progress=False)
    assert resumed.manifest["cost"]["processes"] == 2  # the killed part's cost up to its checkpoint is the run's too
    a, b = load_file(str(reference.path / "model.safetensors")), load_file(str(resumed.path / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-6, err_msg=key)
    assert json.loads((reference.path / "metrics.json").read_text()) == json.loads((resumed.path / "metrics.json").read_text())
    assert not (tmp_path / "run.checkpoint").exists()  # removed once the run is complete
