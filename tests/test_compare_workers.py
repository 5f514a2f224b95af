"""compare's worker processes (issue 58, item 3): several runs per process, each run's log and outcome its own.

The scores a worker's runs give equal one-at-a-time runs' (tests/test_compare.py, the parallel test); here: what
a worker does with runs that fail.
"""

from __future__ import annotations

import os
from pathlib import Path

from greenadapt.comparison.workers import Job, run_jobs


def test_failed_runs_are_reported_one_by_one_and_the_rest_still_run(tmp_path: Path) -> None:
    missing = tmp_path / "no-train.tsv"
    jobs = [
        Job(f"run {i}", {"task": task, "train": str(missing), "model": str(tmp_path / "no-model"), "out": str(tmp_path / f"out-{i}")},
            tmp_path / f"run-{i}.log")
        for i, task in enumerate(["ner", "pos", "ner", "classify"])
    ]
    outcomes = run_jobs(jobs, workers=2, threads=1)
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
