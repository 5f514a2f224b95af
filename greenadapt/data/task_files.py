"""Task files in, predictions out.

NER files:

- *column* files: one word per line, the label in the last column, a blank
  line between sentences, ``-DOCSTART-`` lines ignored. That covers
  BioBERT's ``word<TAB>label`` and CoNLL's ``word POS chunk label``.
  Columns are split on tabs when the line has one, else on whitespace.
- *JSON lines*: ``{"tokens": [...], "tags": [...]}`` (keys settable).

Labels are ``O`` or ``B``/``I``/``E``/``S`` with an optional ``-TYPE``:
untyped or typed, BIO or BIOES.

Classification files:

- *JSON lines*: ``{"text": ..., "label": ...}``, optionally a second text
  for sentence pairs (keys settable).
- *TSV*: columns by header name or by 0-based number; a UTF-8 byte-order
  mark is ignored; a header row is detected (``header="auto"``) when it holds
  a column name we look for.

Predictions are written in the input's own format: column files get one
more column, JSON lines one more key, TSV files one more column.
"""

from __future__ import annotations

import json
import os
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from greenadapt.errors import DataError, UsageError
from greenadapt.structured_text import NestedTooDeeply, bounded_lines, loads_json
from greenadapt.data.ner_labels import check_ner_label, untyped
from greenadapt.data.settings import HEADERS

log = logging.getLogger(__name__)

Format = Literal["columns", "jsonl", "tsv", "dataset"]
FORMATS = ("auto", "columns", "jsonl", "tsv")
DOCSTART = "-DOCSTART-"

# Looked for, in this order, when no field or column is named. They cover
# GLUE (RTE, MRPC, QQP, MNLI, SST-2), SciBERT/DAPT JSON lines and the usual
# ``text``/``text_b`` conventions.
TEXT_NAMES = ("text", "sentence", "sentence1", "#1 String", "text_a", "premise", "question1", "question")
PAIR_NAMES = ("text_b", "sentence2", "#2 String", "hypothesis", "question2")
LABEL_NAMES = ("label", "Quality", "gold_label", "labels")
NER_TOKEN_NAMES = ("tokens", "words")
NER_TAG_NAMES = ("tags", "ner_tags", "labels")


@dataclass(frozen=True)
class ReaderOptions:
    """How to find the fields of a task file; None means: look for the usual names."""

    format: str = "auto"
    text_field: str | None = None
    pair_field: str | None = None
    label_field: str | None = None
    header: Literal["auto", "yes", "no"] = "auto"
    # NER: the entity type given to bare B/I/E/S labels ("B" -> "B-Disease"); typed labels keep theirs.
    entity_type: str | None = None

    def as_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "format": self.format,
            "text_field": self.text_field,
            "pair_field": self.pair_field,
            "label_field": self.label_field,
            "header": self.header,
        }
        if self.entity_type is not None:  # only when used: runs made before the option stay up to date
            config["entity_type"] = self.entity_type
        return config

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ReaderOptions:
        keys = ("format", "text_field", "pair_field", "label_field", "header", "entity_type")
        return cls(**{k: config[k] for k in keys if k in config})


@dataclass(frozen=True)
class NerSentence:
    words: tuple[str, ...]
    labels: tuple[str, ...] | None  # None: the file carries no labels
    lines: tuple[int, ...]  # 1-based source line of each word (JSON lines: the object's line, repeated)


@dataclass(frozen=True)
class TextExample:
    text: str
    pair: str | None
    label: str | None
    line: int


@dataclass
class TaskFile:
    """A read task file: its examples and what is needed to write predictions back in its format."""

    path: Path
    format: Format
    examples: list[Any]  # NerSentence or TextExample
    labelled: bool
    field_names: dict[str, str | int | None]

    def gold(self) -> list[Any]:
        """Each example's gold label: a tag list per NER sentence, one label per classified example."""
        return [list(e.labels or ()) if isinstance(e, NerSentence) else e.label for e in self.examples]

    def labels(self) -> list[str]:
        found: set[str] = set()
        for example in self.examples:
            if isinstance(example, NerSentence):
                found.update(example.labels or ())
            elif example.label is not None:
                found.add(example.label)
        return sorted(found)


# --------------------------------------------------------------------------
# Reading


def check_task_paths(*paths: str | os.PathLike[str] | None) -> None:
    """Every given task file (or dataset folder) is there: a run refuses a missing --test before it reads --train."""
    from greenadapt.data.datasets_input import is_dataset_input

    for path in paths:
        if path is not None and not is_dataset_input(Path(path)) and not Path(path).is_file():
            raise DataError("task file not found", path=path, hint="check the path")


