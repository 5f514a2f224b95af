"""What ``greenadapt predict`` reads: a file, a folder (every ``*.txt`` below it is one document) or ``-`` for
standard input, its format named or decided from its first lines, opened before any model is loaded.

- ``text``: one document per line; the output has one JSON line per input line, empty lines included, so
  ``paste``/``jq`` can line them up.
- ``jsonl``: objects with a text field (``text`` or the model's training field); each object comes back with its
  fields plus the prediction.
- ``columns``/``tsv`` (what training reads): labelled like today's ``predict --input``, the file written back with a
  prediction column; a saved ``datasets`` folder or a ``.parquet`` file: JSON lines of the rows with their predictions.

``auto`` decides from the first lines: ``{`` means JSON lines (an NER object whose words are a list is a
training-style file); for NER, lines of at most four whitespace-separated fields ending in a BIO label, or single
words, are a column file; for classification a tab means TSV; anything else is raw text. A compressed file
(``.gz``/``.bz2``/``.xz``) streams; a training-style one, or standard input, is spooled to a temporary file for the
readers that take a path.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from greenadapt.data.ner_labels import NER_LABEL
from greenadapt.data.task_files import NER_TOKEN_NAMES, TEXT_NAMES, json_objects, pick_key
from greenadapt.errors import DataError, UsageError
from greenadapt.structured_text import NestedTooDeeply, loads_json
from greenadapt.switches import MAX_SPOOL_ENV, env_number
from greenadapt.tasks import get_task

STDIO = "-"
RAW_FORMATS = ("auto", "text", "jsonl", "columns", "tsv")  # what --format accepts
TAKEN_AS_NAMED = ("columns", "tsv", "text")  # --format values used as given: no line is read to decide
_SNIFF_LINES = 50


def is_stdio(value: str | os.PathLike[str] | None) -> bool:
    return value is not None and str(value) == STDIO


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
    documents: Iterator[Record] | None = None
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
        return Source(fmt, path=spool(stream, handle, name), spooled=True)  # (the readers of training files take a plain path)
    documents = _text_lines(stream, handle) if fmt == "text" else _json_lines(stream, handle, name, text_field)
    if isinstance(handle, _FileText):
        return Source(fmt, documents=documents, size=Path(source).stat().st_size, position=handle.bytes_read,
                      compressed=_compressed(Path(source)))
    return Source(fmt, documents=documents, live=is_stdio(source))


@dataclass
class Record:
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


def _text_lines(lines: Iterator[str], handle: IO[str]) -> Iterator[Record]:
    with handle:
        for number, line in enumerate(lines, 1):
            text = line.rstrip("\r\n")
            yield Record(text, {"line": number, "text": text})


def _json_lines(lines: Iterator[str], handle: IO[str], name: str, text_field: str | None) -> Iterator[Record]:
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
            yield Record(text, obj)


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


def _folder_documents(folder: Path) -> Iterator[Record]:
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
        yield Record(text, {"file": str(path.relative_to(folder)), "text": text})


DEFAULT_MAX_SPOOL_MB = 4096  # a compressed task file or stdin decompressed to disk: far past any labelled test set


def spool_limit() -> int:
    """Bytes a spooled input may take in $TMPDIR: ``$GREENADAPT_MAX_SPOOL_MB`` (default 4,096 MB)."""
    return int(env_number(MAX_SPOOL_ENV, DEFAULT_MAX_SPOOL_MB)) << 20


def spool(lines: Iterator[str], handle: IO[str], name: str = "<stdin>") -> Path:
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
