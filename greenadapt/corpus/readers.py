"""Streaming readers, one per corpus format.

Every reader yields text units in constant memory (one line, one record,
one article at a time). Invalid UTF-8 is replaced with U+FFFD and counted;
malformed records are skipped, counted and reported with file:line, and
become fatal only when they are the majority (then the file is probably
not in the format its name says). Archives are read as streams and never
extracted, so no member name can write outside anything.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import json
import logging
import posixpath
import tarfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import IO, Any

from greenadapt.corpus.source import TEXT_FORMATS, CorpusSource, ReadStats
from greenadapt.errors import CorpusError

log = logging.getLogger(__name__)

BOM = "\ufeff"
_MAX_WARNINGS_PER_SOURCE = 5
_MIN_RECORDS_FOR_MAJORITY = 20  # below this, a bad-majority verdict waits for the end of the file
_BLOCK = 1 << 20

# --------------------------------------------------------------------------
# Decoding with a count of replaced sequences

_COUNT_REPLACE = "greenadapt-count-replace"
_replaced = threading.local()


def _count_and_replace(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    _replaced.count = getattr(_replaced, "count", 0) + 1
    return "\ufffd", exc.end


codecs.register_error(_COUNT_REPLACE, _count_and_replace)


def decode(data: bytes, stats: ReadStats) -> str:
    """UTF-8 text of ``data``; each invalid byte sequence becomes U+FFFD and is counted."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        # The handler's counter is per thread and read right after this one
        # synchronous call, so interleaved sources cannot mix their counts.
        _replaced.count = 0
        text = data.decode("utf-8", _COUNT_REPLACE)
        stats.replaced_chars += _replaced.count
        return text


# --------------------------------------------------------------------------
# Entry point


def iter_texts(source: CorpusSource, stats: ReadStats) -> Iterator[str]:
    reader = _READERS[source.format]
    with _read_errors(source), source.open_stream(stats) as opened:
        if source.format in TEXT_FORMATS and b"\x00" in opened.head:
            raise CorpusError(
                "looks binary (NUL bytes in its first 8 KiB), not text",
                path=source.display,
                hint="pass a text, JSON lines or CSV file, optionally .gz/.bz2/.xz compressed",
            )
        yield from reader(source, opened.stream, stats)


@contextlib.contextmanager
def _read_errors(source: CorpusSource) -> Iterator[None]:
    """Turn decompression, archive, transport and I/O failures into one-line CorpusErrors naming the source."""
    import lzma
    import zlib

    shown = source.display
    try:
        yield
    except CorpusError:
        raise
    except EOFError:
        raise CorpusError(
            "compressed file is truncated (it ends before its end-of-stream marker)",
            path=shown,
            hint="download or copy it again",
        ) from None
    except (zlib.error, lzma.LZMAError) as exc:
        raise CorpusError(f"compressed data is corrupt ({exc})", path=shown, hint="download or copy it again") from None
    except tarfile.TarError as exc:
        raise CorpusError(f"not a readable tar archive ({exc})", path=shown, hint="download it again") from None
    except OSError as exc:
        if exc.errno is None and source.compression:  # gzip.BadGzipFile, bz2's "Invalid data stream"
            raise CorpusError(
                f"not a valid {source.compression} file ({exc})", path=shown, hint="check the file or its extension"
            ) from None
        raise CorpusError(f"cannot read: {source.scrub(str(exc.strerror or exc))}", path=shown) from None
    except Exception as exc:
        # boto3, google-cloud-storage, paramiko... raise their own types mid-stream.
        if source.is_url and type(exc).__module__.split(".")[0] in _TRANSPORT_LIBRARIES:
            raise CorpusError(f"reading failed: {source.scrub(f'{type(exc).__name__}: {exc}')[:300]}", path=shown) from None
        raise


_TRANSPORT_LIBRARIES = {"botocore", "boto3", "google", "azure", "paramiko", "requests", "urllib3", "smart_open"}


# --------------------------------------------------------------------------
# Lines


def _byte_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """Lines split at LF, without their terminator (LF or CRLF)."""
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
        yield raw