def read_task_file(path: str | Path, task: str, options: ReaderOptions, *, require_labels: bool) -> TaskFile:
    """Read a NER or classification file; every problem is a DataError naming file and line."""
    p = Path(path)
    if options.header not in HEADERS:
        raise UsageError(f"unknown --header {options.header!r}", hint="auto, yes or no")
    from greenadapt.data.datasets_input import dataset_rows, is_dataset_input

    if task not in ("ner", "classify"):
        raise UsageError(f"no reader for task {task!r}")
    fmt: Format
    if is_dataset_input(p):
        fmt = "dataset"
        result = (_read_ner_jsonl if task == "ner" else _read_text_jsonl)(p, options, dataset_rows(p))
        result.format = fmt
    elif not p.is_file():
        check_task_paths(p)
    elif task == "ner":
        fmt = _detect_format(p, task, options.format)
        fmt = "columns" if fmt == "tsv" else fmt
        result = _read_ner_jsonl(p, options) if fmt == "jsonl" else _read_ner_columns(p)
    else:
        fmt = _detect_format(p, task, options.format)
        fmt = "tsv" if fmt == "columns" else fmt
        result = _read_text_jsonl(p, options) if fmt == "jsonl" else _read_text_tsv(p, options)
    if task == "ner" and options.entity_type is not None:
        result.examples = [typed_sentence(s, options.entity_type) for s in result.examples]
    if not result.examples:
        raise DataError("the file holds no examples", path=p, hint="is it the right file, and not empty?")
    if require_labels and not result.labelled:
        raise DataError(
            "the file has no labels",
            path=p,
            hint="training and evaluation files need a label column/field (see --label-field)",
        )
    log.info("read %d examples from %s (%s%s)", len(result.examples), p, fmt, "" if result.labelled else ", unlabelled")
    return result


def _detect_format(path: Path, task: str, requested: str) -> Format:
    if requested not in FORMATS:
        raise UsageError(f"unknown --format {requested!r}", hint=f"choose one of {', '.join(FORMATS)}")
    if requested != "auto":
        return requested  # type: ignore[return-value]
    for _, line in numbered_lines(path):
        if line.strip():
            if line.lstrip().startswith("{"):
                return "jsonl"
            return "columns" if task == "ner" else "tsv"
    raise DataError("the file is empty", path=path, hint="is it the right file?")


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its newline); a byte-order mark is dropped."""
    try:
        with open(path, encoding="utf-8-sig", newline="\n") as handle:  # a stray \r inside a text is no line break
            for number, line in enumerate(bounded_lines(handle, path), 1):
                yield number, line.rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"not UTF-8 text (byte {exc.start} of a line cannot be decoded)",
            path=path,
            hint="convert the file to UTF-8",
        ) from None


def _split_columns(line: str) -> list[str]:
    return line.split("\t") if "\t" in line else line.split()


def _read_ner_columns(path: Path) -> TaskFile:
    sentences: list[NerSentence] = []
    words: list[str] = []
    labels: list[str] = []
    lines: list[int] = []
    labelled: bool | None = None
    width: int | None = None  # columns of every word line, from the first one
    first = 0

    def flush() -> None:
        if words:
            sentences.append(NerSentence(tuple(words), tuple(labels) if labelled else None, tuple(lines)))
            words.clear()
            labels.clear()
            lines.clear()

    for number, line in numbered_lines(path):
        if not line.strip():
            flush()
            continue
        columns = [c.strip() for c in _split_columns(line)]
        if columns[0] == DOCSTART:
            flush()
            continue
        if width is None:
            width, first = len(columns), number
            labelled = width >= 2
        elif len(columns) != width:
            # A label read from the wrong column is silently wrong training data; the first line sets the layout.
            raise DataError(
                f"expected {width} column(s) on this line, as on line {first}, found {len(columns)}",
                path=path,
                line=number,
                hint="each word line needs the same columns, the label last",
            )
        if not columns[0]:
            raise DataError("empty word", path=path, line=number, hint="a word line starts with the word")
        if labelled:
            check_ner_label(columns[-1], path, number)
            labels.append(columns[-1])
        words.append(columns[0])
        lines.append(number)
    flush()
    return TaskFile(path, "columns", sentences, bool(labelled), {})


def typed_sentence(sentence: NerSentence, entity_type: str) -> NerSentence:
    """Bare B/I/E/S labels get ``entity_type`` ("B" -> "B-Disease"); O and typed labels stay as they are."""
    if sentence.labels is None:
        return sentence
    labels = tuple(f"{label}-{entity_type}" if untyped(label) else label for label in sentence.labels)
    return replace(sentence, labels=labels)


def _json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    return json_objects(numbered_lines(path), path)


def json_objects(lines: Iterable[tuple[int, str]], path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of numbered JSON lines (blank ones skipped); a DataError names the bad line."""
    for number, line in lines:
        if not line.strip():
            continue
        try:
            obj = loads_json(line, max_depth=None)
        except json.JSONDecodeError as exc:
            raise DataError(f"not valid JSON ({exc.msg})", path=path, line=number, hint="one JSON object per line") from None
        except NestedTooDeeply:
            raise DataError("a JSON line nested too deeply to be a record", path=path, line=number,
                            hint="one flat JSON object per line") from None
        if not isinstance(obj, dict):
            raise DataError("a JSON line that is not an object", path=path, line=number, hint="one JSON object per line")
        yield number, obj


