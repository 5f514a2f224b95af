"""Corpus files of records: JSON lines, CSV and TSV, each record's text fields joined; malformed records warned about a
few times, a file of mostly bad records refused."""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

from greenadapt.corpus.formats import (
    ReadStats,
    Source,
    decode,
)
from greenadapt.corpus.lines import BOM, byte_lines, lines_with_ends
from greenadapt.errors import CorpusError

log = logging.getLogger(__name__)


MAX_WARNINGS_PER_SOURCE = 5
_MIN_RECORDS_FOR_MAJORITY = 20  # below this, a bad-majority verdict waits for the end of the file


class BadRecords:
    """Skips malformed records with a warning, and stops when they are the majority."""

    def __init__(self, shown: str, stats: ReadStats, what: str, hint: str) -> None:
        self.shown = shown
        self.stats = stats
        self.what = what
        self.hint = hint
        self.good = 0
        self.bad = 0
        # Warnings wait until the verdict on the majority can be given: a file that is refused gets its one line alone.
        self._pending: list[tuple[int | str, str]] = []
        self.last_why = ""

    def ok(self) -> None:
        self.good += 1
        if self.bad + self.good >= _MIN_RECORDS_FOR_MAJORITY:
            self._flush()

    def skip(self, line: int | str, why: str) -> None:
        self.bad += 1
        self.last_why = why
        self.stats.skipped_records += 1
        if self.bad <= MAX_WARNINGS_PER_SOURCE:
            self._pending.append((line, why))
        if self.bad * 2 > self.bad + self.good and self.bad + self.good >= _MIN_RECORDS_FOR_MAJORITY:
            self.fail(line)
        if self.bad + self.good >= _MIN_RECORDS_FOR_MAJORITY:
            self._flush()

    def _flush(self) -> None:
        for line, why in self._pending:
            log.warning("%s:%s: skipped a malformed %s (%s)", self.shown, line, self.what, why)
        self._pending.clear()

    def finish(self) -> None:
        if self.bad and self.bad * 2 > self.bad + self.good:
            self.fail(None)
        self._flush()
        if self.bad > MAX_WARNINGS_PER_SOURCE:
            log.warning("%s: skipped %d malformed %ss in all", self.shown, self.bad, self.what)

    def fail(self, line: int | str | None) -> None:
        self._pending.clear()
        raise CorpusError(
            f"{self.bad} of {self.bad + self.good} {self.what}s so far are malformed (the last: {self.last_why})",
            path=self.shown,
            line=line if isinstance(line, int) else None,
            hint=self.hint,
        )


def join_fields(values: Iterable[Any]) -> str:
    parts: list[str] = []
    for value in values:
        if isinstance(value, str):
            text = value
        elif isinstance(value, list):
            text = "\n".join(v for v in value if isinstance(v, str) and v.strip())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            text = str(value)
        else:
            continue  # null, objects, booleans: nothing to learn words from
        if text.strip():
            parts.append(text)
    return "\n".join(parts)


def read_jsonl(source: Source, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    fields = source.text_fields
    bad = BadRecords(source.display, stats, "JSON line", "the file must hold one JSON object per line")
    checked = False
    for number, raw in enumerate(byte_lines(stream), start=1):
        if not raw.strip():
            continue
        if number == 1 and raw.startswith(BOM.encode()):
            raw = raw[len(BOM.encode()) :]
        try:
            record = json.loads(raw)
        except UnicodeDecodeError:
            try:
                record = json.loads(decode(raw, stats))
            except json.JSONDecodeError as exc:
                bad.skip(number, exc.msg)
                continue
        except json.JSONDecodeError as exc:
            bad.skip(number, exc.msg)
            continue
        except RecursionError:
            bad.skip(number, "nested too deeply")
            continue
        if not isinstance(record, dict):
            bad.skip(number, f"a JSON {type(record).__name__}, not an object")
            continue
        if not checked:
            _check_fields(fields, record.keys(), source.display, number, "keys")
            checked = True
        if not any(name in record for name in fields):  # counted, so that a file of such records is said, not skipped
            bad.skip(number, f"no {' or '.join(repr(name) for name in fields)} key")
            continue
        bad.ok()
        text = join_fields(record.get(name) for name in fields)
        if text:
            stats.units += 1
            yield text
    bad.finish()


def _check_fields(wanted: Sequence[str], present: Iterable[str], shown: str, line: int, what: str) -> None:
    present = list(present)
    missing = [name for name in wanted if name not in present]
    if missing:
        listed = ", ".join(repr(k) for k in present[:20]) + (", …" if len(present) > 20 else "")
        raise CorpusError(
            f"no text field {', '.join(repr(m) for m in missing)} in the first record; its {what} are: {listed or 'none'}",
            path=shown,
            line=line,
            hint="pass --text-field NAME (repeatable) naming the field(s) that hold the text",
        )


def widen_csv_field_limit() -> None:
    # csv's default 128 KiB field limit would reject a long document; a
    # single field may be as large as a line we accept (hundreds of MB).
    if csv.field_size_limit() < 1 << 30:
        csv.field_size_limit(1 << 30)


def read_delimited(source: Source, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    widen_csv_field_limit()
    lines = lines_with_ends(stream, stats)
    if source.format == "tsv":
        # TSV as distributed (GLUE and most NLP sets) is not quoted: a quote
        # character is text, so quoting must be off or rows would merge.
        reader = csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(lines)
    yield from _rows_to_texts(reader, source, stats)


def _rows_to_texts(reader: Any, source: Source, stats: ReadStats) -> Iterator[str]:
    shown = source.display
    try:
        header = next(reader, None)
        if header is None:
            return
        _check_fields(source.text_fields, header, shown, 1, "columns")
        columns = [header.index(name) for name in source.text_fields]
        for row in reader:
            text = join_fields(row[i] for i in columns if i < len(row))
            if text:
                stats.units += 1
                yield text
    except csv.Error as exc:
        raise CorpusError(f"malformed {source.format.upper()} ({exc})", path=shown, line=reader.line_num) from None
