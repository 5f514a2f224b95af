"""finetune --report-to tensorboard,mlflow (issue 57, point 7): real event files and a real local MLflow store,
read back with those libraries, hold what train_log.jsonl and metrics.json hold."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.errors import UsageError

# Not importorskip: importing mlflow installs its own log redaction in the whole test process (at collection time,
# for every other test); the libraries are imported only by the tests that use them.
pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(name) is None for name in ("tensorboard", "mlflow")),
                                reason="the trackers extra (tensorboard, mlflow-skinny) is not installed")


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import os

    import greenadapt

    root = tmp_path_factory.mktemp("trackers")
    store = "sqlite:///" + str(root / "mlflow.db")  # MLflow 3's local store (its file store is deprecated)
    previous = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME")}
    os.environ["MLFLOW_TRACKING_URI"] = store
    os.environ["MLFLOW_EXPERIMENT_NAME"] = "trackers-test"
    try:
        run = greenadapt.finetune(
            "ner", write_ner_file(root / "train.tsv", 40, seed=1), dev=write_ner_file(root / "dev.tsv", 12, seed=2),
            test=write_ner_file(root / "test.tsv", 12, seed=3), model=str(build_tiny_expanded(root / "model")), out=root / "runs" / "ncbi",
            epochs=2, batch_size=8, lr=3e-3, seeds=[1, 2], device="cpu", report_to="tensorboard,mlflow", progress=False,
        )
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return {"root": root, "run": run, "store": store}


def _log(run_folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_folder / "train_log.jsonl").read_text().splitlines()]


def test_tensorboard_event_files_hold_the_log_and_the_scores(tracked: dict[str, Any]) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tracked["run"].path
    metrics = json.loads((run / "metrics.json").read_text())["per_seed"]
    for seed in (1, 2):
        folder = tracked["root"] / "runs" / "tensorboard" / "ncbi" / f"seed-{seed}"
        events = EventAccumulator(str(folder))
        events.Reload()
        log = _log(run / f"seed-{seed}")
        steps = [r for r in log if "loss" in r]
        losses = [(e.step, e.value) for e in events.Scalars("train/loss")]
        assert losses == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in steps] and len(losses) == 10
        assert [e.value for e in events.Scalars("train/lr")] == pytest.approx([r["lr"] for r in steps], rel=1e-6)
        assert [(e.step, pytest.approx(e.value)) for e in events.Scalars("dev/score")] == \
            [(r["step"], r["score"]) for r in log if r.get("event") == "dev"]
        for pool in ("mean", "general", "domain"):
            (final,) = events.Scalars(f"test/{pool}/f1")
            assert final.value == pytest.approx(metrics[str(seed)]["test"][pool]["f1"], rel=1e-6) and final.step == 10
        assert "options" in events.Tags()["tensors"] or "options/text_summary" in events.Tags()["tensors"]


def test_mlflow_store_holds_a_run_per_seed_with_options_curves_and_scores(tracked: dict[str, Any]) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracked["store"])
    experiment = client.get_experiment_by_name("trackers-test")
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {"ncbi/seed-1", "ncbi/seed-2"}
    run_folder = tracked["run"].path
    metrics = json.loads((run_folder / "metrics.json").read_text())["per_seed"]
    for seed in (1, 2):
        mlflow_run = runs[f"ncbi/seed-{seed}"]
        assert mlflow_run.info.status == "FINISHED"
        params = mlflow_run.data.params
        assert params["seed"] == str(seed) and params["train.lr"] == "0.003" and params["task.task"] == "ner"
        history = client.get_metric_history(mlflow_run.info.run_id, "train/loss")
        steps = [r for r in _log(run_folder / f"seed-{seed}") if "loss" in r]
        assert sorted((m.step, m.value) for m in history) == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in steps]
        assert mlflow_run.data.metrics["test/mean/f1"] == pytest.approx(metrics[str(seed)]["test"]["mean"]["f1"], rel=1e-6)


def test_unknown_or_missing_trackers_are_refused_before_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from greenadapt.training.trackers import check_report_to

    assert check_report_to(["tensorboard,mlflow", "mlflow"]) == ("tensorboard", "mlflow")
    with pytest.raises(UsageError, match="unknown --report-to 'wandb'"):
        check_report_to(["wandb"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(UsageError, match="needs the mlflow package") as info:
        check_report_to(["mlflow"])
    assert "pip install mlflow-skinny" in info.value.one_line()
