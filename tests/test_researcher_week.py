"""A researcher's week, round 2 (issue 65): warnings about the finished run, replays from anywhere, scores people read,
and the API as a notebook lists it. (Failing fast is in tests/test_compare.py, notes beside verdicts in
tests/test_report.py.)"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from finetune_helpers import build_tiny_expanded, write_ner_file


def test_a_warning_about_training_health_does_not_outlive_its_cause() -> None:
    """Point 4: a dev score that stayed 0 for two evaluations and then rose is no warning of the finished run."""
    from greenadapt.compute.health import PATIENCE, WINDOW, TrainingHealth

    health = TrainingHealth()
    for score in [0.0] * PATIENCE:
        health.evaluated(score)
    assert any("dev score has stayed 0" in w for w in health.warnings)  # said while it held (the log keeps it)
    health.evaluated(0.667)
    assert health.final_warnings() == []
    stuck = TrainingHealth()
    for _ in range(3 * WINDOW):
        stuck.record_loss(1.0)
    for score in [0.0] * (PATIENCE + 1):
        stuck.evaluated(score)
    assert len(stuck.final_warnings()) == 2  # still 0, loss still flat: both hold at the end


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("week")
    return {"root": root, "model": build_tiny_expanded(root / "models" / "green"), "train": write_ner_file(root / "train.tsv", 24, seed=1),
            "test": write_ner_file(root / "test.tsv", 12, seed=2)}


def test_a_run_folder_replays_from_any_folder(files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Point 6: the model typed as a relative folder is recorded absolute, as the data files are."""
    import greenadapt

    monkeypatch.chdir(files["root"])
    greenadapt.finetune("ner", "train.tsv", model="models/green", out="runs/a", max_steps=2, device="cpu", progress=False)
    recorded = json.loads((files["root"] / "runs" / "a" / "options.json").read_text())["options"]
    assert recorded["model"] == str(files["model"]) and recorded["train"] == str(files["train"])
    elsewhere = files["root"] / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    replay = greenadapt.finetune(config=files["root"] / "runs" / "a", out=elsewhere / "b", progress=False)
    assert replay.manifest["config"]["model"] == str(files["model"])


def test_evaluate_prints_the_per_type_table(files: dict[str, Path], tmp_path: Path) -> None:
    """Point 7: seqeval's per-type report, not only the totals."""
    import subprocess

    from conftest import HANG_S, REPO

    typed = write_ner_file(tmp_path / "typed.tsv", 24, seed=3, typed=True)
    import greenadapt

    greenadapt.finetune("ner", typed, model=str(files["model"]), out=tmp_path / "run", max_steps=2, device="cpu", progress=False)
    done = subprocess.run([sys.executable, "-m", "greenadapt", "evaluate", str(typed), "-m", str(tmp_path / "run")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=HANG_S, check=False)
    assert done.returncode == 0, done.stderr
    header = next(i for i, line in enumerate(done.stdout.splitlines()) if line.split()[:2] == ["entity", "type"])
    types = {line.split()[0] for line in done.stdout.splitlines()[header + 1:] if line.startswith("  ")}
    gold_types = {tag.split("-", 1)[1] for line in typed.read_text().splitlines() if line.strip()
                  for tag in [line.split()[-1]] if "-" in tag}
    assert types == gold_types


def test_evaluate_heads_each_breakdown_by_what_it_breaks_down(capsys: pytest.CaptureFixture[str]) -> None:
    """Classification's per-label report is headed "label" (not "entity label"), NER's per-type "entity type"."""
    from greenadapt.cli.evaluate import _show
    from greenadapt.data.metrics import classification_scores, entity_scores
    from greenadapt.inference.evaluation import EvaluateResult

    for scores, heading in ((classification_scores(["yes", "no", "no"], ["yes", "yes", "no"]), ["label", "precision"]),
                            (entity_scores([["B-D", "O"]], [["B-D", "O"]]), ["entity", "type"])):
        _show(EvaluateResult([Path("run")], Path("x.tsv"), 3, "f1", "mean", {"mean": scores}), False)
        lines = capsys.readouterr().out.splitlines()
        assert any(line.split()[:2] == heading for line in lines), lines
        assert not any(line.split()[:2] == ["entity", "label"] for line in lines), lines


def test_a_tagged_file_writes_gold_and_prediction_in_one_form(files: dict[str, Path], tmp_path: Path) -> None:
    """Point 7: a run trained with --entity-type on bare B/I tags predicts B-Disease; beside a bare gold column it writes B."""
    import greenadapt

    greenadapt.finetune("ner", files["train"], model=str(files["model"]), out=tmp_path / "run", entity_type="Disease", max_steps=2,
                        device="cpu", progress=False)
    out = tmp_path / "tagged.tsv"
    greenadapt.predict(files["test"], model=str(tmp_path / "run"), output=out, progress=False)
    rows = [line.split() for line in out.read_text().splitlines() if line.strip()]
    assert rows and all(len(row) >= 3 and "-" not in row[-1] and "-" not in row[-2] for row in rows)


def test_dir_of_the_package_lists_the_commands() -> None:
    """Point 8: the API is built lazily, and dir() (a notebook's completion) still lists it."""
    import greenadapt
    from greenadapt import api

    assert set(api.FUNCTIONS) <= set(dir(greenadapt))
    assert {"finetune", "compare", "second_view", "load", "info", "report"} <= set(dir(greenadapt))
    assert not {"Any", "TYPE_CHECKING", "annotations"} & set(dir(greenadapt))  # a notebook's completion: the API alone


# -- point 5: predict for cron jobs


class _Recorded:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object, object]] = []

    def start(self, description: str, total: float | None = None, unit: str = "") -> None:
        self.calls.append(("start", total, unit))

    def update(self, completed: float, **info: object) -> None:
        self.calls.append(("update", completed, info.get("read")))

    def finish(self, **info: object) -> None:
        self.calls.append(("finish", None, None))


