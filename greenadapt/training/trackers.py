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

A tracker can neither hang a run nor lose it: the store is tried once before any training, within
``$GREENADAPT_TRACKER_TIMEOUT`` seconds (:func:`probe_trackers`; MLflow alone would retry 7 times 120 s), and a
tracker that fails once training has begun is a warning: the run goes on without it and its folder is written.
What MLflow prints (its "View run at" links) goes to the log, scrubbed of the URI's credentials, never to stdout.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from greenadapt.errors import UsageError
from greenadapt.switches import TRACKER_TIMEOUT_ENV, env_number

log = logging.getLogger(__name__)

REPORT_TO = ("tensorboard", "mlflow")
DEFAULT_TRACKER_TIMEOUT_S = 10
# MLflow's retries of one request once the store has answered the probe (its default, 7 with backoff, is minutes).
MLFLOW_RETRIES = 2
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


def tracker_timeout() -> int:
    """Seconds a tracker's store may take to answer (``$GREENADAPT_TRACKER_TIMEOUT``, default 10)."""
    return int(env_number(TRACKER_TIMEOUT_ENV, DEFAULT_TRACKER_TIMEOUT_S))


def probe_trackers(names: Sequence[str]) -> None:
    """Before any training: each tracker's store answers within :func:`tracker_timeout` seconds, or a one-line refusal
    (exit 2). MLflow's later requests are bounded the same way (unless ``$MLFLOW_HTTP_REQUEST_*`` say otherwise)."""
    if "mlflow" not in names:
        return
    timeout = tracker_timeout()
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(timeout))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(MLFLOW_RETRIES))
    uri = _mlflow_uri()
    with _environment(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT=str(timeout)):
        try:
            client = _mlflow_client()
            _mlflow_experiment(client)
        except Exception as error:  # noqa: BLE001 - whatever the store or its client raised: one line, before training
            raise UsageError(f"--report-to mlflow: the tracking store {uri} did not answer within {timeout} s ({_first_line(error)})",
                             hint=f"check $MLFLOW_TRACKING_URI, or set ${TRACKER_TIMEOUT_ENV} for a slow store") from None


def _mlflow_uri() -> str:
    from greenadapt.redaction import redact_url

    uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    return redact_url(uri).public if uri else "(MLflow's default, ./mlruns)"  # redact_url also has its secrets scrubbed from logs


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _first_line(error: BaseException) -> str:
    from greenadapt.redaction import scrub_secrets

    text = str(error).strip()
    return scrub_secrets(text.splitlines()[0][:300] if text else type(error).__name__)


@contextlib.contextmanager
def _library_prints_to_log(name: str) -> Iterator[None]:
    """What a tracker's library writes on stdout (MLflow's "View run at: URL") goes to the log, its credentials scrubbed:
    stdout holds greenadapt's result alone."""
    from greenadapt.redaction import scrub_secrets

    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            yield
    finally:
        for line in captured.getvalue().splitlines():
            if line.strip():
                log.info("%s: %s", name, scrub_secrets(line.strip()))


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
    """A tracker per name of ``names`` (as :func:`check_report_to` returns them) for the run ``out``, seed ``seed``; one
    that cannot open is left out with a warning (the store answered :func:`probe_trackers` before training)."""
    made: list[Tracker] = []
    for name in names:
        if name not in REPORT_TO:
            raise ValueError(f"no tracker {name!r}: names come from check_report_to")
        try:
            made.append(Guarded(name, TensorBoardTracker(tensorboard_dir(out, seed)) if name == "tensorboard"
                                else MlflowTracker(f"{out.name}/seed-{seed}")))
        except Exception as error:  # noqa: BLE001 - a tracker's failure never costs the run
            log.warning("--report-to %s: could not start tracking seed %d (%s); training goes on without it", name, seed,
                        _first_line(error))
    return made


class Guarded:
    """A tracker whose first failure is a warning: later calls are skipped and the run goes on (its own files hold
    everything a tracker would have had)."""

    def __init__(self, name: str, tracker: Tracker) -> None:
        self.name, self.tracker, self.failed = name, tracker, False

    def _call(self, method: str, *args: Any, **kwargs: Any) -> None:
        if self.failed:
            return
        try:
            getattr(self.tracker, method)(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - the store's or its client's: the run is worth more than its curves
            self.failed = True
            log.warning("--report-to %s failed (%s): the run goes on without it; its folder holds the log and scores",
                        self.name, _first_line(error))

    def params(self, values: Mapping[str, Any]) -> None:
        self._call("params", values)

    def record(self, record: Mapping[str, Any]) -> None:
        self._call("record", record)

    def metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        self._call("metrics", values, step=step)

    def close(self, *, finished: bool) -> None:
        self._call("close", finished=finished)


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


def _mlflow_client() -> Any:
    from mlflow.tracking import MlflowClient

    _mlflow_uri()  # the URI's credentials join the secrets scrubbed from every log line
    with _library_prints_to_log("mlflow"):
        return MlflowClient()  # $MLFLOW_TRACKING_URI, else MLflow's default store


def _mlflow_experiment(client: Any) -> str:
    """The id of the experiment runs go to (``$MLFLOW_EXPERIMENT_NAME``), made if the store has none of that name."""
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT
    with _library_prints_to_log("mlflow"):
        experiment = client.get_experiment_by_name(name)
        return str(experiment.experiment_id if experiment is not None else client.create_experiment(name))


class MlflowTracker:
    def __init__(self, run_name: str) -> None:
        self.client = _mlflow_client()
        experiment_id = _mlflow_experiment(self.client)
        with _library_prints_to_log("mlflow"):
            self.run_id = self.client.create_run(experiment_id, run_name=run_name, tags={"greenadapt": "finetune"}).info.run_id
        self.pending: list[Any] = []

    def params(self, values: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        pairs = [Param(k, v[:6000]) for k, v in sorted(flat(values).items())]
        with _library_prints_to_log("mlflow"):
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
        with _library_prints_to_log("mlflow"):
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
            with _library_prints_to_log("mlflow"):
                self.client.set_terminated(self.run_id, status="FINISHED" if finished else "FAILED")


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
