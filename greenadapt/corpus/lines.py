"""Corpus text read as lines: plain text in any of the usual encodings (a BOM stripped), streamed in blocks, and a line
too long to hold cut at whitespace."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import IO

from greenadapt.corpus.formats import (
    ReadStats,
    Source,
    decode,
)

log = logging.getLogger(__name__)


BOM = "\ufeff"
_BLOCK = 1 << 20


# A line longer than this (a document or a dump with no newline at all) is
# cut, at its last space or tab before the limit, into lines of at most this
# size: memory stays bounded however long the line. word2vec cuts lines at
# 1000 words anyway (pretokenize.MAX_LINE_WORDS), so nothing is lost but one
# sentence break.
MAX_LINE_BYTES = 8 << 20
_WHITESPACE = (b" ", b"\t", b"\x0b", b"\x0c", b"\r")


def byte_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """Lines split at LF, without their terminator (LF or CRLF)."""
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
        yield raw


def lines_with_ends(stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
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
