"""One corpus source (a file or a URL), its identity, and how it is opened.

Opening stacks three layers, each streamed: the transport (a local file,
the resumable HTTP reader, or smart_open for s3://, gs://, ...), the
decompressor chosen by the extension (gzip, bz2, xz),
and a counting reader that also remembers the first 8 KiB so text formats
can refuse binary files before parsing anything.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from greenadapt.redaction import is_url, redact_url
from greenadapt.corpus import remote
from greenadapt.corpus.formats import (
    DEFAULT_TEXT_FIELDS,
    FORMATS,
    SNIFF_BYTES,
    CountingReader,
    ReadStats,
    decompressor,
    split_compression,
)
from greenadapt.errors import CorpusError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CorpusSource:
    """One file or URL plus how to read it.

    ``uri`` is an absolute local path or a URL in its public form: any
    credentials given are moved to a private field at construction and are
    used only to open the stream.
    """

    uri: str
    format: str
    text_fields: tuple[str, ...] = DEFAULT_TEXT_FIELDS
    _access_uri: str | None = field(default=None, repr=False, compare=False)
    _head_cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise CorpusError(
                f"unknown corpus format {self.format!r}", path=self.display, hint=f"use one of {', '.join(FORMATS)}"
            )
        object.__setattr__(self, "text_fields", tuple(self.text_fields))
        if not self.text_fields and self.format in ("jsonl", "csv", "tsv"):
            raise CorpusError("no text field given", path=self.display, hint="pass --text-field NAME")
        if is_url(self.uri):
            redacted = redact_url(self.uri)
            if redacted.public != self.uri:
                object.__setattr__(self, "_access_uri", self._access_uri or self.uri)
                object.__setattr__(self, "uri", redacted.public)

    def member(self, name: str, fmt: str) -> CorpusSource:
        """An archive member ``name`` of this source, read as ``fmt`` (shown as ``archive!member``)."""
        return CorpusSource(f"{self.display}!{name}", fmt, self.text_fields)

    # -- what it is -------------------------------------------------------------
    @property
    def is_url(self) -> bool:
        return is_url(self.uri)

    @property
    def display(self) -> str:
        """How errors and logs name this source (never with credentials)."""
        return self.uri

    @property
    def scheme(self) -> str:
        return self.uri.split("://", 1)[0].lower() if self.is_url else ""

    @property
    def compression(self) -> str | None:
        return split_compression(self._name())[1]

    def _name(self) -> str:
        if self.is_url:
            import urllib.parse

            return urllib.parse.urlsplit(self.uri).path.rsplit("/", 1)[-1]
        return Path(self.uri).name

    def _access(self) -> str:
        return self._access_uri or self.uri

    def scrub(self, text: str) -> str:
        """``text`` with any credential of this source's URL hidden (for messages)."""
        return redact_url(self._access_uri).scrub(text) if self._access_uri else text

    def _head(self) -> dict[str, Any]:
        if not self._head_cache and self.scheme in ("http", "https"):
            self._head_cache.update(remote.head(self._access()) or {"unavailable": True})
        return {k: v for k, v in self._head_cache.items() if k != "unavailable"}

    def identity(self) -> dict[str, Any]:
        """What a stage fingerprint records about this source; never credentials."""
        ident: dict[str, Any]
        if self.is_url:
            ident = {"url": self.uri, **self._head()}
        else:
            from greenadapt.artifacts.files import file_identity

            try:
                ident = file_identity(self.uri)
            except OSError as exc:
                raise CorpusError(f"cannot read: {exc.strerror or exc}", path=self.uri) from None
        ident["format"] = self.format
        if self.format in ("jsonl", "csv", "tsv"):
            ident["text_fields"] = list(self.text_fields)
        return ident

    def size_hint(self) -> int | None:
        """Size in bytes as stored (compressed), for progress bars; None when unknown."""
        if self.is_url:
            size = self._head().get("size")
            return int(size) if size is not None else None
        try:
            return os.path.getsize(self.uri)
        except OSError:
            return None

    def iter_texts(self, stats: ReadStats) -> Iterator[str]:
        """Stream the text units of this source: a line, or a document whose newlines are sentence breaks."""
        from greenadapt.corpus import readers

        return readers.iter_texts(self, stats)

    # -- opening ----------------------------------------------------------------
    @contextlib.contextmanager
    def open_stream(self, stats: ReadStats) -> Iterator[OpenedStream]:
        """The decompressed byte stream, its first 8 KiB also available as ``head``."""
        with contextlib.ExitStack() as stack:
            transport = stack.enter_context(self._open_transport())

            def count_raw(n: int) -> None:
                stats.raw_bytes_read += n

            def count_decompressed(n: int) -> None:
                stats.bytes_read += n

            stored = io.BufferedReader(CountingReader(transport, count_raw), buffer_size=1 << 20)
            decompressed: IO[bytes] = stored
            if self.compression:
                decompressed = stack.enter_context(decompressor(self.compression, stored))
            counted = CountingReader(decompressed, count_decompressed)
            head = counted.read_head(SNIFF_BYTES)
            yield OpenedStream(head, io.BufferedReader(counted, buffer_size=1 << 20))

    @contextlib.contextmanager
    def _open_transport(self) -> Iterator[IO[bytes]]:
        if not self.is_url:
            try:
                handle = open(self.uri, "rb")  # noqa: SIM115 - closed by the with below
            except IsADirectoryError:
                raise CorpusError("is a folder, not a file", path=self.uri) from None
            except OSError as exc:
                raise CorpusError(f"cannot open: {exc.strerror or exc}", path=self.uri) from None
            with handle:
                yield handle
            return
        try:
            if self.scheme in ("http", "https"):
                reader: IO[bytes] = remote.ResumableHttpReader(self._access())  # type: ignore[assignment]
            else:
                reader = _open_with_smart_open(self._access(), self.scheme, self.display)
        except CorpusError:
            raise
        except Exception as exc:  # noqa: BLE001 - requests/boto3/google raise many types; all mean "cannot open"
            raise CorpusError(f"cannot open: {self.scrub(f'{type(exc).__name__}: {exc}')[:300]}", path=self.display) from None
        with contextlib.closing(reader):
            yield reader


@dataclass(frozen=True)
class OpenedStream:
    head: bytes  # the first SNIFF_BYTES of the decompressed stream (fewer at EOF)
    stream: io.BufferedReader  # the whole decompressed stream, head included


def _open_with_smart_open(uri: str, scheme: str, shown: str) -> IO[bytes]:
    try:
        import smart_open
    except ImportError:
        raise CorpusError("reading URLs needs smart_open", path=shown, hint="pip install 'smart-open[s3,gcs,http]'") from None
    try:
        return smart_open.open(uri, "rb", compression="disable")
    except ImportError:
        raise CorpusError(
            f"reading {scheme}:// URLs needs an optional smart_open dependency",
            path=shown,
            hint=f"pip install 'smart-open[{'gcs' if scheme == 'gs' else scheme}]'",
        ) from None
    except NotImplementedError:
        raise CorpusError(f"no reader for {scheme}:// URLs", path=shown, hint="use https://, s3://, gs:// or a local file") from None