def _lines_with_ends(stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    """Decoded lines keeping their terminators, as the csv module wants them."""
    first = True
    for raw in stream:
        line = decode(raw, stats)
        if first:
            first = False
            line = line.removeprefix(BOM)
        yield line


def read_text(source: CorpusSource, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    """Lines without their terminators (LF or CRLF), decoded a block at a time.

    Decoding and splitting a MiB at once rather than line by line halves the
    Python work per line, which matters on corpora of billions of words. A
    block is cut at its last LF; UTF-8 never has that byte inside a
    character, so decoding (and counting replacements) per block is exact.
    """
    pending: list[bytes] = []
    first = True
    while True:
        block = stream.read(_BLOCK)
        if not block:
            break
        cut = block.rfind(b"\n")
        if cut < 0:
            pending.append(block)  # inside a very long line: hold it, it is allowed
            continue
        pending.append(block[:cut])
        text = decode(b"".join(pending), stats)
        pending = [block[cut + 1 :]]
        if first:
            first = False
            text = text.removeprefix(BOM)
        lines = text.split("\n")
        if "\r" in text:
            lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        yield from lines
        stats.units += len(lines)
    rest = b"".join(pending)
    if rest:
        text = decode(rest, stats)
        yield text.removeprefix(BOM) if first else text
        stats.units += 1


# --------------------------------------------------------------------------
# Records (JSON lines, CSV, TSV)


class _BadRecords:
    """Skips malformed records with a warning, and stops when they are the majority."""

    def __init__(self, shown: str, stats: ReadStats, what: str, hint: str) -> None:
        self.shown = shown
        self.stats = stats
        self.what = what
        self.hint = hint
        self.good = 0
        self.bad = 0

    def ok(self) -> None:
        self.good += 1

    def skip(self, line: int | str, why: str) -> None:
        self.bad += 1
        self.stats.skipped_records += 1
        if self.bad <= _MAX_WARNINGS_PER_SOURCE:
            log.warning("%s:%s: skipped a malformed %s (%s)", self.shown, line, self.what, why)
        if self.bad * 2 > self.bad + self.good and self.bad + self.good >= _MIN_RECORDS_FOR_MAJORITY:
            self.fail(line)

    def finish(self) -> None:
        if self.bad and self.bad * 2 > self.bad + self.good:
            self.fail(None)
        if self.bad > _MAX_WARNINGS_PER_SOURCE:
            log.warning("%s: skipped %d malformed %ss in all", self.shown, self.bad, self.what)

    def fail(self, line: int | str | None) -> None:
        raise CorpusError(
            f"{self.bad} of {self.bad + self.good} {self.what}s so far are malformed",
            path=self.shown,
            line=line if isinstance(line, int) else None,
            hint=self.hint,
        )


def _join_fields(values: Iterable[Any]) -> str:
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


def read_jsonl(source: CorpusSource, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    fields = source.text_fields
    bad = _BadRecords(source.display, stats, "JSON line", "the file must hold one JSON object per line")
    checked = False
    for number, raw in enumerate(_byte_lines(stream), start=1):
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
        bad.ok()
        text = _join_fields(record.get(name) for name in fields)
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


def _widen_csv_field_limit() -> None:
    # csv's default 128 KiB field limit would reject a long document; a
    # single field may be as large as a line we accept (hundreds of MB).
    if csv.field_size_limit() < 1 << 30:
        csv.field_size_limit(1 << 30)


def read_delimited(source: CorpusSource, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    _widen_csv_field_limit()
    lines = _lines_with_ends(stream, stats)
    if source.format == "tsv":
        # TSV as distributed (GLUE and most NLP sets) is not quoted: a quote
        # character is text, so quoting must be off or rows would merge.
        reader = csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(lines)
    yield from _rows_to_texts(reader, source, stats)


def _rows_to_texts(reader: Any, source: CorpusSource, stats: ReadStats) -> Iterator[str]:
    shown = source.display
    try:
        header = next(reader, None)
        if header is None:
            return
        _check_fields(source.text_fields, header, shown, 1, "columns")
        columns = [header.index(name) for name in source.text_fields]
        for row in reader:
            text = _join_fields(row[i] for i in columns if i < len(row))
            if text:
                stats.units += 1
                yield text
    except csv.Error as exc:
        raise CorpusError(f"malformed {source.format.upper()} ({exc})", path=shown, line=reader.line_num) from None


# --------------------------------------------------------------------------
# CORD-19 release tarball (S2ORC-style JSON parses)


def read_s2orc_tar(source: CorpusSource, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    """Titles and abstracts from ``metadata.csv``, body paragraphs from ``document_parses.tar.gz``.

    A paper with both a PMC and a PDF parse is read once, from the PMC parse
    (cleaner), when ``metadata.csv`` precedes the parses in the tarball; if
    the parses come first every parse is read.
    """
    cord = _CordState()
    seen_any = False
    with tarfile.open(fileobj=stream, mode="r|*") as outer:
        for member in outer:
            if not member.isfile():
                continue
            base = posixpath.basename(member.name)
            inner = outer.extractfile(member)
            if inner is None:
                continue
            if base == "metadata.csv":
                seen_any = True
                yield from cord.read_metadata(inner, source, stats)
            elif base.startswith("document_parses.tar"):
                seen_any = True
                with tarfile.open(fileobj=inner, mode="r|*") as parses:
                    for parse in parses:
                        if parse.isfile() and parse.name.endswith(".json"):
                            handle = parses.extractfile(parse)
                            if handle is not None:
                                yield from cord.read_parse(parse.name, handle, source, stats)
                cord.finish()
            elif member.name.endswith(".json") and "_json/" in member.name:
                # A release unpacked and re-tarred: parses sit directly in the archive.
                seen_any = True
                yield from cord.read_parse(member.name, inner, source, stats)
    if not seen_any:
        log.warning("%s: no metadata.csv or document_parses in this tar archive; nothing read", source.display)


class _CordState:
    def __init__(self) -> None:
        # 8-byte hashes keep this set small even for a million-paper release.
        self.skip_parses: set[int] = set()
        self.bad: _BadRecords | None = None

    def read_metadata(self, handle: IO[bytes], source: CorpusSource, stats: ReadStats) -> Iterator[str]:
        _widen_csv_field_limit()
        reader = csv.DictReader(_lines_with_ends(handle, stats))
        shown = f"{source.display}!metadata.csv"
        try:
            for row in reader:
                self._note_duplicate_parses(row)
                text = _join_fields([row.get("title"), row.get("abstract")])
                if text:
                    stats.units += 1
                    yield text
        except csv.Error as exc:
            raise CorpusError(f"malformed metadata.csv ({exc})", path=shown, line=reader.line_num) from None

    def _note_duplicate_parses(self, row: dict[str, Any]) -> None:
        parses = [
            p.strip()
            for column in ("pmc_json_files", "pdf_json_files")
            for p in (row.get(column) or "").split(";")
            if p.strip()
        ]
        for extra in parses[1:]:
            self.skip_parses.add(_short_hash(posixpath.basename(extra)))

    def read_parse(self, name: str, handle: IO[bytes], source: CorpusSource, stats: ReadStats) -> Iterator[str]:
        if self.bad is None:
            self.bad = _BadRecords(source.display, stats, "document parse", "the archive does not look like a CORD-19 release")
        if _short_hash(posixpath.basename(name)) in self.skip_parses:
            return
        data = handle.read()  # one paper's JSON: kilobytes to a few MB
        try:
            try:
                parse = json.loads(data)
            except UnicodeDecodeError:
                parse = json.loads(decode(data, stats))
        except (json.JSONDecodeError, RecursionError) as exc:
            self.bad.skip(name, getattr(exc, "msg", "nested too deeply"))
            return
        paragraphs = parse.get("body_text") if isinstance(parse, dict) else None
        if not isinstance(paragraphs, list):
            self.bad.skip(name, "no body_text list")
            return
        self.bad.ok()
        text = _join_fields([[p.get("text") for p in paragraphs if isinstance(p, dict)]])
        if text:
            stats.units += 1
            yield text

    def finish(self) -> None:
        if self.bad is not None:
            self.bad.finish()


def _short_hash(text: str) -> int:
    import hashlib

    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


# --------------------------------------------------------------------------
# PubMed / MEDLINE XML


def read_pubmed_xml(source: CorpusSource, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    """ArticleTitle and AbstractText of each article, memory flat however large the file.

    Each finished article is cleared from the tree; ElementTree fetches no
    external DTD or entity, and expat bounds entity expansion.
    """
    import xml.etree.ElementTree as ET

    root = None
    try:
        for event, element in ET.iterparse(stream, events=("start", "end")):
            if root is None:
                root = element
                continue
            if event != "end" or element.tag not in ("PubmedArticle", "PubmedBookArticle"):
                continue
            parts = [_element_text(e) for e in element.iter("ArticleTitle")]
            if not any(parts):
                parts = [_element_text(e) for e in element.iter("BookTitle")]
            for abstract in element.iter("Abstract"):
                parts += [_element_text(e) for e in abstract.iter("AbstractText")]
            root.clear()
            text = "\n".join(p for p in parts if p)
            if text:
                stats.units += 1
                yield text
    except ET.ParseError as exc:
        raise CorpusError(
            f"malformed XML ({exc})",
            path=source.display,
            line=exc.position[0] if exc.position else None,
            hint="PubMed baseline files are XML; download it again if it was cut short",
        ) from None


def _element_text(element: Any) -> str:
    # Titles and abstracts hold inline markup (<i>, <sup>); keep all its text.
    return " ".join("".join(element.itertext()).split())


_READERS = {
    "text": read_text,
    "jsonl": read_jsonl,
    "csv": read_delimited,
    "tsv": read_delimited,
    "s2orc-tar": read_s2orc_tar,
    "pubmed-xml": read_pubmed_xml,
}
