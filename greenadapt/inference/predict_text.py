"""``greenadapt predict`` on real input (read by :mod:`greenadapt.inference.prediction_input`): raw text, folders of
``.txt``, JSON lines, stdin; training-style files are labelled back in their own format.

Output: JSON lines — NER ``{"text", "entities": [{start, end, text, label, score}]}`` with character offsets into the
text, classification ``{"text", "label", "score", "scores"}`` — to a file (written atomically) or ``-`` (stdout,
streamed in batches so a pipe sees results as they are ready). Documents are predicted a window at a time (up to
``docs_per_window`` documents and ``chars_per_window`` characters), so memory does not grow with the input.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.artifacts.files import atomic_writer
from greenadapt.errors import UsageError
from greenadapt.inference.prediction_input import Source, is_stdio, open_source
from greenadapt.inference.windows import CHARS_PER_WINDOW, DOCS_PER_WINDOW, STALL_SECONDS, flushed_on_stalls, windows
from greenadapt.progress import NULL_PROGRESS, Progress, said_once

if TYPE_CHECKING:
    from greenadapt.inference.settings import PredictSettings
    from greenadapt.options import Run


@dataclass
class PredictSummary:
    """What ``greenadapt predict`` did, whatever the input's format."""

    output: str
    examples: int
    format: str
    pool: str
    metrics: dict[str, Any] | None = None  # a labelled training-style input is scored
    entities: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "output": self.output, "examples": self.examples, "format": self.format,
            "pool": self.pool, "metrics": self.metrics, "entities": self.entities,
        }


def predict_text(
    model: Any,
    source: Source,
    output: str | os.PathLike[str],
    *,
    docs_per_window: int = DOCS_PER_WINDOW,
    chars_per_window: int = CHARS_PER_WINDOW,
    progress: Progress = NULL_PROGRESS,
) -> PredictSummary:
    """Predict every document of a raw ``source`` with ``model`` (a :func:`greenadapt.load` object); JSON lines to ``output``.

    Documents are predicted in windows of up to ``docs_per_window`` documents and ``chars_per_window`` characters
    (a longer document is a window alone)."""
    if source.documents is None:
        raise ValueError("predict_text takes raw documents; a training-style file goes to run_predict")
    if docs_per_window < 1 or chars_per_window < 1:
        raise UsageError("docs_per_window and chars_per_window must be at least 1")
    counts = {"documents": 0, "entities": 0, "characters": 0}
    # Progress in documents (a line of text, a JSON record, a file): what a user counts. Beside it the text read so
    # far; for an uncompressed file of known size its share too (a compressed file's size is not its text's).
    size, position = (source.size, source.position) if not source.compressed else (None, None)
    progress.start("predicting", unit="documents")

    documents = flushed_on_stalls(source.documents, STALL_SECONDS, DOCS_PER_WINDOW) if source.live else source.documents

    beating = _Heartbeat(progress, lambda: (counts["documents"], _read_so_far(counts["characters"], size, position)))

    def lines() -> Iterator[str]:
        for window in windows(documents, docs_per_window, chars_per_window):
            with beating.during(f"a window of {len(window):,} documents"):
                predicted = _predict_batch(model, [r.text for r in window])
            for record, prediction in zip(window, predicted, strict=True):
                counts["documents"] += 1
                counts["characters"] += len(record.text) + 1
                if model.finds_entities:
                    counts["entities"] += len(prediction["entities"])
                yield json.dumps({**record.fields, **prediction}, ensure_ascii=False) + "\n"
            beating.update(counts["documents"], read=_read_so_far(counts["characters"], size, position))

    with said_once():
        write_lines(lines(), output)
    progress.finish()
    entities = counts["entities"] if model.finds_entities else None
    return PredictSummary(str(output), counts["documents"], source.format, model.mode, None, entities)


HEARTBEAT_CHECK_SECONDS = 5.0  # how often a window in progress tells the progress (which prints at its own interval)