def pick_key(obj: Mapping[str, Any], wanted: str | None, defaults: Sequence[str]) -> str | None:
    """The key named by an option (``wanted``), else the first of the usual ``defaults`` that ``obj`` has."""
    if wanted is not None:
        return wanted
    return next((name for name in defaults if name in obj), None)


def _read_ner_jsonl(path: Path, options: ReaderOptions, rows: Iterator[tuple[int, dict[str, Any]]] | None = None) -> TaskFile:
    sentences: list[NerSentence] = []
    tokens_key = tags_key = None
    labelled: bool | None = None
    for number, obj in rows if rows is not None else _json_objects(path):
        if tokens_key is None:
            tokens_key = pick_key(obj, options.text_field, NER_TOKEN_NAMES)
            tags_key = pick_key(obj, options.label_field, NER_TAG_NAMES)
            if tokens_key is None:
                raise DataError(
                    f"no token list (looked for {', '.join(NER_TOKEN_NAMES)})",
                    path=path,
                    line=number,
                    hint="name the key with --text-field",
                )
        words = obj.get(tokens_key)
        if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
            raise DataError(
                f"{tokens_key!r} is not a list of non-empty strings", path=path, line=number, hint="tokens are a list of words"
            )
        tags = obj.get(tags_key) if tags_key is not None else None
        has_label = tags is not None
        if labelled is None:
            labelled = has_label
        elif has_label != labelled:
            raise DataError(f"{tags_key!r} is missing on this line but present on others", path=path, line=number)
        if has_label:
            if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
                raise DataError(
                    f"{tags_key!r} is not a list of label strings",
                    path=path,
                    line=number,
                    hint="tags must be names such as B-Disease, not class numbers",
                )
            if len(tags) != len(words):
                raise DataError(f"{len(words)} tokens but {len(tags)} tags", path=path, line=number)
            for tag in tags:
                check_ner_label(tag, path, number)
        if words:
            sentences.append(NerSentence(tuple(words), tuple(tags or ()) if has_label else None, (number,) * len(words)))
    return TaskFile(path, "jsonl", sentences, bool(labelled), {"text": tokens_key, "label": tags_key})


def _label_text(value: Any, path: Path, line: int) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DataError(f"label {value!r} is neither a string nor an integer", path=path, line=line)
    text = str(value).strip()
    return text or None


def _read_text_jsonl(path: Path, options: ReaderOptions, rows: Iterator[tuple[int, dict[str, Any]]] | None = None) -> TaskFile:
    examples: list[TextExample] = []
    keys: dict[str, str | int | None] = {}
    for number, obj in rows if rows is not None else _json_objects(path):
        if not keys:
            keys = {
                "text": pick_key(obj, options.text_field, TEXT_NAMES),
                "pair": pick_key(obj, options.pair_field, PAIR_NAMES),
                "label": pick_key(obj, options.label_field, LABEL_NAMES),
            }
            if keys["text"] is None:
                raise DataError(
                    f"no text field (looked for {', '.join(TEXT_NAMES)})", path=path, line=number, hint="name it with --text-field"
                )
        text = obj.get(keys["text"])  # type: ignore[arg-type]
        if not isinstance(text, str):
            raise DataError(f"field {keys['text']!r} is missing or not a string", path=path, line=number)
        pair = None
        if keys["pair"] is not None:
            pair = obj.get(keys["pair"])  # type: ignore[arg-type]
            if not isinstance(pair, str):
                raise DataError(f"field {keys['pair']!r} is missing or not a string", path=path, line=number)
        label = _label_text(obj.get(keys["label"]), path, number) if keys["label"] is not None else None  # type: ignore[arg-type]
        examples.append(TextExample(text, pair, label, number))
    return _finish_text(path, "jsonl", examples, keys)


