"""compare's worker processes (issue 58, item 3): several runs per process, each run's log and outcome its own.

The scores a worker's runs give equal one-at-a-time runs' (tests/test_compare.py, the parallel test); here: what
a worker does with runs that fail.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from greenadapt.comparison.workers import Job, run_jobs


def test_failed_runs_are_reported_one_by_one_and_the_rest_still_run(tmp_path: Path) -> None:
    missing = tmp_path / "no-train.tsv"
    jobs = [
        Job(f"run {i}", {"task": task, "train": str(missing), "model": str(tmp_path / "no-model"), "out": str(tmp_path / f"out-{i}")},
            tmp_path / f"run-{i}.log")
        for i, task in enumerate(["ner", "pos", "ner", "classify"])
    ]
    from greenadapt.api import finetune

    outcomes = run_jobs(finetune, jobs, workers=2, threads=1)
    assert [o.job.label for o in sorted(outcomes, key=lambda o: o.job.label)] == [f"run {i}" for i in range(4)]
    by_label = {o.job.label: o for o in outcomes}
    assert all(o.exit_code in (2, 3) for o in outcomes), outcomes
    assert "pos" in by_label["run 1"].message  # an unknown task: its own line, not another run's
    for job in jobs:
        text = job.log_file.read_text()
        assert f"worker {by_label[job.label].worker}: {job.label}" in text and by_label[job.label].message in text
        assert "Traceback" not in text  # a user's error is one line in the log too
    workers = {o.worker for o in outcomes}
    assert len(workers) <= 2 and os.getpid() not in workers
    assert not any((tmp_path / f"out-{i}").exists() for i in range(4))


def test_the_time_left_follows_the_pace_of_the_finished_runs() -> None:
    """Issue 57, point 6: `finished green seed 2 (3/4, about 40s left)`, for runs one at a time or several at once;
    issue 72: each run's own duration and the runs that really train at once, not elapsed time over finished runs."""
    from greenadapt.comparison.pace import RunsLeft

    now = [0.0]
    alone = RunsLeft(4, clock=lambda: now[0])
    assert alone.left() == ""  # nothing finished: no pace yet
    now[0] = 120.0
    alone.finished(120.0)
    assert alone.left() == ", about 6m00s left"  # 3 more at 120 s each, one at a time
    together = RunsLeft(12, at_once=4, clock=lambda: now[0])
    together.finished(120.0)  # the first of 4 at once: 11 to go, 4 at a time, 120 s each
    assert together.left() == ", about 5m30s left"  # the old pace (elapsed / finished) said 22m00s: four times too long
    for _ in range(3):
        together.finished(140.0)
    assert together.left() == ", about 4m30s left"  # 8 to go at 135 s each, 4 at once
    for _ in range(7):
        together.finished(135.0)
    assert together.left() == ", about 2m15s left"  # the last one alone
    together.finished(135.0)
    assert together.left() == ""  # all done


