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
    # the results row itself carries the mark (issue 95, item 7), and one seed shows no "± 0.00"
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["greenadapt", "report", str(run), "--quiet"])
    with pytest.raises(SystemExit):
        main()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "(n=1)" in line]
    assert rows and all("(barely trained: see the warnings)" in row for row in rows) and not any("± 0.00" in row for row in rows), rows
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
    from greenadapt.compute.health import learned_nothing_warning, prediction_warnings

    entity = ["B-D", "I-D", "O", "O", "O", "O", "O", "O", "O", "O"]
    gold = [list(entity) for _ in range(100)]
    few = [list(entity) if i < 5 else ["O"] * 10 for i in range(100)]
    assert prediction_warnings("test", gold, few) == []
    warning = learned_nothing_warning("ner", "test", gold, few)
    assert warning == f"learned nothing on test: it {degenerate('ner', gold, few)}; {COLLAPSE_FIX}", warning
    assert "entity F1 9.5 (5 of 100 gold entities)" in warning
    assert learned_nothing_warning("ner", "test", gold, gold) is None


def _pair(variant: str, mean: float, significant: bool, *, seeds: int = 3, with_new: float | None = None, without: float | None = None,
          not_a_verdict: bool = False) -> dict:
    pair = {"variant": variant, "baseline": "base", "mean": mean, "significant95": significant, "seeds": list(range(1, seeds + 1))}
    if with_new is not None:
        pair["strata"] = [{"split": "new words", "stratum": "with a new word", "mentions": 100, "difference": with_new},
                          {"split": "new words", "stratum": "without a new word", "mentions": 800, "difference": without}]
    return pair | ({"not_a_verdict": True} if not_a_verdict else {})


def test_compare_recommends_one_plain_thing_by_its_documented_rule() -> None:
    from greenadapt.comparison.advice import recommend

    assert recommend([_pair("green", 0.02, False, not_a_verdict=True)]).startswith("no recommendation: a run learned nothing")
    assert recommend([_pair("green", 0.012, True), _pair("green-agree", 0.015, True, with_new=0.03, without=0.01)]) == (
        "use green-agree: +1.50 F1 over base, significant over seeds and test sentences")
    regular = recommend([_pair("green", 0.012, True, with_new=0.005, without=0.013)])
    assert regular.startswith("use green: +1.20 F1") and "R-Drop (`--agreement 1`) on base" in regular, regular
    assert recommend([_pair("green", -0.01, True)]) == "keep base: green is -1.00 F1 below it, significant over seeds and test sentences"
    noise = recommend([_pair("green", 0.004, False, seeds=2, with_new=0.0, without=0.006)])
    assert noise.startswith("keep base, the simpler model: no variant is significantly better (over 2 seeds: run at least 3")
    assert "the gain is as large without new words: try R-Drop" in noise, noise
    assert "R-Drop" not in recommend([_pair("green", 0.004, False, with_new=0.02, without=0.0)])


