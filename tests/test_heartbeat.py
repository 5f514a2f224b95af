"""Progress where stderr is not a terminal: a plain line every N seconds (cron, CI, nohup)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_S

from greenadapt.errors import UsageError
from greenadapt.progress import HEARTBEAT_ENV, HeartbeatProgress, format_duration, heartbeat_interval


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_interval_with_progress_rate_and_eta() -> None:
    clock, out = _Clock(), io.StringIO()
    beat = HeartbeatProgress(30, out, clock=clock)
    beat.start("finetune", total=600, unit="steps")
    clock.now += 3
    beat.update(18, loss=0.5, steps_per_s=6.0)
    assert out.getvalue() == ""  # nothing in a phase's first seconds
    clock.now += 2
    beat.update(30, loss=0.41234, steps_per_s=6.0)  # the first line within 5 s (issue 72): a 30 s job is not silent
    assert out.getvalue().strip().endswith("finetune: 30/600 steps (5%), 6 steps/s, ETA 1m35s, loss=0.4123")
    clock.now += 10
    beat.update(90, loss=0.35, steps_per_s=6.0)
    assert len(out.getvalue().splitlines()) == 1  # then one a full interval after it
    clock.now += 20
    beat.update(240, loss=0.31234, steps_per_s=6.0)
    line = out.getvalue().splitlines()[-1]
    assert line.endswith("finetune: 240/600 steps (40%), 6 steps/s, ETA 1m00s, loss=0.3123")
    clock.now += 5
    beat.update(270)
    assert len(out.getvalue().splitlines()) == 2  # the next one waits a full interval
    beat.start("evaluating", total=None, unit="sentences")
    clock.now += 31
    beat.update(1500)
    assert out.getvalue().splitlines()[2].endswith("evaluating: 1,500 sentences, 48.4 sentences/s")


def test_a_resumed_run_shows_the_rate_it_reports_not_steps_over_time_since_restart() -> None:
    clock, out = _Clock(), io.StringIO()
    beat = HeartbeatProgress(30, out, clock=clock)
    beat.start("finetune", total=1000, unit="steps")
    beat.update(500)  # where the checkpoint left off
    clock.now += 40
    beat.update(520, steps_per_s=0.5)  # 20 steps in 40 s since the restart
    assert out.getvalue().strip().endswith("520/1,000 steps (52%), 0.5 steps/s, ETA 16m00s")


def test_durations_and_the_interval_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [format_duration(s) for s in (0, 59.4, 95, 4000)] == ["0s", "59s", "1m35s", "1h06m"]
    monkeypatch.delenv(HEARTBEAT_ENV, raising=False)
    assert heartbeat_interval() == 30
    monkeypatch.setenv(HEARTBEAT_ENV, "0")
    assert heartbeat_interval() == 0
    for bad in ("soon", "-1"):
        monkeypatch.setenv(HEARTBEAT_ENV, bad)
        with pytest.raises(UsageError, match=HEARTBEAT_ENV):
            heartbeat_interval()


def test_a_piped_command_prints_heartbeats_and_quiet_silences_them(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "greenadapt", "--heartbeat", "0.2", "w2v", "--corpus", "sample", "--epochs", "5",
               "--workdir", str(tmp_path / "work")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=HANG_S, check=False)
    assert done.returncode == 0, done.stderr
    beats = [line for line in done.stderr.splitlines() if " word2vec: " in line]
    assert len(beats) >= 2 and all("words/s" in line and "%" in line for line in beats)
    again = subprocess.run([*command, "--force", "--quiet"], capture_output=True, text=True, env=env, timeout=HANG_S, check=False)
    assert again.returncode == 0 and "word2vec: " not in again.stderr


class _Recorder:
    def __init__(self) -> None:
        self.updates: list[tuple[str, float, dict]] = []
        self.phase = ""

    def start(self, description: str, total: float | None = None, unit: str = "") -> None:
        self.phase = description

    def update(self, completed: float, **info: float | str) -> None:
        self.updates.append((self.phase, completed, info))

    def finish(self) -> None:
        pass


def test_fine_tuning_reports_its_rate_loss_and_last_dev_score(tmp_path: Path) -> None:
    from finetune_helpers import build_tiny_expanded, write_ner_file

    import greenadapt

    recorder = _Recorder()
    model = build_tiny_expanded(tmp_path / "model")
    train = write_ner_file(tmp_path / "train.tsv", 24, seed=1)
    dev = write_ner_file(tmp_path / "dev.tsv", 8, seed=2)
    greenadapt.finetune("ner", train, dev=dev, model=str(model), out=tmp_path / "run", epochs=2, batch_size=8,
                        device="cpu", progress=recorder)
    steps = [info for phase, _, info in recorder.updates if phase.startswith("fine-tuning") and info]
    assert steps and all(float(info["loss"]) >= 0 and info["steps_per_s"] > 0 for info in steps)
    assert "dev" not in steps[0] and "dev" in steps[-1]  # the first epoch's dev score shows from the second epoch on


def test_the_python_api_shows_progress_by_default_bars_where_watched_lines_elsewhere(monkeypatch: pytest.MonkeyPatch,
                                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 57, point 5: a 6-minute script printed nothing. Now: plain lines in a log, bars in a notebook or on a
    terminal, silence only when asked for (progress=False)."""
    from greenadapt.progress import NULL_PROGRESS, AnnouncingProgress, BarProgress, as_progress

    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    assert isinstance(as_progress(None), AnnouncingProgress)  # pytest's stderr is not a terminal: a script's log
    assert as_progress(False) is NULL_PROGRESS and isinstance(as_progress(True), AnnouncingProgress)
    monkeypatch.setitem(sys.modules, "ipykernel", type(sys)("ipykernel"))
    bars = as_progress(None)
    assert isinstance(bars, BarProgress)
    bars.start("fine-tuning (seed 1)", total=40, unit="steps")
    for step in range(0, 41, 10):
        bars.update(step, loss=0.5)
    bars.finish()
    shown = capsys.readouterr().err
    assert "fine-tuning (seed 1)" in shown and "40/40" in shown and "loss=0.5" in shown


def test_an_api_call_without_progress_argument_says_what_it_is_doing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import greenadapt
    from conftest import build_tiny_bert

    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    corpus = tmp_path / "c.txt"
    corpus.write_text("the patients with leukemia were in the study of insulin kinase cells\n" * 200)
    model = build_tiny_bert(tmp_path / "bert")
    capsys.readouterr()
    greenadapt.w2v(str(corpus), model=str(model), workdir=tmp_path / "w", epochs=1, min_count=1, workers=1)
    loud = capsys.readouterr().err
    assert "word2vec" in loud.lower() or "w2v" in loud.lower(), loud
    greenadapt.w2v(str(corpus), model=str(model), workdir=tmp_path / "w2", epochs=1, min_count=1, workers=1, progress=False)
    assert capsys.readouterr().err == ""
