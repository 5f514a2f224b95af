"""A researcher's week, round 4 (issue 84): a run that barely learned is flagged everywhere in the same words, compare
says what to do next, a stopped compare can be inspected, and a replay into the run it came from is the same stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli
from conftest import build_tiny_bert
from finetune_helpers import write_ner_file


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("week4")
    return {"root": root, "plain": build_tiny_bert(root / "plain", head="base"), "train": write_ner_file(root / "train.tsv", 40, seed=1),
            "test": write_ner_file(root / "test.tsv", 16, seed=2)}


def _finetune(data: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return ["finetune", "--task", "ner", "--train", str(data["train"]), "--test", str(data["test"]), "--model", str(data["plain"]),
            "--device", "cpu", "--out", str(out), *extra]


def test_a_barely_trained_run_is_flagged_in_finetune_info_and_report_in_the_same_words(
        data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from greenadapt.cli import main

    run = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", ["greenadapt", *_finetune(data, run, "--max-steps", "2", "--batch-size", "8")])
    with pytest.raises(SystemExit) as done:
        main()
    assert not done.value.code
    out = capsys.readouterr().out
    # 2 steps of 8 = 16 examples of the recipe's 3 epochs x 40 = 120: 13%
    expected = "barely trained: 2 steps × batch 8 = 16 training examples, 13% of the ner recipe (3 epochs × 40 = 120)"
    assert f"warning: {expected}" in out and "train longer" in out and "--lr" in out, out
    assert run_cli(["info", str(run)], monkeypatch, capsys)[0] == 0
    monkeypatch.setattr(sys, "argv", ["greenadapt", "info", str(run)])
    with pytest.raises(SystemExit):
        main()
    assert expected in capsys.readouterr().out
    page = tmp_path / "report.html"
    monkeypatch.setattr(sys, "argv", ["greenadapt", "report", str(run), "--html", str(page), "--quiet"])
    with pytest.raises(SystemExit):
        main()
    assert expected in page.read_text()
    # the recipe's budget is not flagged
    manifest = json.loads((run / "manifest.json").read_text())
    assert any(expected in w for w in manifest["stats"]["warnings"])


def test_a_run_at_the_learned_nothing_floor_says_so_as_compare_would(data: dict[str, Path], tmp_path: Path) -> None:
    import greenadapt

    outcome = greenadapt.finetune("ner", data["train"], test=data["test"], model=str(data["plain"]), out=tmp_path / "run", epochs=3,
                                  lr=1e-9, batch_size=8, device="cpu", progress=False)
    warnings = outcome.manifest["stats"]["warnings"]  # type: ignore[attr-defined]
    assert not any("barely trained" in w for w in warnings), warnings  # the recipe's epochs: not short of budget
    assert any("of test" in w and "below the" in w for w in warnings), warnings  # (the below-majority warning said it first)


def test_the_floor_is_compares_judgement_in_finetunes_words() -> None:
    """A run that finds 5 of 100 entities and tags every other word right passes the older warnings (it beats all-O)
    but is at compare's floor (entity F1 under 10): finetune says so, in compare's words and with its fix."""
    from greenadapt.comparison.health import COLLAPSE_FIX, degenerate
    from greenadapt.training.health import learned_nothing_warning, prediction_warnings

    entity = ["B-D", "I-D", "O", "O", "O", "O", "O", "O", "O", "O"]
    gold = [list(entity) for _ in range(100)]
    few = [list(entity) if i < 5 else ["O"] * 10 for i in range(100)]
    assert prediction_warnings("test", gold, few) == []
    warning = learned_nothing_warning("ner", "test", gold, few)
    assert warning == f"learned nothing on test: it {degenerate('ner', gold, few)}; {COLLAPSE_FIX}", warning
    assert "entity F1 9.5 (5 of 100 gold entities)" in warning
    assert learned_nothing_warning("ner", "test", gold, gold) is None
