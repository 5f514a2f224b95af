"""Corpus file formats, compressions and the byte-level readers beneath every corpus source.

What a file name means (``format_for_name``, ``split_compression``), the
formats and their defaults, the counters a read fills (:class:`ReadStats`),
and the two stream layers every source stacks: a decompressor chosen by the
extension and a counting reader that remembers the first 8 KiB (so text
formats can refuse binary files before parsing). ``source`` (one file or
URL) and ``readers`` (one parser per format) both build on this module.
"""

from __future__ import annotations

import codecs
import io
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, cast

from greenadapt.errors import CorpusError

log = logging.getLogger(__name__)


FORMATS = ("text", "jsonl", "csv", "tsv", "s2orc-tar", "pubmed-xml", "zip")
TEXT_FORMATS = ("text", "jsonl", "csv", "tsv")  # checked for binary content up front
DEFAULT_TEXT_FIELDS = ("text",)
COMPRESSIONS = (".gz", ".bz2", ".xz")
_BY_EXTENSION = {
    ".txt": "text",
    ".text": "text",
    "": "text",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".xml": "pubmed-xml",
    ".tar": "s2orc-tar",
    ".tgz": "s2orc-tar",
    ".zip": "zip",
}
_UNSUPPORTED_COMPRESSION = (".zst", ".lz4", ".7z", ".rar", ".br", ".lzma", ".z")
SNIFF_BYTES = 8192


@dataclass
class ReadStats:
    """Counters filled while reading; one object may be shared by many sources."""

    units: int = 0  # lines or documents yielded
    bytes_read: int = 0  # decompressed bytes (best effort)
    replaced_chars: int = 0  # invalid UTF-8 byte sequences replaced with U+FFFD
    skipped_records: int = 0  # malformed JSON lines / unreadable records
    raw_bytes_read: int = 0  # bytes fetched before decompression: comparable to size_hint()
    long_line_cuts: int = 0  # cuts made in lines longer than readers.MAX_LINE_BYTES (each cut adds a unit)
    skipped_members: int = 0  # archive members not read: links, devices, absolute or ../ names, unknown formats


def split_compression(name: str) -> tuple[str, str | None]:
    """``("a.jsonl", ".gz")`` for ``"a.jsonl.gz"``; the compression is None when there is none."""
    lower = name.lower()
    for ext in COMPRESSIONS:
        if lower.endswith(ext):
            return name[: -len(ext)], ext
    return name, None


def format_for_name(name: str, *, strict: bool = False) -> str | None:
    """The format a file name implies, or None when its extension is not a known one.

    Without ``strict`` a name with no extension ("README", "wiki.2023") means
    text; with it (folder walks), only a known extension, or a compressed
    file with none inside ("corpus.gz"), counts.
    """
    stem, compression = split_compression(name)
    suffix = Path(stem).suffix.lower()
    if suffix == ".tar" or name.lower().endswith(".tgz"):
        return "s2orc-tar"
    if suffix and not (suffix[1:].isalpha() and len(suffix) <= 8):
        suffix = ""  # "notes.v2" or "wiki.2023": a dot, not an extension
    if strict and not suffix and compression is None:
        return None
    return _BY_EXTENSION.get(suffix)


def check_supported_name(name: str, shown: str) -> None:
    lower = name.lower()
    for ext in _UNSUPPORTED_COMPRESSION:
        if lower.endswith(ext):
            raise CorpusError(
                f"{ext} files are not supported",
                path=shown,
                hint="recompress as .gz, .bz2 or .xz, or decompress it",
            )


def decompressor(compression: str, stream: IO[bytes]) -> IO[bytes]:
    # The standard library codecs smart_open itself wraps; importing smart_open
    # just for them would cost every pre-tokenizing worker ~1 s (it loads boto3).
    import bz2
    import gzip
    import lzma

    opener = {".gz": gzip.GzipFile, ".bz2": bz2.BZ2File, ".xz": lzma.LZMAFile}[compression]
    return cast(IO[bytes], opener(fileobj=stream) if opener is gzip.GzipFile else opener(stream))


class CountingReader(io.RawIOBase):
    """A raw stream over ``inner`` that reports every byte read and can replay a peeked head."""

    def __init__(self, inner: IO[bytes], add: Callable[[int], None]) -> None:
        super().__init__()
        self._inner = inner
        self._add = add
        self._replay = b""

    def readable(self) -> bool:
        return True

    def read_head(self, size: int) -> bytes:
        """Read up to ``size`` bytes now; later reads start again from the first of them."""
        parts: list[bytes] = []
        remaining = size
        while remaining:
            chunk = self._inner.read(remaining)
            if not chunk:
                break
            parts.append(chunk)
            remaining -= len(chunk)
        head = b"".join(parts)
        self._add(len(head))
        self._replay = head
        return head

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._replay:
            size = min(len(view), len(self._replay))
            view[:size] = self._replay[:size]
            self._replay = self._replay[size:]
            return size
        readinto = getattr(self._inner, "readinto", None)
        if readinto is not None:
            size = readinto(view) or 0
        else:
            data = self._inner.read(len(view))
            size = len(data)
            view[:size] = data
        self._add(size)
        return size


class Source(Protocol):
    """What a format reader needs of a corpus source (``greenadapt.corpus.source.CorpusSource``)."""

    @property
    def uri(self) -> str: ...

    @property
    def format(self) -> str: ...

    @property
    def text_fields(self) -> tuple[str, ...]: ...

    @property
    def compression(self) -> str | None: ...

    @property
    def display(self) -> str: ...

    @property
    def is_url(self) -> bool: ...

    def scrub(self, text: str) -> str:
        """``text`` with any credentials of the source's address taken out."""
        ...

    def open_stream(self, stats: ReadStats) -> AbstractContextManager[Any]: ...

    def member(self, name: str, fmt: str) -> Source:
        """The source an archive member ``name`` read as ``fmt`` stands for (its name shown after a ``!``)."""
        ...


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
