"""``greenadapt predict`` on real input: raw text, folders of ``.txt``, JSON lines, stdin.

Input (``source``): a file, a folder (every ``*.txt`` below it is one
document) or ``-`` for standard input. Formats:

- ``text``: one document per line; the output has one JSON line per input
  line, empty lines included, so ``paste``/``jq`` can line them up.
- ``jsonl``: objects with a text field (``text`` or the model's training
  field); each object comes back with its fields plus the prediction.
- ``columns``/``tsv`` (what training reads): labelled like today's
  ``predict --input``, the file written back with a prediction column; a
  saved ``datasets`` folder or a ``.parquet`` file: JSON lines of the rows
  with their predictions.

``auto`` decides from the first lines: ``{`` means JSON lines (an NER object
whose words are a list is a training-style file); for NER, lines of at most
four whitespace-separated fields ending in a BIO label, or single words,
are a column file; for classification a tab means TSV; anything else is
raw text.

Output: JSON lines — NER ``{"text", "entities": [{start, end, text, label,
score}]}`` with character offsets into the text, classification ``{"text",
"label", "score", "scores"}`` — to a file (written atomically) or ``-``
(stdout, streamed in batches so a pipe sees results as they are ready).
Documents are predicted a window at a time (up to ``docs_per_window`` documents
and ``chars_per_window`` characters), so memory does not grow with the input.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, IO, Any

from greenadapt.tasks import get_task
from greenadapt.inference.windows import CHARS_PER_WINDOW, DOCS_PER_WINDOW, STALL_SECONDS, flushed_on_stalls, windows
from greenadapt.artifacts.files import atomic_writer
from greenadapt.data.ner_labels import NER_LABEL
from greenadapt.data.task_files import NER_TOKEN_NAMES, TEXT_NAMES, json_objects, pick_key
from greenadapt.errors import DataError, UsageError
from greenadapt.progress import NULL_PROGRESS, Progress, said_once
from greenadapt.structured_text import NestedTooDeeply, loads_json
from greenadapt.switches import MAX_SPOOL_ENV, env_number

if TYPE_CHECKING:
    from greenadapt.inference.settings import PredictSettings
    from greenadapt.options import Run

STDIO = "-"
RAW_FORMATS = ("auto", "text", "jsonl", "columns", "tsv")  # what --format accepts
TAKEN_AS_NAMED = ("columns", "tsv", "text")  # --format values used as given: no line is read to decide
_SNIFF_LINES = 50


def is_stdio(value: str | os.PathLike[str] | None) -> bool:
    return value is not None and str(value) == STDIO


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


TRAINING_FORMATS = ("columns", "tsv", "training-jsonl", "dataset")


def detect_format(task: str, head: list[str], requested: str = "auto", text_field: str | None = None) -> str:
    """The format of a task's input from its first lines (see the module docstring).

    ``training-jsonl`` is JSON lines the training reader takes (NER objects
    with a word list; any classification JSON lines), labelled as today.
    """
    if requested not in RAW_FORMATS:
        raise UsageError(f"unknown --format {requested!r}", hint=f"choose from {', '.join(RAW_FORMATS)}")
    lines = [line for line in head if line.strip()]
    if requested in TAKEN_AS_NAMED:
        return requested
    first = lines[0].lstrip() if lines else ""
    if requested == "jsonl" or first.startswith("{"):
        if not get_task(task).finds_entities:
            return "training-jsonl"
        try:
            obj = loads_json(first, max_depth=None) if first else {}
        except (json.JSONDecodeError, NestedTooDeeply):
            return "jsonl"  # the JSON-lines reader names the line
        keys = (text_field,) if text_field else NER_TOKEN_NAMES
        return "training-jsonl" if isinstance(obj, dict) and any(isinstance(obj.get(k), list) for k in keys) else "jsonl"
    if not lines:
        return "text"
    if not get_task(task).finds_entities:
        return "tsv" if "\t" in first else "text"
    tabbed = [line.rstrip("\n").split("\t") for line in lines if "\t" in line]
    if len(tabbed) == len(lines) and all(2 <= len(f) <= 4 and f[0].strip() and " " not in f[0].strip() for f in tabbed):
        # word<TAB>label on every line: columns, whatever the labels (the column reader names a bad one and its line).
        return "columns"
    fields = [line.split("\t") if "\t" in line else line.split() for line in lines]
    if all(len(f) == 1 for f in fields):
        return "columns" if len(lines) > 1 and not any(_looks_like_prose(line) for line in lines) else "text"
    multi = [f for f in fields if len(f) > 1]
    if all(len(f) <= 4 for f in fields) and sum(bool(NER_LABEL.match(f[-1])) for f in multi) >= 0.9 * len(multi):
        return "columns"
    return "text"


def _looks_like_prose(line: str) -> bool:
    return line.rstrip().endswith((".", "?", "!")) and len(line.strip()) > 1


@dataclass
class Source:
    """An input opened and sniffed: its format, and either its documents (raw formats) or a path (training formats)."""

    format: str
    documents: Iterator[_Record] | None = None
    path: Path | None = None  # a training-style file: the input itself, or standard input spooled to a temporary file
    spooled: bool = False
    size: int | None = None  # bytes of the input file (compressed, for a .gz): the progress's total, where known
    position: Callable[[], int | None] | None = None  # how far into those bytes the reading is
    compressed: bool = False  # the file's bytes are not its text's: no share of them is shown
    live: bool = False  # standard input: a feed may pause, and what it gave is predicted when it does


def open_source(task: str, source: str | os.PathLike[str], *, file_format: str = "auto", text_field: str | None = None) -> Source:
    """Open ``source`` and decide its format from the first lines, before any model is loaded."""
    from greenadapt.data.datasets_input import is_dataset_input

    if not is_stdio(source) and is_dataset_input(Path(source)):
        return Source("dataset", path=Path(source))
    if not is_stdio(source) and Path(source).is_dir():
        if file_format not in ("auto", "text"):
            raise UsageError(f"a folder input is read as .txt documents, not --format {file_format}", path=source)
        return Source("folder", documents=_folder_documents(Path(source)))
    handle, name = _open_text(source)
    lines = _decoded(handle, name)
    # (a live feed's first lines are predicted without waiting for 50 of them where the format is named)
    head = [] if file_format in TAKEN_AS_NAMED else list(itertools.islice(lines, _SNIFF_LINES))
    fmt = detect_format(task, head, file_format, text_field)
    stream = itertools.chain(head, lines)
    if fmt in TRAINING_FORMATS:
        if not is_stdio(source) and not _compressed(Path(source)):
            handle.close()
            return Source(fmt, path=Path(source))
        return Source(fmt, path=_spool(stream, handle, name), spooled=True)  # (the readers of training files take a plain path)
    documents = _text_lines(stream, handle) if fmt == "text" else _json_lines(stream, handle, name, text_field)
    if isinstance(handle, _FileText):
        return Source(fmt, documents=documents, size=Path(source).stat().st_size, position=handle.bytes_read,
                      compressed=_compressed(Path(source)))
    return Source(fmt, documents=documents, live=is_stdio(source))


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


@dataclass
class _Record:
    text: str
    fields: dict[str, Any]  # what the output line starts with: the input object, or {"text": ...} / {"file": ..., "text": ...}


class _FileText(io.TextIOWrapper):
    """An input file's text, decompressed as it streams where its name says (``.gz``/``.bz2``/``.xz``, as ``adapt
    --corpus`` reads them: a cron job's day of text need not be unpacked first); closing it closes the file, and
    :meth:`bytes_read` says how far into the file (its compressed bytes) the reading is."""

    def __init__(self, path: Path) -> None:
        from greenadapt.corpus.formats import decompressor, split_compression

        self._file = open(path, "rb")  # noqa: SIM115 - closed with the text
        compression = split_compression(path.name)[1]
        super().__init__(decompressor(compression, self._file) if compression else self._file, encoding="utf-8-sig", newline="\n")

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._file.close()  # a decompressor leaves the file it reads open

    def bytes_read(self) -> int | None:
        """None once the input is read to its end (and closed)."""
        return None if self._file.closed else self._file.tell()


def _compressed(path: Path) -> bool:
    from greenadapt.corpus.formats import split_compression

    return split_compression(path.name)[1] is not None


def _open_text(source: str | os.PathLike[str]) -> tuple[IO[str], str]:
    if is_stdio(source):
        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8-sig", errors="strict", newline="\n"), "<stdin>"
    path = Path(source)
    if not path.is_file():
        raise DataError("input not found", path=path, hint="pass a file, a folder of .txt files, or - for stdin")
    return _FileText(path), str(path)


def _text_lines(lines: Iterator[str], handle: IO[str]) -> Iterator[_Record]:
    with handle:
        for number, line in enumerate(lines, 1):
            text = line.rstrip("\r\n")
            yield _Record(text, {"line": number, "text": text})


def _json_lines(lines: Iterator[str], handle: IO[str], name: str, text_field: str | None) -> Iterator[_Record]:
    key = None
    with handle:
        for number, obj in json_objects(enumerate(lines, 1), Path(name)):
            if key is None:
                key = pick_key(obj, text_field, TEXT_NAMES)
                if key is None:
                    raise DataError(f"no text field (looked for {', '.join(TEXT_NAMES)})", path=Path(name), line=number,
                                    hint="name it with --text-field")
            text = obj.get(key)
            if not isinstance(text, str):
                raise DataError(f"field {key!r} is missing or not a string", path=Path(name), line=number, hint="every line needs its text")
            yield _Record(text, obj)


def _decoded(handle: IO[str], name: str) -> Iterator[str]:
    import lzma
    import zlib

    from greenadapt.structured_text import bounded_lines

    try:
        yield from bounded_lines(handle, Path(name))
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text (byte {exc.start} of a line cannot be decoded)", path=Path(name),
                        hint="convert the input to UTF-8") from None
    except (EOFError, lzma.LZMAError, zlib.error, OSError) as exc:  # a .gz/.bz2/.xz cut short or not compressed at all
        raise DataError(f"unreadable compressed input ({exc})", path=Path(name),
                        hint="check the file (gzip -t), or give it uncompressed") from None


def _folder_documents(folder: Path) -> Iterator[_Record]:
    files = sorted(p for p in folder.rglob("*.txt") if p.is_file())
    if not files:
        raise DataError("the folder holds no .txt files", path=folder, hint="one document per .txt file")
    from greenadapt.structured_text import MAX_LINE_CHARS

    for path in files:
        if path.stat().st_size > MAX_LINE_CHARS:  # a document is read whole: bounded as a line is
            raise DataError(f"a document of {path.stat().st_size:,} bytes, past the {MAX_LINE_CHARS:,} greenadapt reads whole", path=path,
                            hint="split it into smaller .txt files")
        try:
            text = path.read_text(encoding="utf-8-sig")
        except UnicodeDecodeError:
            raise DataError("not UTF-8 text", path=path, hint="convert the file to UTF-8") from None
        yield _Record(text, {"file": str(path.relative_to(folder)), "text": text})


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


DEFAULT_MAX_SPOOL_MB = 4096  # a compressed task file or stdin decompressed to disk: far past any labelled test set


def spool_limit() -> int:
    """Bytes a spooled input may take in $TMPDIR: ``$GREENADAPT_MAX_SPOOL_MB`` (default 4,096 MB)."""
    return int(env_number(MAX_SPOOL_ENV, DEFAULT_MAX_SPOOL_MB)) << 20


def _spool(lines: Iterator[str], handle: IO[str], name: str = "<stdin>") -> Path:
    """A compressed task file or standard input (its sniffed first lines, then the rest) in a temporary file, for the
    readers that need a path: at most :func:`spool_limit` bytes, and removed again if anything stops it (a bomb, a
    truncated archive, Ctrl-C, SIGTERM)."""
    limit = spool_limit()
    fd, tmp = tempfile.mkstemp(prefix="greenadapt-stdin.", suffix=".txt")
    try:
        with handle, os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            written = 0
            for line in lines:
                written += len(line)
                if written > limit:
                    raise DataError(f"decompressed, the input passes the {limit >> 20:,} MB greenadapt spools to read it", path=Path(name),
                                    hint=f"decompress it yourself and pass the file, or raise ${MAX_SPOOL_ENV}")
                out.write(line)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def predict_input(settings: PredictSettings, *, force: bool = False, progress: Progress = NULL_PROGRESS) -> PredictSummary:
    """``greenadapt predict``: raw text, JSON lines, a folder or stdin → JSON lines; training-style files → labelled back.

    ``settings`` is the command's, whole: the model-running part (:class:`LoadSettings`) reaches the models as it is, so
    an option is its declaration and its use. Every option and the output are checked before the model is loaded.
    """
    from greenadapt.artifacts.destination import check_prediction_output
    from greenadapt.inference.labelling import ensemble_members, find_model_folder, run_predict
    from greenadapt.inference.multitask import is_multitask, multitask_predictor

    model, source, output, task_name, options = settings.members(), str(settings.source), settings.output, settings.task, settings
    file_format, ignore_labels = settings.file_format, settings.ignore_labels
    members = ensemble_members(model)
    if len(members) == 1:
        model = members[0]
    elif task_name is not None or any(is_multitask(m) for m in members):
        raise UsageError("an ensemble of multitask runs is not supported", hint="pass one multitask run with --task")
    # (the settings were checked when they were made: --header's choices, the runtime's options)
    if not is_stdio(output):
        for member in members:
            check_prediction_output(output, force=force, model=member, input_path=os.devnull if is_stdio(source) else source)
    overrides = {k: v for k, v in settings.reader_overrides(settings.header).items() if v is not None}
    multitask = len(members) == 1 and (task_name is not None or is_multitask(members[0]))
    founds = []
    if multitask:
        _refuse_onnx_for_multitask(options, str(members[0]))
        spooled = is_stdio(source)  # its tasks read training-style files only
        opened = Source("training", path=_spool(*_stdin_lines()) if spooled else Path(source), spooled=spooled)
    else:
        founds = [find_model_folder(m) for m in members]  # verified once; the models are opened from what it found
        from greenadapt.inference.labelling import check_ensemble

        check_ensemble(founds)
        opened = open_source(founds[0][1].task, source, file_format=file_format, text_field=overrides.get("text_field"))
    try:
        if opened.path is None:
            from greenadapt.inference.predictor import open_ensemble

            assert founds  # a model is opened whenever the input is not a task file
            predictor = open_ensemble(founds, options=options)
            return predict_text(predictor, opened, output, progress=progress)
        if file_format != "auto" and opened.format != "dataset":
            overrides["format"] = "jsonl" if opened.format == "training-jsonl" else opened.format
        found = founds[0] if len(founds) == 1 else None
        labeller = multitask_predictor(members[0], task_name) if multitask else partial(run_predict, found=found)
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


def _refuse_onnx_for_multitask(options: PredictSettings, run: str) -> None:
    if options.runtime == "onnx" or options.quantize != "none":  # PALs run in torch only: never silently in torch
        raise UsageError("ONNX Runtime (--runtime onnx, --quantize) does not run multitask (PALs) runs", path=run,
                         hint="leave --runtime and --quantize out (torch runs it)")


def _stdin_lines() -> tuple[Iterator[str], IO[str], str]:
    handle, name = _open_text(STDIO)
    return _decoded(handle, name), handle, name


def _temporary_output(near: Path) -> Path:
    fd, tmp = tempfile.mkstemp(prefix="greenadapt-predict.", suffix=near.suffix or ".txt")
    os.close(fd)
    return Path(tmp)


def run_predict(settings: PredictSettings, run: Run) -> PredictSummary:
    """``greenadapt predict`` from the command's settings."""
    return predict_input(settings, force=run.force, progress=run.progress)
