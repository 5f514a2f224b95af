"""The CPU study's bookkeeping (issue 82): the order of its units, what counts as done (the study's folder or the
repository's copy, so a lost machine loses at most the unit in progress), and the rule applied as written only once
every arm has 10 seeds on the four sets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from bench_helpers import bench_module

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def study():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH))
    return bench_module("cpu_study")


def test_the_plan_runs_the_selection_first_then_only_what_the_open_questions_use(study) -> None:  # type: ignore[no-untyped-def]
    rule = study.study_rule
    order = study.units()
    five = ["green-min20", "base-both", "base-rdrop", "green-agree", "green-both"]  # one-view first: the cheapest partner
    assert order[:10] == [(name, 1, arm) for name in ("NCBI-disease", "BC5CDR-disease") for arm in five]
    assert {seed for _, seed, _ in order} == {1, 2, 3, 4, 5} and len(order) == 2 * 5 * 5  # the later sets wait for the candidate
    assert "base" not in {arm for _, _, arm in order}  # no question uses it
    # the selection made (green-both; base-rdrop above base-both), every question open: the later sets run their arms
    scores = _scores({"base-both": 0.0, "base-rdrop": 0.5, "green-min20": 0.8, "green-both": 1.0, "green-agree": 0.9},
                     sets=rule.SELECTION_SETS, seeds=5, sd=0.3)
    later = study.units(scores)
    assert {arm for name, seed, arm in later if name == "BC2GM" and seed == 1} == {"green-both", "base-rdrop", "base-both", "green-min20"}
    assert max(seed for _, seed, _ in later) == 5  # seeds 6-10 only after the first look
    # after the first look on all four sets: Q2 and Q3 decided (green-both far above both), Q1 open: seeds 6-10 run Q1's two arms
    decided = _scores({"base-both": 0.0, "base-rdrop": 0.9, "green-min20": 0.0, "green-both": 1.0, "green-agree": 0.7}, seeds=5, sd=0.6)
    state = rule.apply(decided)
    assert state.answers["Q3"].final and state.answers["Q2"].final and not state.answers["Q1"].final
    assert {arm for _, seed, arm in study.units(decided) if seed > 5} == {"green-both", "base-rdrop"}


def test_a_unit_is_done_in_the_study_folder_or_in_the_repository(study, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(study, "STUDY", tmp_path / "study")
    repo = tmp_path / "repo"
    assert study.unit_files(repo) == []
    copied = study.unit_path(repo / study.RUNS_IN_REPO, "NCBI-disease", 1, "base-both")
    copied.parent.mkdir(parents=True)
    copied.write_text(json.dumps(_compare("NCBI-disease", {"green-min20": [0.79], "base-both": [0.8]}, [1])))
    scores = study.finished_scores(repo)
    assert study.is_done(scores, "NCBI-disease", 1, "base-both")  # a fresh machine resumes from the repository's copy
    assert study.is_done(scores, "NCBI-disease", 1, "green-min20")  # the partner's run in the same file is done too
    partial = study.unit_path(tmp_path / "study" / "results", "NCBI-disease", 1, "base-rdrop").with_suffix(".json.partial")
    partial.parent.mkdir(parents=True)
    partial.write_text("{")
    assert not study.is_done(study.finished_scores(repo), "NCBI-disease", 1, "base-rdrop")  # a cut unit is not done
    # a file made with another commit is not counted for a study pinned elsewhere: its set and seed run again
    other = json.loads(copied.read_text())
    other["study"] = {"commit": "a" * 40}
    copied.write_text(json.dumps(other))
    assert not study.finished_scores(repo, {"commit": "b" * 40})
    assert study.finished_scores(repo, {"commit": "a" * 40})


def _compare(name: str, arms: dict[str, list[float]], seeds: list[int], **study_record: object) -> dict:
    return {"kind": "compare", "metric": "f1", "options": {"test": f"/d/ner/{name}/test.tsv", "against": "base", "task": "ner", "epochs": 3,
                                                          "batch_size": 32, "lr": 5e-05, "max_length": 128, "precision": "auto",
                                                          "max_steps": None, "device": "cpu"},
            "variants": [{"name": arm, "headline_pool": "mean", "scores": {str(s): {"mean": {"f1": f1[i]}} for i, s in enumerate(seeds)}}
                         for arm, f1 in arms.items()],
            "study": {"commit": "c" * 40, "flags": ["avx512_bf16"], "expanded_model_sha256": "e" * 64, **study_record}}


def _scores(gains: dict[str, float], *, sets: tuple[str, ...] = ("NCBI-disease", "BC5CDR-disease", "BC5CDR-chem", "BC2GM"),
            seeds: int = 10, sd: float = 0.3, seed_offset: int = 0) -> dict:
    """F1 × 100 per set, arm and seed: 80 + a set's level + the arm's gain + noise of ``sd`` (seeded)."""
    import numpy as np

    rng = np.random.default_rng(seed_offset)
    return {name: {arm: {seed: 80 + index + gain + float(rng.normal(0, sd)) for seed in range(1, seeds + 1)}
                   for arm, gain in gains.items()} for index, name in enumerate(sets)}


def test_a_checkpoint_older_than_its_inputs_new_times_is_dropped_the_others_kept(study, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The study's pinned greenadapt (ab95d39, older than the resume fix) refuses a checkpoint whose inputs' modification
    times changed (the same bytes copied anew), and the runner then leaves its unit for good: `start` removes such a
    checkpoint first, and only such a one."""
    import os

    monkeypatch.setattr(study, "STUDY", tmp_path / "study")
    monkeypatch.setattr(study, "DATA", tmp_path / "data")
    monkeypatch.setattr(study, "minilm", lambda: str(tmp_path / "minilm"))
    (tmp_path / "minilm").mkdir()
    (tmp_path / "minilm" / "model.safetensors").write_text("weights")
    for name in ("NCBI-disease", "BC5CDR-disease"):
        (tmp_path / "data" / "ner" / name).mkdir(parents=True)
        for file in ("train_dev.tsv", "test.tsv"):
            (tmp_path / "data" / "ner" / name / file).write_text("word\tO\n")
    checkpoints = {}
    for name, arm in (("NCBI-disease", "base-both"), ("BC5CDR-disease", "green-both")):
        checkpoint = tmp_path / "study" / "finetune" / name / arm / "seed-2.checkpoint" / "seed-2" / "ckpt-000500"
        checkpoint.mkdir(parents=True)
        (checkpoint / "model.safetensors").write_text("partial")
        os.utime(checkpoint / "model.safetensors", ns=(10**18, 10**18))
        checkpoints[name] = checkpoint.parent.parent
    for file in (tmp_path / "data" / "ner" / "BC5CDR-disease").iterdir():  # this set's inputs are older than its checkpoint
        os.utime(file, ns=(10**18 - 10**9, 10**18 - 10**9))
    os.utime(tmp_path / "minilm" / "model.safetensors", ns=(10**18 - 10**9, 10**18 - 10**9))
    assert study.drop_stale_checkpoints() == [checkpoints["NCBI-disease"]]  # its data files were written after it (now)
    assert not checkpoints["NCBI-disease"].exists() and checkpoints["BC5CDR-disease"].is_dir()