class _Heartbeat:
    """Progress that speaks while a window is predicted: a window of 2,048 documents can take minutes on a busy CPU,
    and a cron log silent for minutes reads as a hang. A thread tells the progress every few seconds that the window
    is still running (the progress prints at its own interval, 30 s in a log); predictions are untouched (the same
    windows and batches: the same output on any machine, fast or slow)."""

    def __init__(self, progress: Progress, where: Callable[[], tuple[int, str]]) -> None:
        self.progress, self.where = progress, where
        self.lock = threading.Lock()

    def update(self, completed: float, **info: float | str) -> None:
        with self.lock:
            self.progress.update(completed, **info)

    @contextlib.contextmanager
    def during(self, what: str) -> Iterator[None]:
        done = threading.Event()

        def beat() -> None:
            while not done.wait(HEARTBEAT_CHECK_SECONDS):
                completed, read = self.where()
                self.update(completed, read=read, now=f"predicting {what}")

        thread = threading.Thread(target=beat, name="greenadapt-predict-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()


def _read_so_far(characters: int, size: int | None, position: Callable[[], int | None] | None) -> str:
    """``3.1 MB of text``; for an uncompressed file of known size ``3.1/45.0 MB (7%)``."""
    if size and position is not None:
        read = position()
        read = size if read is None else read  # None: the file is read to its end
        return f"{read / 1e6:.1f}/{size / 1e6:.1f} MB ({100 * read / size:.0f}%)"
    return f"{characters / 1e6:.1f} MB of text"


def _predict_batch(model: Any, texts: list[str]) -> list[dict[str, Any]]:
    if model.finds_entities:
        return [{"entities": [e.to_dict() for e in entities]} for entities in model.predict(texts)]
    return [{"label": p["label"], "score": p["score"], "scores": p["scores"]} for p in model.predict(texts)]


def write_lines(lines: Iterator[str], output: str | os.PathLike[str]) -> None:
    if is_stdio(output):
        for line in lines:
            sys.stdout.write(line)
        sys.stdout.flush()
        return
    target = Path(output)
    target.parent.mkdir(parents=True, exist_ok=True)
    # readers never see half the predictions under the final name; <output>.partial follows them as they come
    with atomic_writer(target, sidecar=True, user_path=True) as handle:
        for line in lines:
            handle.write(line)
            handle.flush()


def predict_input(settings: PredictSettings, *, force: bool = False, progress: Progress = NULL_PROGRESS) -> PredictSummary:
    """``greenadapt predict``: raw text, JSON lines, a folder or stdin → JSON lines; training-style files → labelled back.

    ``settings`` is the command's, whole: the model-running part (:class:`LoadSettings`) reaches the models as it is, so
    an option is its declaration and its use. Every option and the output are checked before the model is loaded.
    """
    from greenadapt.artifacts.destination import check_prediction_output
    from greenadapt.inference.labelling import ensemble_members, find_model_folder, run_predict
    from greenadapt.inference.multitask import multitask_run, predict_task, task_settings

    model, source, output, task_name, options = settings.members(), str(settings.source), settings.output, settings.task, settings
    file_format, ignore_labels = settings.file_format, settings.ignore_labels
    members = ensemble_members(model)
    if len(members) == 1:
        model = members[0]
    multitask = multitask_run(members, task_name) is not None
    # (the settings were checked when they were made: --header's choices, the runtime's options)
    if not is_stdio(output):
        for member in members:
            check_prediction_output(output, force=force, model=member, input_path=os.devnull if is_stdio(source) else source)
    overrides = {k: v for k, v in settings.reader_overrides(settings.header).items() if v is not None}
    founds = []
    if multitask:
        task = task_settings(members[0], task_name).task
    else:
        founds = [find_model_folder(m) for m in members]  # verified once; the models are opened from what it found
        from greenadapt.inference.labelling import check_ensemble

        check_ensemble(founds)
        task = founds[0][1].task
    opened = open_source(task, source, file_format=file_format, text_field=overrides.get("text_field"))
    try:
        if opened.path is None:
            from greenadapt.inference.multitask import open_task
            from greenadapt.inference.predictor import open_ensemble

            predictor = open_task(members[0], task_name, options) if multitask else open_ensemble(founds, options=options)
            return predict_text(predictor, opened, output, progress=progress)
        if file_format != "auto" and opened.format != "dataset":
            overrides["format"] = "jsonl" if opened.format == "training-jsonl" else opened.format
        found = founds[0] if len(founds) == 1 else None
        labeller = partial(predict_task, task=task_name) if multitask else partial(run_predict, found=found)
        target = _temporary_output(opened.path) if is_stdio(output) else Path(output)
        try:
            result = labeller(
                model, opened.path, target, options=options, ignore_labels=ignore_labels, reader_overrides=overrides,
                force=force or is_stdio(output),  # the temporary file is ours
            )
            if is_stdio(output):
                with open(target, encoding="utf-8") as handle:
                    write_lines(iter(handle), output)
        finally:
            if is_stdio(output):
                target.unlink(missing_ok=True)
        return PredictSummary(str(output), result.examples, opened.format, result.pool, result.metrics)
    finally:
        if opened.spooled and opened.path is not None:
            opened.path.unlink(missing_ok=True)


def _temporary_output(near: Path) -> Path:
    fd, tmp = tempfile.mkstemp(prefix="greenadapt-predict.", suffix=near.suffix or ".txt")
    os.close(fd)
    return Path(tmp)


def run_predict(settings: PredictSettings, run: Run) -> PredictSummary:
    """``greenadapt predict`` from the command's settings."""
    return predict_input(settings, force=run.force, progress=run.progress)
