"""Experiment trackers (``finetune --report-to tensorboard,mlflow``): what a run's log holds, where a lab looks.

Each training step's record (loss, learning rate, gradient norm, domain share) and each dev scoring go to every
tracker as they are written to ``train_log.jsonl``; the run's recorded options go in as parameters at the start,
its dev and test scores per pooling mode at the end. Neither library is needed unless asked for: they are the
optional extra ``greenadapt[trackers]`` and are checked (one line naming the pip command) before training.

- TensorBoard: event files in ``<out's folder>/tensorboard/<out's name>/seed-<s>/`` (beside the run folder,
  which is written whole only at the end, so the curves can be watched live: ``tensorboard --logdir
  <out's folder>/tensorboard``).
- MLflow: a run per seed in the experiment ``$MLFLOW_EXPERIMENT_NAME`` (default ``greenadapt``) of the tracking
  store ``$MLFLOW_TRACKING_URI`` (default: MLflow's own), named ``<out's name>/seed-<s>``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from greenadapt.errors import UsageError

REPORT_TO = ("tensorboard", "mlflow")
# The scalars of a step record, as tracked: train/<name>
STEP_FIELDS = ("loss", "lr", "grad_norm", "domain_units", "units", "wordpieces")
DEFAULT_EXPERIMENT = "greenadapt"
MLFLOW_BATCH = 900  # metrics per store write (MLflow's limit is 1,000)


class Tracker(Protocol):
    def params(self, values: Mapping[str, Any]) -> None: ...
    def record(self, record: Mapping[str, Any]) -> None: ...
    def metrics(self, values: Mapping[str, float], step: int | None = None) -> None: ...
    def close(self, *, finished: bool) -> None: ...


def check_report_to(names: Iterable[str]) -> tuple[str, ...]:
    """The trackers asked for, each known and importable (before any data is read)."""
    import importlib.util

    chosen = tuple(dict.fromkeys(n.strip().lower() for name in names for n in str(name).split(",") if n.strip()))
    for name in chosen:
        if name not in REPORT_TO:
            raise UsageError(f"unknown --report-to {name!r}", hint=f"choose from {', '.join(REPORT_TO)}")
        if importlib.util.find_spec(name) is None:  # each tracker's package is named as the tracker
            raise UsageError(f"--report-to {name} needs the {name} package, which is not installed",
                             hint=f"pip install {'mlflow-skinny' if name == 'mlflow' else name} (or greenadapt's trackers extra)")
    return chosen


def flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested options as ``train.lr=5e-05`` pairs (what trackers take as parameters)."""
    out: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat(value, f"{name}."))
        else:
            out[name] = value if isinstance(value, str) else json.dumps(value, default=str)
    return out


def open_trackers(names: Sequence[str], out: Path, seed: int) -> list[Tracker]:
    """A tracker per name of ``names`` (as :func:`check_report_to` returns them) for the run ``out``, seed ``seed``."""
    made: list[Tracker] = []
    for name in names:
        if name == "tensorboard":
            made.append(TensorBoardTracker(tensorboard_dir(out, seed)))
        elif name == "mlflow":
            made.append(MlflowTracker(f"{out.name}/seed-{seed}"))
        else:
            raise ValueError(f"no tracker {name!r}: names come from check_report_to")
    return made


@contextlib.contextmanager
def tracking(names: Sequence[str], out: Path | None, seed: int, params: Mapping[str, Any]) -> Iterator[list[Tracker]]:
    """The trackers of one seed's run, given its options; closed at the end, as failed when an error ended it."""
    trackers = open_trackers(names, out, seed) if names and out is not None else []
    for tracker in trackers:
        tracker.params({**params, "seed": seed})
    finished = False
    try:
        yield trackers
        finished = True
    finally:
        for tracker in trackers:
            tracker.close(finished=finished)


