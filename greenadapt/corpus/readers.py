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
from collections.abc import Generator, Iterator
from typing import IO, Any

from greenadapt.corpus.formats import (
    SNIFF_BYTES,
    TEXT_FORMATS,
    CountingReader,
    ReadStats,
    Source,
    decode,
    decompressor,
    format_for_name,
    split_compression,
)
from greenadapt.corpus.lines import lines_with_ends, read_text
from greenadapt.corpus.pubmed import read_pubmed_xml
from greenadapt.corpus.records import MAX_WARNINGS_PER_SOURCE, BadRecords, join_fields, read_delimited, read_jsonl, widen_csv_field_limit
from greenadapt.errors import CorpusError

log = logging.getLogger(__name__)


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


# --------------------------------------------------------------------------
# Records (JSON lines, CSV, TSV)


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
        for member in _safe_members(outer, skip):
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
                    for parse in _safe_members(parses, skip, within=f"{member.name}!"):
                        if parse.name.endswith(".json"):
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


def _safe_members(archive: tarfile.TarFile, skip: _SkippedMembers, *, within: str = "") -> Iterator[tarfile.TarInfo]:
    """The regular files of a streamed tar archive; links, devices and escaping names are skipped and counted."""
    for member in archive:
        if member.isdir():
            continue
        why = _unsafe_member(member.name, _tar_kind(member))
        if why:
            skip(within + member.name, why)
        else:
            yield member


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
        if self.count <= MAX_WARNINGS_PER_SOURCE:
            log.warning("%s: skipped member %r: %s", self.shown, name[:200], why)

    def finish(self) -> None:
        if self.count > MAX_WARNINGS_PER_SOURCE:
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
        self.bad: BadRecords | None = None

    def read_metadata(self, handle: IO[bytes], source: Source, stats: ReadStats) -> Iterator[str]:
        widen_csv_field_limit()
        reader = csv.DictReader(lines_with_ends(handle, stats))
        shown = f"{source.display}!metadata.csv"
        try:
            for row in reader:
                self._note_duplicate_parses(row)
                text = join_fields([row.get("title"), row.get("abstract")])
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
            self.bad = BadRecords(source.display, stats, "document parse", "the archive does not look like a CORD-19 release")
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
        text = join_fields([[p.get("text") for p in paragraphs if isinstance(p, dict)]])
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