def _tsv_column(
    wanted_name: str | None, defaults: Sequence[str], role: str, required: bool, header: list[str] | None, path: Path, line: int
) -> int | None:
    """The 0-based column of a role: given by number or header name, else the first default name in the header."""
    if wanted_name is not None and wanted_name.isdigit():
        return int(wanted_name)
    if wanted_name is not None:
        if header is None or wanted_name not in header:
            if role == "label" and not required:
                return None  # an unlabelled file of the same layout (e.g. MRPC's test.tsv)
            raise DataError(
                f"no column named {wanted_name!r}" + ("" if header is None else f" (header: {', '.join(header)})"),
                path=path,
                line=line,
                hint=f"name the {role} column by header name or 0-based number",
            )
        return header.index(wanted_name)
    if header is not None:
        found = next((n for n in defaults if n in header), None)
        return header.index(found) if found is not None else None
    return None


def _read_text_tsv(path: Path, options: ReaderOptions) -> TaskFile:
    rows = [(number, line.split("\t")) for number, line in numbered_lines(path) if line.strip()]
    if not rows:
        raise DataError("the file is empty", path=path)
    first = [c.strip() for c in rows[0][1]]
    wanted = [w for w in (options.text_field, options.pair_field, options.label_field) if w is not None and not w.isdigit()]
    if options.header == "yes":
        has_header = True
    elif options.header == "no":
        has_header = False
    else:
        look_for = wanted or [*TEXT_NAMES, *LABEL_NAMES]
        has_header = any(name in first for name in look_for)
    header = first if has_header else None
    body = rows[1:] if has_header else rows

    text_col = _tsv_column(options.text_field, TEXT_NAMES, "text", True, header, path, rows[0][0])
    pair_col = _tsv_column(options.pair_field, PAIR_NAMES, "pair", True, header, path, rows[0][0])
    label_col = _tsv_column(options.label_field, LABEL_NAMES, "label", False, header, path, rows[0][0])
    if text_col is None:
        if header is None and len(first) == 1:
            text_col = 0
        else:
            raise DataError(
                "cannot tell which column holds the text"
                + (" (the file has no header row)" if header is None else f" (header: {', '.join(header)})"),
                path=path,
                line=rows[0][0],
                hint="pass --text-field and --label-field as header names or 0-based column numbers "
                "(GLUE CoLA: --text-field 3 --label-field 1)",
            )
    needed = max(c for c in (text_col, pair_col, label_col) if c is not None) + 1
    examples = []
    for number, cells in body:
        if len(cells) < needed:
            raise DataError(
                f"{len(cells)} tab-separated column(s), column {needed - 1} (0-based) is needed",
                path=path,
                line=number,
                hint="every row needs the same columns; TSV files are not quoted",
            )
        label = cells[label_col].strip() or None if label_col is not None else None
        pair = cells[pair_col] if pair_col is not None else None
        examples.append(TextExample(cells[text_col], pair, label, number))
    keys: dict[str, str | int | None] = {"text": text_col, "pair": pair_col, "label": label_col}
    task_file = _finish_text(path, "tsv", examples, keys)
    task_file.field_names["header"] = "yes" if has_header else "no"
    return task_file


def _finish_text(path: Path, fmt: Format, examples: list[TextExample], keys: dict[str, str | int | None]) -> TaskFile:
    with_label = [e for e in examples if e.label is not None]
    if with_label and len(with_label) != len(examples):
        missing = next(e for e in examples if e.label is None)
        raise DataError("this example has no label while others do", path=path, line=missing.line)
    return TaskFile(path, fmt, examples, bool(with_label), dict(keys))


def check_known_labels(task_file: TaskFile, known: Sequence[str], what: str = "training") -> None:
    """Raise a DataError at the first example whose label the model was not trained on."""
    allowed = set(known)
    for example in task_file.examples:
        if isinstance(example, NerSentence):
            for label, line in zip(example.labels or (), example.lines, strict=True):
                if label not in allowed:
                    raise _unknown_label(label, task_file.path, line, known, what)
        elif example.label is not None and example.label not in allowed:
            raise _unknown_label(example.label, task_file.path, example.line, known, what)


def _unknown_label(label: str, path: Path, line: int, known: Sequence[str], what: str) -> DataError:
    shown = ", ".join(list(known)[:20]) + (" …" if len(known) > 20 else "")
    return DataError(
        f"label {label!r} does not occur in the {what} data (labels: {shown})",
        path=path,
        line=line,
        hint="evaluate on a file with the same label set as training",
    )


# --------------------------------------------------------------------------
# Writing predictions in the input's format


