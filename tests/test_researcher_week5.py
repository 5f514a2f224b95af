"""A researcher's week, round 5 (issue 95): a compare cut short is readable and says how to finish it, the API
imports from the clone's parent folder, and the report marks a barely-trained row and shows no spread for one seed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import build_tiny_bert
from finetune_helpers import write_ner_file

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("week5")
    return {"root": root, "plain": build_tiny_bert(root / "plain", head="base"), "other": build_tiny_bert(root / "other", head="base", seed=3),
            "train": write_ner_file(root / "train.tsv", 24, seed=1), "test": write_ner_file(root / "test.tsv", 8, seed=2)}


def _cli(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from greenadapt.cli import main

    monkeypatch.setattr(sys, "argv", ["greenadapt", *args])
    monkeypatch.delenv("GREENADAPT_DEBUG", raising=False)
    code = 0
    try:
        main()
    except SystemExit as done:
        code = int(done.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


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
    code, _, err = _cli(args, monkeypatch, capsys)
    assert code == 130, err
    monkeypatch.setattr(finetune_module, "run_finetune", real)
    said = "not finished: 1 of 4 fine-tunings done; rerun the same command to continue"
    code, shown, err = _cli(["info", str(out)], monkeypatch, capsys)
    assert code == 0 and said in shown, (shown, err)
    code, _, err = _cli(["report", str(out), "--html", str(tmp_path / "r.html")], monkeypatch, capsys)
    assert code == 0 and said in (tmp_path / "r.html").read_text(), err
    code, _, err = _cli(args, monkeypatch, capsys)  # the same command finishes it
    assert code == 0, err
    code, shown, _ = _cli(["info", str(out)], monkeypatch, capsys)
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