def test_stop_signals_the_study_and_never_a_program_that_took_its_pid(study, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import time

    monkeypatch.setattr(study, "STUDY", tmp_path)
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)  # another program, in a group of its own
    runner_file = tmp_path / "cpu_study.py"
    runner_file.write_text("import time\ntime.sleep(300)\n")
    runner = subprocess.Popen([sys.executable, str(runner_file)], start_new_session=True)
    try:
        for record in (str(stranger.pid), json.dumps({"pid": stranger.pid, "start_ticks": 1})):  # old and new pid files
            (tmp_path / "study.pid").write_text(record)
            assert study.running() is None
            study.stop()
            assert stranger.poll() is None  # still alive: not the study's process
        deadline = time.monotonic() + 10
        while not study.process_identity(runner.pid)["cmdline"][1:] and time.monotonic() < deadline:
            time.sleep(0.05)
        study.write_pid_file(runner.pid)
        assert study.running() == runner.pid
        study.stop()  # returns once the group has ended (a compare saving its checkpoint would hold the study's folders)
        assert runner.wait(timeout=10) == -15 and not study.group_alive(runner.pid)  # SIGTERM
    finally:
        for process in (stranger, runner):
            process.kill()
            process.wait()


def test_the_studys_own_files_damaged_or_not_regular_are_one_line_never_a_hang(study,
                                                                               tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess

    os.mkfifo(tmp_path / "study.log")
    assert "not a regular file" in study.log_tail(tmp_path / "study.log")  # returns at once: a FIFO is not opened to read
    env = {**os.environ, "GREENADAPT_STUDY": str(tmp_path)}
    for pid_text in ("9" * 400, "{\"pid\": \"x\"}", "-3"):
        (tmp_path / "study.pid").write_text(pid_text)
        done = subprocess.run([sys.executable, str(BENCH / "cpu_study.py"), "stop"], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and done.stderr.strip().count("\n") == 0 and "study.pid" in done.stderr, pid_text
    (tmp_path / "study.pid").unlink()
    damaged = tmp_path / "results" / "ncbi" / "seed-1" / "green-both.json"
    damaged.parent.mkdir(parents=True)
    damaged.write_text('{"options": {"test": "/d/ner/NCBI-disease/test.tsv"}, "variants": [{"name": null}]}')
    for action in ("status", "collect"):
        done = subprocess.run([sys.executable, str(BENCH / "cpu_study.py"), action, "--repo", str(tmp_path / "repo")], env=env,
                              capture_output=True, text=True, timeout=60)
        said = done.stderr.strip().splitlines()
        assert "Traceback" not in done.stderr and str(damaged) in done.stderr and len(said) == 1, action
        assert done.returncode != 0 or action == "collect"  # collect leaves the damaged file where it is, and says so