def test_the_plan_line_states_the_concurrency_in_use(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from greenadapt.comparison.ensembles import Run
    from greenadapt.comparison.pace import plan_line

    runs = [Run("base", "m", seed) for seed in (1, 2, 3)]
    local = SimpleNamespace(out=tmp_path, ray=None, parallel=1)
    assert plan_line(local, runs, [], 1).endswith("3 to run here (1 at a time): time known after the first")
    on_ray = SimpleNamespace(out=tmp_path, ray=object(), parallel=1)  # --parallel is not what a cluster runs at once
    assert "3 to run on the Ray cluster (3 at a time)" in plan_line(on_ray, runs, [], 3)


def test_a_process_tokenizes_the_same_files_once_and_trains_the_same(tmp_path: Path, monkeypatch: Any) -> None:
    """A worker's second run on the same files and model reuses the first's units (issue 58, item 3: data once per
    worker); its results are those of a run that tokenized them itself."""
    import json

    from finetune_helpers import build_tiny_expanded, write_ner_file

    from greenadapt.api import finetune
    from greenadapt.runners.finetune import units_cache
    from greenadapt.tasks.ner import NerTask

    model = build_tiny_expanded(tmp_path / "model")
    train, test = write_ner_file(tmp_path / "train.tsv", 40, seed=1), write_ner_file(tmp_path / "test.tsv", 12, seed=3)
    calls: list[bool] = []
    real = NerTask.units

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(bool(kwargs.get("training")))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(NerTask, "units", counting)
    units_cache.forget()
    common = {"model": model, "test": test, "max_steps": 3, "batch_size": 8, "device": "cpu", "progress": False}
    finetune("ner", train, out=tmp_path / "a", seed=1, **common)
    assert sorted(calls) == [False, True]  # train and test, once each
    finetune("ner", train, out=tmp_path / "b", seed=2, **common)
    assert sorted(calls) == [False, True]  # the second run tokenized nothing
    write_ner_file(tmp_path / "train.tsv", 41, seed=1)  # other examples: tokenized again
    finetune("ner", train, out=tmp_path / "c", seed=2, **common)
    assert sorted(calls) == [False, True, True]
    units_cache.forget()
    write_ner_file(tmp_path / "train.tsv", 40, seed=1)
    finetune("ner", train, out=tmp_path / "b-alone", seed=2, **common)
    cached, alone = (json.loads((tmp_path / name / "metrics.json").read_text())["per_seed"] for name in ("b", "b-alone"))
    assert cached == alone


def test_workers_are_spread_over_the_gpus_each_pinned_before_it_touches_cuda(tmp_path: Path) -> None:
    """Issue 66, item 1, on the CPU: what each worker is told. Two workers over GPUs 0 and 1: each sees one GPU (its
    CUDA_VISIBLE_DEVICES, set before torch is imported), both GPUs are used, and a worker keeps its GPU run after run."""
    from greenadapt.api import finetune
    from greenadapt.comparison.workers import worker_slots

    assert worker_slots(["0", "1"], 2) == ["0", "1"] and worker_slots(["0", "1"], 5) == ["0", "1", "0", "1", "0"]
    missing = tmp_path / "no-train.tsv"
    jobs = [Job(f"run {i}", {"task": "ner", "train": str(missing), "model": str(tmp_path / "no-model"), "out": str(tmp_path / f"out-{i}")},
                tmp_path / f"run-{i}.log") for i in range(4)]
    outcomes = run_jobs(finetune, jobs, workers=2, threads=1, devices=["0", "1"])
    gpu_of: dict[int, set[str]] = {}
    for outcome in outcomes:
        text = outcome.job.log_file.read_text()
        (gpu,) = [g for g in ("0", "1") if f"{outcome.job.label} on GPU {g}" in text]
        gpu_of.setdefault(outcome.worker, set()).add(gpu)
    assert all(len(gpus) == 1 for gpus in gpu_of.values())  # a worker's GPU is its own for every run it trains
    assert set().union(*gpu_of.values()) == {"0", "1"} or len(gpu_of) == 1  # (one worker may have taken every run)


def test_compare_chooses_the_gpus_of_its_workers(tmp_path: Path) -> None:
    import pytest

    from finetune_helpers import comparison

    from greenadapt.comparison.dispatch import worker_devices
    from greenadapt.errors import UsageError

    def options(**values: Any) -> Any:
        return comparison(tmp_path / "cmp", task="ner", train=tmp_path, test=tmp_path, models=(("a", "x"), ("b", "y")), **values)

    assert worker_devices(options(devices=("2", "3"))) == ["2", "3"]
    assert worker_devices(options(device="cuda:3")) == ["3"]
    assert worker_devices(options(device="cpu")) == []
    import torch

    assert worker_devices(options()) == [str(i) for i in range(torch.cuda.device_count())]  # every visible GPU; none here
    with pytest.raises(UsageError, match="--devices"):
        options(devices=("0",), device="cpu").check()
    with pytest.raises(UsageError, match="--devices"):
        options(devices=("gpu0",)).check()