def report_scores(trackers: Sequence[Tracker], metrics: Mapping[str, Any], step: int) -> None:
    """A run's dev and test scores (``metrics[split][pool][name]``) as ``test/mean/f1``, ... at its last step."""
    scores = {f"{split}/{pool}/{name}": value for split in ("dev", "test") for pool, figures in (metrics.get(split) or {}).items()
              if isinstance(figures, Mapping) for name, value in figures.items() if isinstance(value, int | float)}
    for tracker in trackers:
        tracker.metrics(scores, step=step)


def tensorboard_dir(out: Path, seed: int) -> Path:
    return out.parent / "tensorboard" / out.name / f"seed-{seed}"


class TensorBoardTracker:
    def __init__(self, folder: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.writer = SummaryWriter(log_dir=str(folder))

    def params(self, values: Mapping[str, Any]) -> None:
        self.writer.add_text("options", "\n".join(f"    {k} = {v}" for k, v in sorted(flat(values).items())), 0)

    def record(self, record: Mapping[str, Any]) -> None:
        step = record.get("step")
        if not isinstance(step, int):
            return
        if record.get("event") == "dev" and isinstance(record.get("score"), int | float):
            self.writer.add_scalar("dev/score", float(record["score"]), step)
        elif "loss" in record:
            for name in STEP_FIELDS:
                if isinstance(record.get(name), int | float):
                    self.writer.add_scalar(f"train/{name}", float(record[name]), step)

    def metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, float(value), step or 0)

    def close(self, *, finished: bool) -> None:
        self.writer.close()


class MlflowTracker:
    def __init__(self, run_name: str) -> None:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        try:
            self.client = MlflowClient()  # $MLFLOW_TRACKING_URI, else MLflow's default store
            experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
            experiment = self.client.get_experiment_by_name(experiment_name)
            experiment_id = experiment.experiment_id if experiment is not None else self.client.create_experiment(experiment_name)
            self.run_id = self.client.create_run(experiment_id, run_name=run_name, tags={"greenadapt": "finetune"}).info.run_id
            self.pending: list[Any] = []
        except MlflowException as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise UsageError(f"--report-to mlflow: {first}", hint="set $MLFLOW_TRACKING_URI to a store MLflow can write, "
                             "e.g. sqlite:///mlflow.db") from None

    def params(self, values: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        pairs = [Param(k, v[:6000]) for k, v in sorted(flat(values).items())]
        for start in range(0, len(pairs), 100):  # MLflow takes at most 100 parameters a call
            self.client.log_batch(self.run_id, params=pairs[start : start + 100])

    def record(self, record: Mapping[str, Any]) -> None:
        """Buffered: one store write per :data:`MLFLOW_BATCH` metrics, not one per training step (a step of a small
        model on a GPU is milliseconds; a write to the store is not)."""
        from mlflow.entities import Metric

        step = record.get("step")
        if not isinstance(step, int):
            return
        if record.get("event") == "dev" and isinstance(record.get("score"), int | float):
            self.pending.append(Metric("dev/score", float(record["score"]), _now_ms(), step))
        elif "loss" in record:
            timestamp = _now_ms()
            self.pending += [Metric(f"train/{name}", float(record[name]), timestamp, step) for name in STEP_FIELDS
                             if isinstance(record.get(name), int | float)]
        if len(self.pending) >= MLFLOW_BATCH:
            self.flush()

    def flush(self) -> None:
        while self.pending:  # MLflow takes at most 1,000 metrics a call
            batch, self.pending = self.pending[:MLFLOW_BATCH], self.pending[MLFLOW_BATCH:]
            self.client.log_batch(self.run_id, metrics=batch)

    def metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        self.pending += [Metric(name, float(value), _now_ms(), step or 0) for name, value in values.items()]
        self.flush()

    def close(self, *, finished: bool) -> None:
        try:
            self.flush()
        finally:
            self.client.set_terminated(self.run_id, status="FINISHED" if finished else "FAILED")


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