def test_predict_reads_gz_shows_a_total_and_writes_what_a_plain_file_gives(files: dict[str, Path], tmp_path: Path) -> None:
    import gzip

    import greenadapt

    run = tmp_path / "run"
    greenadapt.finetune("ner", files["train"], model=str(files["model"]), out=run, max_steps=2, device="cpu", progress=False)
    text = "".join(f"the patients with leukemia and sepsis were {i} in the study\n" for i in range(600))
    plain, packed = tmp_path / "notes.txt", tmp_path / "notes.txt.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    recorded = _Recorded()
    greenadapt.predict(packed, model=str(run), output=tmp_path / "from-gz.jsonl", progress=recorded)
    greenadapt.predict(plain, model=str(run), output=tmp_path / "from-txt.jsonl", progress=False)
    assert (tmp_path / "from-gz.jsonl").read_text() == (tmp_path / "from-txt.jsonl").read_text()
    assert len((tmp_path / "from-gz.jsonl").read_text().splitlines()) == 600
    start = recorded.calls[0]
    assert start[0] == "start" and start[2] == "documents"  # issue 72: documents, not the compressed file's megabytes
    done = [c for c in recorded.calls if c[0] == "update"]
    assert done and done[-1][1] == 600 and done[-1][2] == f"{len(text) / 1e6:.1f} MB of text"
    plain_progress = _Recorded()
    greenadapt.predict(plain, model=str(run), output=tmp_path / "again.jsonl", progress=plain_progress)
    last = [c for c in plain_progress.calls if c[0] == "update"][-1]
    assert last[1] == 600 and last[2].endswith("(100%)")  # an uncompressed file: its share read
    assert not (tmp_path / "from-gz.jsonl.partial").exists()


def test_an_unreadable_gz_is_one_line(files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from cli_helpers import run_cli

    import greenadapt

    run = tmp_path / "run"
    greenadapt.finetune("ner", files["train"], model=str(files["model"]), out=run, max_steps=2, device="cpu", progress=False)
    broken = tmp_path / "notes.txt.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00" + b"not gzip at all" * 10)
    capsys.readouterr()
    code, err = run_cli(["predict", str(broken), "-m", str(run), "--output", str(tmp_path / "out.jsonl")], monkeypatch, capsys)
    assert code == 3 and "notes.txt.gz" in err and len(err.strip().splitlines()) == 1, err


def test_predictions_can_be_followed_while_they_are_written_and_never_half_under_the_final_name(tmp_path: Path) -> None:
    from greenadapt.inference.predict_text import write_lines

    target = tmp_path / "out.jsonl"
    partial = tmp_path / "out.jsonl.partial"
    seen: list[str] = []

    def lines() -> object:
        yield '{"n": 1}\n'
        assert partial.is_symlink() and not target.exists()
        seen.append(partial.read_text())  # what `tail -F out.jsonl.partial` shows: the first line, flushed
        yield '{"n": 2}\n'

    write_lines(lines(), target)  # type: ignore[arg-type]
    assert seen == ['{"n": 1}\n'] and target.read_text() == '{"n": 1}\n{"n": 2}\n' and not partial.exists()


def test_a_repeated_warning_is_said_once_with_its_count(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from greenadapt.progress import said_once

    logger = logging.getLogger("greenadapt.modeling.units")
    with caplog.at_level(logging.WARNING), said_once():
        for n in (1, 2, 3):
            logger.warning("%d chunk(s) were longer than 128 wordpieces and split", n)
    said = [r.getMessage() for r in caplog.records]
    assert said == ["1 chunk(s) were longer than 128 wordpieces and split",
                    "1 chunk(s) were longer than 128 wordpieces and split (said 3 times in all)"]


def test_typed_predictions_beside_bare_gold_are_written_bare(files: dict[str, Path], tmp_path: Path) -> None:
    """Point 7, whatever a run learned: predictions B-Disease/I-Disease beside a bare B/I gold column are written B/I."""
    from greenadapt.data.predictions import write_predictions
    from greenadapt.data.task_files import ReaderOptions, read_task_file

    task_file = read_task_file(files["test"], "ner", ReaderOptions(entity_type="Disease"), require_labels=True)
    typed = [list(sentence.labels) for sentence in task_file.examples]
    assert any("-Disease" in tag for tags in typed for tag in tags)  # the reader typed the gold: so are these predictions
    write_predictions(task_file, typed, tmp_path / "tagged.tsv")
    rows = [line.split() for line in (tmp_path / "tagged.tsv").read_text().splitlines() if line.strip()]
    assert rows and all(row[-1] == row[-2] for row in rows)  # the prediction in the gold's own (bare) form
