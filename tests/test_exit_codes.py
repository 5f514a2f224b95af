"""One exit code per kind of mistake, whichever command meets it (README, "Exit codes"; issue 36.10).

A greenadapt output folder (a stage, a fine-tuned run, a report's run folder)
that is missing, empty or someone else's: 4, a stage conflict. A model folder
that is missing or not a model: 3, bad input. ``info``, ``report`` and
``predict -m`` used to answer the same missing folder with 2, 3 and 4.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run_cli

from greenadapt.errors import EXIT_BAD_INPUT, EXIT_STAGE_CONFLICT

STAGE_READERS = {
    "info": ["info", "{folder}"],
    "info --check": ["info", "{folder}", "--check"],
    "report": ["report", "{folder}"],
    "predict": ["predict", "-m", "{folder}", "{text}"],
    "align": ["align", "--w2v", "{folder}"],
    "expand": ["expand", "--align", "{folder}"],
}
MODEL_READERS = {
    "w2v": ["w2v", "-c", "{text}", "-m", "{folder}"],
    "adapt": ["adapt", "-c", "{text}", "-m", "{folder}"],
    "finetune": ["finetune", "--task", "ner", "--train", "{ner}", "--model", "{folder}"],
    "pretrain": ["pretrain", "-c", "{text}", "-m", "{folder}"],
}


def _folder(tmp_path: Path, kind: str) -> Path:
    folder = tmp_path / kind
    if kind == "empty":
        folder.mkdir()
    elif kind == "someone else's":
        folder.mkdir()
        (folder / "notes.txt").write_text("mine")
    return folder


def _args(template: list[str], folder: Path, tmp_path: Path) -> list[str]:
    text = tmp_path / "notes.txt"
    text.write_text("Patients with melanoma were studied.\n")
    ner = tmp_path / "train.tsv"
    ner.write_text("Patients\tO\nmelanoma\tB\n")
    values = {"folder": str(folder), "text": str(text), "ner": str(ner)}
    return [part.format(**values) for part in template] + ["--workdir", str(tmp_path / "work")] * (template[0] in MODEL_READERS)


@pytest.mark.parametrize("kind", ["missing", "empty", "someone else's"])
@pytest.mark.parametrize("command", list(STAGE_READERS))
def test_a_missing_or_foreign_output_folder_is_exit_4_everywhere(command: str, kind: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, kind)
    code, err = run_cli(_args(STAGE_READERS[command], folder, tmp_path), monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT, err
    assert err.startswith(f"error: {folder}") and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("kind", ["missing", "empty", "someone else's"])
@pytest.mark.parametrize("command", list(MODEL_READERS))
def test_a_missing_or_foreign_model_folder_is_exit_3_everywhere(command: str, kind: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # "missing" is also a Hub id greenadapt would try
    folder = _folder(tmp_path, kind)
    code, err = run_cli(_args(MODEL_READERS[command], folder, tmp_path), monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT, err
    assert len(err.strip().splitlines()) == 1 and "missing" in err or str(folder) in err, err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["w2v", "-c", "x", "--epochs", "0"], "Invalid value for '--epochs'"),
        (["w2v"], "--corpus is required"),
        (["nonsense"], "No such command 'nonsense'"),
        (["adapt", "--country", "DE", "-c", "x"], "--country is an option of greenadapt itself, not of adapt: put it before the command"),
    ],
)
def test_usage_mistakes_are_one_line_with_exit_2(args: list[str], says: str, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(args, monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and says in err, err
