"""Streaming readers, one per corpus format.

Every reader yields text units in constant memory (one line, one record,
one article at a time). Invalid UTF-8 is replaced with U+FFFD and counted;
malformed records are skipped, counted and reported with file:line, and
become fatal only when they are the majority (then the file is probably
not in the format its name says). Archives (tar, zip) are read as streams
and never extracted, so no member name can write outside anything; links,
devices and absolute or ``../`` member names are skipped and counted all
the same.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import posixpath
import tarfile
import zipfile
from collections.abc import Generator, Iterable, Iterator, Sequence
from typing import IO, Any

from greenadapt.corpus.formats import SNIFF_BYTES, TEXT_FORMATS, CountingReader, ReadStats, Source, decode, decompressor, format_for_name, split_compression
from greenadapt.corpus.pubmed import read_pubmed_xml
from greenadapt.errors import CorpusError

log = logging.getLogger(__name__)

BOM = "\ufeff"
_MAX_WARNINGS_PER_SOURCE = 5
_MIN_RECORDS_FOR_MAJORITY = 20  # below this, a bad-majority verdict waits for the end of the file
_BLOCK = 1 << 20
# A line longer than this (a document or a dump with no newline at all) is
# cut, at its last space or tab before the limit, into lines of at most this
# size: memory stays bounded however long the line. word2vec cuts lines at
# 1000 words anyway (pretokenize.MAX_LINE_WORDS), so nothing is lost but one
# sentence break.
MAX_LINE_BYTES = 8 << 20
_WHITESPACE = (b" ", b"\t", b"\x0b", b"\x0c", b"\r")

# --------------------------------------------------------------------------
# Entry point


def iter_texts(source: Source, stats: ReadStats) -> Iterator[str]:
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
def _read_errors(source: Source) -> Iterator[None]:
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
    except zipfile.BadZipFile as exc:
        raise CorpusError(f"not a readable zip archive ({exc})", path=shown, hint="download it again") from None
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


def read_text(source: Source, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    """Lines without their terminators (LF or CRLF), decoded a block at a time.

    Decoding and splitting a MiB at once rather than line by line halves the
    Python work per line, which matters on corpora of billions of words. A
    block is cut at its last LF; UTF-8 never has that byte inside a
    character, so decoding (and counting replacements) per block is exact.
    """
    pending: list[bytes] = []
    held = 0  # bytes in pending
    first = True
    warned = False
    while True:
        block = stream.read(_BLOCK)
        if not block:
            break
        cut = block.rfind(b"\n")
        if cut < 0:
            pending.append(block)  # inside a long line: hold it, up to MAX_LINE_BYTES
            held += len(block)
            while held >= MAX_LINE_BYTES:
                joined = b"".join(pending)
                pending.clear()
                piece, rest = _cut_long_line(joined)
                del joined
                pending, held = [rest], len(rest)
                text = decode(piece, stats)
                if first:
                    first = False
                    text = text.removeprefix(BOM)
                if not warned:
                    warned = True
                    log.warning("%s: a line longer than %d MiB is cut into pieces (at spaces)", source.display, MAX_LINE_BYTES >> 20)
                stats.long_line_cuts += 1
                stats.units += 1
                yield text
            continue
        pending.append(block[:cut])
        text = decode(b"".join(pending), stats)
        pending = [block[cut + 1 :]]
        held = len(pending[0])
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


def _cut_long_line(data: bytes) -> tuple[bytes, bytes]:
    """``data`` (no LF in it) as a piece of at most MAX_LINE_BYTES and the rest, cut at whitespace if there is any.

    ASCII whitespace bytes never occur inside a UTF-8 character; without any,
    the cut backs up to the start of a character so that none is split.
    """
    limit = min(len(data), MAX_LINE_BYTES)
    space = max(data.rfind(w, 0, limit) for w in _WHITESPACE)  # no copy of the window
    if space > 0:
        return data[:space], data[space + 1 :]
    end = start = limit
    while start > 0 and end - start < 3 and data[start - 1] & 0xC0 == 0x80:
        start -= 1  # back over the last character's continuation bytes...
    if start > 0 and data[start - 1] >= 0xC0:
        start -= 1  # ...and its lead byte: the whole character goes to the rest
    elif start != end:
        start = end  # continuation bytes without a lead: not UTF-8 here, cut where the window ends
    if start == 0:
        start = end
    return data[:start], data[start:]


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


def read_jsonl(source: Source, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
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


def read_delimited(source: Source, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    _widen_csv_field_limit()
    lines = _lines_with_ends(stream, stats)
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
            text = _join_fields(row[i] for i in columns if i < len(row))
            if text:
                stats.units += 1
                yield text
    except csv.Error as exc:
        raise CorpusError(f"malformed {source.format.upper()} ({exc})", path=shown, line=reader.line_num) from None


# --------------------------------------------------------------------------
# CORD-19 release tarball (S2ORC-style JSON parses)


def read_s2orc_tar(source: Source, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    """A tar archive, streamed member by member: a CORD-19 release, or files of the other formats.

    CORD-19: titles and abstracts from ``metadata.csv``, body paragraphs from
    ``document_parses.tar.gz``. A paper with both a PMC and a PDF parse is
    read once, from the PMC parse (cleaner), when ``metadata.csv`` precedes
    the parses in the tarball; if the parses come first every parse is read.
    Any other member whose name has a corpus extension (``.txt``,
    ``.jsonl.gz``, ...) is read in its format. Only regular files are read:
    links, devices and members with absolute or ``../`` names are skipped,
    counted (``ReadStats.skipped_members``) and warned about. Nothing is
    ever written to disk.
    """
    cord = _CordState()
    skip = _SkippedMembers(source.display, stats)
    seen_any = False
    with tarfile.open(fileobj=stream, mode="r|*") as outer:
        for member in outer:
            if member.isdir():
                continue
            why = _unsafe_member(member.name, _tar_kind(member))
            if why:
                skip(member.name, why)
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
                        if parse.isdir():
                            continue
                        why = _unsafe_member(parse.name, _tar_kind(parse))
                        if why:
                            skip(f"{member.name}!{parse.name}", why)
                        elif parse.name.endswith(".json"):
                            handle = parses.extractfile(parse)
                            if handle is not None:
                                yield from cord.read_parse(parse.name, handle, source, stats)
                cord.finish()
            elif member.name.endswith(".json") and "_json/" in member.name:
                # A release unpacked and re-tarred: parses sit directly in the archive.
                seen_any = True
                yield from cord.read_parse(member.name, inner, source, stats)
            else:
                read = yield from _read_member(source, member.name, inner, stats, skip)
                seen_any = seen_any or read
    skip.finish()
    if not seen_any:
        log.warning("%s: no metadata.csv, document_parses or corpus files in this tar archive; nothing read", source.display)


def read_zip(source: Source, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    """A local ``.zip``: each member with a corpus extension, read in its format, one at a time.

    A zip's index is at its end, so the file is opened by path (a URL would
    have to be downloaded first). Members are streamed, never extracted;
    links, devices and members with absolute or ``../`` names are skipped,
    counted and warned about, as in tar archives.
    """
    import stat

    if source.is_url:
        raise CorpusError(
            "a .zip archive can only be read from a local file (its index is at its end)",
            path=source.display,
            hint="download it first, or use a .tar.gz",
        )
    skip = _SkippedMembers(source.display, stats)
    seen_any = False
    with zipfile.ZipFile(source.uri) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            mode = info.external_attr >> 16
            kind = "file"
            if stat.S_ISLNK(mode):
                kind = "symlink"
            elif stat.S_IFMT(mode) not in (0, stat.S_IFREG):
                kind = "device"
            why = _unsafe_member(info.filename, kind)
            if why:
                skip(info.filename, why)
                continue
            stats.raw_bytes_read += info.compress_size
            with archive.open(info) as handle:
                read = yield from _read_member(source, info.filename, handle, stats, skip)
            seen_any = seen_any or read
    skip.finish()
    if not seen_any:
        log.warning("%s: no corpus files in this zip archive; nothing read", source.display)


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.isfile():
        return "file"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    return "device"  # character or block device, FIFO, or a type tarfile does not know


_KIND_REASONS = {"symlink": "a symbolic link", "hardlink": "a hard link", "device": "not a regular file"}


def _unsafe_member(name: str, kind: str) -> str | None:
    """Why an archive member is not read (a link, a device, a name outside the archive), or None."""
    if kind != "file":
        return _KIND_REASONS.get(kind, "not a regular file")
    normal = name.replace("\\", "/")
    if normal.startswith("/") or (len(normal) > 1 and normal[1] == ":") or ".." in normal.split("/"):
        return "an absolute or ../ name"
    return None


class _SkippedMembers:
    """Counts and warns about archive members that are not read."""

    def __init__(self, shown: str, stats: ReadStats) -> None:
        self.shown, self.stats, self.count = shown, stats, 0

    def __call__(self, name: str, why: str) -> None:
        self.count += 1
        self.stats.skipped_members += 1
        if self.count <= _MAX_WARNINGS_PER_SOURCE:
            log.warning("%s: skipped member %r: %s", self.shown, name[:200], why)

    def finish(self) -> None:
        if self.count > _MAX_WARNINGS_PER_SOURCE:
            log.warning("%s: skipped %d archive members in all", self.shown, self.count)


def _read_member(
    source: Source, name: str, handle: IO[bytes], stats: ReadStats, skip: _SkippedMembers
) -> Generator[str, None, bool]:
    """The texts of one archive member read in the format its name says; returns whether it was read."""
    import io

    base = posixpath.basename(name)
    fmt = format_for_name(base, strict=True)
    if fmt is None or base.startswith("."):
        log.debug("%s: member %s is not a corpus file type", source.display, name)
        return False
    if fmt in ("s2orc-tar", "zip"):
        skip(name, "an archive inside the archive")
        return False
    member = source.member(name, fmt)
    compression = split_compression(base)[1]
    with contextlib.ExitStack() as stack:
        stream: IO[bytes] = stack.enter_context(decompressor(compression, handle)) if compression else handle
        counted = CountingReader(stream, lambda n: setattr(stats, "bytes_read", stats.bytes_read + n))
        head = counted.read_head(SNIFF_BYTES)
        if fmt in TEXT_FORMATS and b"\x00" in head:
            skip(name, "looks binary (NUL bytes), not text")
            return False
        yield from _READERS[fmt](member, io.BufferedReader(counted, buffer_size=1 << 20), stats)
    return True


class _CordState:
    def __init__(self) -> None:
        # 8-byte hashes keep this set small even for a million-paper release.
        self.skip_parses: set[int] = set()
        self.bad: _BadRecords | None = None

    def read_metadata(self, handle: IO[bytes], source: Source, stats: ReadStats) -> Iterator[str]:
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

    def read_parse(self, name: str, handle: IO[bytes], source: Source, stats: ReadStats) -> Iterator[str]:
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


_READERS = {
    "text": read_text,
    "jsonl": read_jsonl,
    "csv": read_delimited,
    "tsv": read_delimited,
    "s2orc-tar": read_s2orc_tar,
    "zip": read_zip,
    "pubmed-xml": read_pubmed_xml,
}