def test_a_stopped_compare_writes_why_and_info_report_and_keep_going_recommend(
        data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from greenadapt.cli import main

    out = tmp_path / "cmp"
    args = ["compare", "--task", "ner", "--train", str(data["train"]), "--test", str(data["test"]), "--model", f"base={data['plain']}",
            "--model", f"other={data['plain']}", "--seeds", "1,2", "--max-steps", "2", "--device", "cpu", "--bootstrap", "100",
            "--out", str(out)]
    code, err = run_cli(args, monkeypatch, capsys)
    assert code == 4 and "compare stopped" in err, err
    assert "--max-steps 2 stopped it: raise it or leave it out" in err and "--epochs" not in err, err  # issue 95, item 8
    result = json.loads((out / "compare.json").read_text())
    assert "--max-steps 2 stopped it" in result["stopped"]["fix"] and "--max-steps 2" in result["recommendation"]
    assert result["kind"] == "compare" and result["stopped"]["not_started"] == 3 and result["stopped"]["finished_runs"] == ["base seed 1"]
    monkeypatch.setattr(sys, "argv", ["greenadapt", "info", str(out)])
    with pytest.raises(SystemExit) as done:
        main()
    shown = capsys.readouterr().out
    assert not done.value.code and "stopped     base seed 1" in shown and "finished    base seed 1" in shown, shown
    page = tmp_path / "report.html"
    monkeypatch.setattr(sys, "argv", ["greenadapt", "report", str(out), "--html", str(page), "--quiet"])
    with pytest.raises(SystemExit):
        main()
    assert "Stopped: base seed 1" in page.read_text()
    # --keep-going: every run, no verdict, and the recommendation says why there is none
    monkeypatch.setattr(sys, "argv", ["greenadapt", *args, "--keep-going"])
    with pytest.raises(SystemExit) as done:
        main()
    shown = capsys.readouterr()
    assert not done.value.code and "recommendation: no recommendation: a run learned nothing" in shown.out + shown.err
    result = json.loads((out / "compare.json").read_text())
    assert "stopped" not in result and result["recommendation"].startswith("no recommendation")


def test_a_replay_into_the_run_it_came_from_is_the_same_stage_however_the_model_was_spelled(
        data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import os
    import shutil

    shutil.copytree(data["plain"], tmp_path / "plain")
    shutil.copyfile(data["train"], tmp_path / "train.tsv")
    monkeypatch.chdir(tmp_path)
    args = ["finetune", "--task", "ner", "--train", "train.tsv", "--max-steps", "2", "--device", "cpu", "--out", "runs/a"]
    assert run_cli([*args, "--model", "plain"], monkeypatch, capsys)[0] == 0
    made = (tmp_path / "runs" / "a" / "model.safetensors").stat().st_mtime_ns
    code, err = run_cli(["finetune", "--config", "runs/a", "--out", "runs/a"], monkeypatch, capsys)  # options.json: absolute paths
    assert code == 0, err
    assert run_cli([*args, "--model", f"{os.getcwd()}/plain/"], monkeypatch, capsys)[0] == 0
    assert (tmp_path / "runs" / "a" / "model.safetensors").stat().st_mtime_ns == made  # skipped both times, not trained again
    code, err = run_cli([*args, "--model", "plain", "--lr", "1e-3"], monkeypatch, capsys)  # a real change is still one
    assert code == 4 and "changed: train.lr" in err, err


def test_min_count_has_one_meaning_per_name_and_the_old_spelling_says_what_it_is_now(caplog: pytest.LogCaptureFixture) -> None:
    from greenadapt.adaptation.settings import AdaptSettings, ExpandSettings, W2vSettings
    from greenadapt.errors import UsageError

    assert AdaptSettings(corpus=("c",), min_count=3).min_count == 3  # the API's names are unchanged
    with caplog.at_level("WARNING"):
        adapt = AdaptSettings(corpus=("c",), min_count_spelled=3)
        expand = ExpandSettings(min_count_spelled=7)
        w2v = W2vSettings(corpus=("c",), min_count_spelled=2)
    assert (adapt.min_count, adapt.min_count_new, expand.min_count, w2v.min_count) == (3, 20, 7, 2)
    said = [r.getMessage() for r in caplog.records]
    assert "--min-count is deprecated: it is --w2v-min-count here (word2vec's threshold; the new-word threshold is --min-count-new)" in said
    assert "--min-count is deprecated: it is --min-count-new here (the new-word threshold, as in adapt)" in said
    assert "min_count_spelled" not in adapt.document()["options"] and adapt.document()["options"]["min_count"] == 3
    with pytest.raises(UsageError, match="--min-count and --w2v-min-count were both given"):
        AdaptSettings(corpus=("c",), min_count=4, min_count_spelled=3)


def test_long_phases_say_when_they_start_and_how_large_they_are(data: dict[str, Path], tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("onnxruntime")
    import greenadapt

    with caplog.at_level("INFO", logger="greenadapt"):
        greenadapt.finetune("ner", data["train"], test=data["test"], model=str(data["plain"]), out=tmp_path / "run", max_steps=2,
                            device="cpu", progress=False)
        greenadapt.export(tmp_path / "run", onnx=True, quantize="int8", out=tmp_path / "served")
    said = [r.getMessage() for r in caplog.records]
    assert "scoring test: 16 examples, 16 sequences" in said, said
    assert any(m.startswith("scored test in ") for m in said)
    assert any(m.startswith(f"exporting {tmp_path / 'run'} to ONNX (quantized to int8), once") for m in said), said


def test_small_things_predict_help_shows_its_example_once_and_an_exports_card_names_no_machine_path(
        data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("onnxruntime")
    import sys

    import greenadapt
    from greenadapt.cli import main

    monkeypatch.setattr(sys, "argv", ["greenadapt", "predict", "--help"])
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main()
    assert capsys.readouterr().out.count("Example:") == 1
    greenadapt.finetune("ner", data["train"], model=str(data["plain"]), out=tmp_path / "run", max_steps=1, device="cpu", progress=False)
    greenadapt.export(tmp_path / "run", onnx=True, quantize="fp32", out=tmp_path / "served")
    card = (tmp_path / "served" / "README.md").read_text()
    assert str(tmp_path) not in card and "run `run`" in card, card


def test_evaluate_names_the_pooling_mode_of_each_warning(data: dict[str, Path], tmp_path: Path) -> None:
    """evaluate scores every pooling mode, and each mode's learned-nothing warning names it: the same accuracy under two
    modes read as one warning said twice (found on BC5CDR-disease, where mean and general pooling tied)."""
    import greenadapt
    from finetune_helpers import build_tiny_expanded

    run = tmp_path / "run"
    greenadapt.finetune("ner", data["train"], model=str(build_tiny_expanded(tmp_path / "green")), out=run, epochs=1, lr=1e-9,
                        batch_size=8, device="cpu", progress=False)
    result = greenadapt.evaluate(data["test"], model=run, device="cpu")
    assert set(result.scores) == {"mean", "general", "domain"}
    below = [w for w in result.warnings if "below the" in w]
    assert below and len(set(below)) == len(below), result.warnings
    assert all(any(f"test.tsv under {mode} pooling" in w for mode in result.scores) for w in result.warnings), result.warnings
