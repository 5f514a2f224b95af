"""The two sources of vectors: word2vec files and the model's input embeddings.

word2vec binary format (as written by the original C tool and by gensim)::

    "<n_words> <dim>\\n"
    then n_words times: "<word> " + dim little-endian float32 [+ optional "\\n"]

The reader maps the file and copies each vector's bytes straight into one
preallocated ``float32`` array, so the only per-entry Python work is
finding the word (no per-float work) and the words are decoded in one
call: a million 384-d vectors read in a few seconds. Truncated or garbled files raise an
:class:`~greenadapt.errors.InputError` naming the file and the entry.

``counts.tsv`` is ``word<TAB>count`` per line, UTF-8, no header, in the
same order as the vectors (frequency descending).

The embedding matrix is read from the checkpoint files without instantiating the model: the tensor
named ``*word_embeddings.weight`` (ModernBERT: ``*tok_embeddings.weight``) in ``model.safetensors``
(single or sharded) or ``pytorch_model.bin`` (``weights_only``); transformers for any other layout.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.artifacts.files import file_key
from greenadapt.errors import InputError

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

_BLOCK = 16 << 20
# No real word is this long; a longer run without a space means the file is
# not word2vec binary (or the header's dimension is wrong).
_MAX_WORD_BYTES = 4096


def _slots(rows: Sequence[int] | None, n: int) -> np.ndarray:
    """Where each of the ``n`` entries goes among the kept vectors (-1: not kept)."""
    import numpy as np

    if rows is None:
        return np.arange(n, dtype=np.int64)
    wanted = np.asarray(rows, dtype=np.int64).reshape(-1)
    if wanted.size and (wanted.min() < 0 or wanted.max() >= n):
        raise ValueError(f"rows must lie in [0, {n}), got {wanted.min()}..{wanted.max()}")
    slot_array = np.full(n, -1, dtype=np.int64)
    slot_array[wanted] = np.arange(wanted.size)
    if np.count_nonzero(slot_array >= 0) != wanted.size:
        raise ValueError("rows must not repeat")
    return slot_array


def _unreadable_entry(path: Path, i: int, dim: int, n_declared: int, *, truncated: bool) -> InputError:
    if truncated:
        return InputError(
            f"truncated: the header promises {n_declared} vectors of dimension {dim}, the file ends inside entry {i + 1}",
            path=path,
            hint="the file was cut short; rerun the w2v stage with --force",
        )
    return InputError(
        f"entry {i + 1}: no word ends within {_MAX_WORD_BYTES} bytes, so this is not a word2vec "
        f"binary file or the header's dimension {dim} is wrong",
        path=path,
        hint="write the vectors with greenadapt w2v or gensim's save_word2vec_format(binary=True)",
    )


@dataclass(frozen=True)
class VectorRows:
    """Some rows of a vector matrix, in a chosen order, handed out a chunk at a time.

    ``index`` None means every row of ``matrix`` in its order. ``expand`` gives a method its words' vectors
    this way, so the rows can stay inside a matrix read whole (by ``align``, within ``adapt``) instead of being
    gathered into a second one of the same size.
    """

    matrix: np.ndarray
    index: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.matrix) if self.index is None else len(self.index)

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def chunk(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` (positions in this selection) as a float32 array."""
        if self.index is None:
            return self.matrix[start:stop]
        return self.matrix[self.index[start:stop]]


# While ``keep_whole_reads`` is active: the last word2vec file read whole, by its identity on disk.
_KEPT: dict[tuple[int, int, int, int], tuple[list[str], np.ndarray]] | None = None


@contextlib.contextmanager
def keep_whole_reads() -> Iterator[None]:
    """Keep a word2vec file read whole for the block's next row read of the same unchanged file.

    ``adapt`` runs align (which reads every vector) and then expand (which needs most of them again) in one
    process: inside this block expand's :func:`read_word2vec_rows` takes align's matrix instead of parsing
    1.5 GB again (a million new words). One file is kept, until that read takes it or the block ends.
    """
    global _KEPT
    outer, _KEPT = _KEPT, {}
    try:
        yield
    finally:
        _KEPT = outer


def read_word2vec_rows(path: str | os.PathLike[str], rows: Sequence[int]) -> tuple[list[str], VectorRows]:
    """Every word of a word2vec file and the vectors of entries ``rows``, in that order.

    Inside :func:`keep_whole_reads`, a file read whole before is not read again: the rows are a view into it.
    """
    import numpy as np

    path = Path(path)
    # Taken, not copied: from here the matrix lives as long as the caller's rows of it.
    kept = _KEPT.pop(file_key(path), None) if _KEPT and path.is_file() else None
    if kept is not None:
        words, matrix = kept
        log.debug("%s: vectors taken from the whole read earlier in this process", path)
        return words, VectorRows(matrix, np.asarray(rows, dtype=np.int64).reshape(-1))
    words, vectors = read_word2vec_binary(path, rows=rows)
    return words, VectorRows(vectors)


def read_word2vec_binary(
    path: str | os.PathLike[str], limit: int | None = None, *, rows: Sequence[int] | None = None
) -> tuple[list[str], np.ndarray]:
    """Read a word2vec binary file: ``(words, vectors)`` with vectors ``float32`` of shape (n, dim).

    ``limit`` reads only the first ``limit`` entries (the most frequent ones
    for files written in frequency order). ``rows`` (entry indices) keeps
    only those vectors, in that order, while still returning every word: a
    capped ``expand`` then holds the vectors it needs, not all of them.
    """
    import mmap

    import numpy as np

    path = Path(path)
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read word2vec file: {exc.strerror or exc}", path=path) from None
    with handle:
        identity_before = file_key(handle.fileno())
        header = handle.readline(256)
        n_declared, dim = _parse_header(header, path)
        n = n_declared if limit is None else max(0, min(n_declared, limit))
        slots = _slots(rows, n)
        vectors = np.empty((n if rows is None else len(rows), dim), dtype="<f4")
        if n == 0:
            return [], vectors
        # The file is mapped, not read: no copy of it in Python bytes, and each vector's bytes go straight into
        # the array. Pages behind the reader are dropped from this process as it goes, so its resident memory
        # holds the vectors, not also the file.
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            raw_words = _copy_entries(data, len(header), n, dim, slots, vectors, path, n_declared)
        finally:
            data.close()
    words = _decode_words(raw_words, path)
    if vectors.size and not _all_finite(vectors):
        bad_slot = int(np.flatnonzero(~np.isfinite(vectors).all(axis=1))[0])
        bad = bad_slot if rows is None else int(rows[bad_slot])
        raise InputError(
            f"entry {bad + 1} ({words[bad]!r}) holds NaN or infinite values",
            path=path,
            hint="the file is corrupt, or training diverged; rerun the w2v stage with --force",
        )
    if _KEPT is not None and rows is None and limit is None:
        key = file_key(path)
        if key == identity_before:  # not rewritten while it was read
            # Read-only from here: the reader and a later one share the array, so neither may change it.
            vectors.flags.writeable = False
            _KEPT.clear()
            _KEPT[key] = (words, vectors)
    return words, vectors


def _copy_entries(
    data: Any, pos: int, n: int, dim: int, slots: np.ndarray, vectors: np.ndarray, path: Path, n_declared: int
) -> list[bytes]:
    """The words' bytes of the first ``n`` entries; each kept vector copied into its slot of ``vectors``.

    Python only finds the words (one ``find`` each); the vectors are copied by numpy, a window of the file at
    a time: a vector starting at byte ``s`` is row ``(s - r) / 4`` of a float32 view of the file that begins
    at byte ``r = s mod 4``, read through a sliding-window view (no copy) and gathered in one call.
    """
    import mmap

    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    row_bytes = 4 * dim
    end = len(data)
    find = data.find
    # A file shorter than one vector has no windows; the scan below then reports it truncated.
    windows = [
        sliding_window_view(np.frombuffer(data, dtype="<f4", offset=r, count=(end - r) // 4), dim) if (end - r) // 4 >= dim else None
        for r in range(4)
    ]
    raw_words: list[bytes] = []
    append = raw_words.append
    starts: list[int] = []
    start_of = starts.append
    done = dropped = 0
    try:
        while done < n:
            limit = min(n, done + max(1, _BLOCK // row_bytes))
            for i in range(done, limit):
                space = find(b" ", pos, pos + _MAX_WORD_BYTES + 1)
                if space < 0 or space + 1 + row_bytes > end:
                    raise _unreadable_entry(path, i, dim, n_declared, truncated=space >= 0 or end - pos <= _MAX_WORD_BYTES)
                word = data[pos:space]
                # The C tool writes a newline after each vector: it leads the next word.
                append(word.lstrip(b"\n") if word[:1] == b"\n" else word)
                start_of(space + 1)
                pos = space + 1 + row_bytes
            offsets = np.array(starts[done:limit], dtype=np.int64)
            targets = slots[done:limit]
            for r in range(4):
                take = (targets >= 0) & (offsets % 4 == r)
                window = windows[r]
                if take.any() and window is not None:  # a whole vector lies there, so its window exists
                    vectors[targets[take]] = window[(offsets[take] - r) // 4]
            done = limit
            behind = (pos // mmap.PAGESIZE) * mmap.PAGESIZE
            if behind > dropped:
                data.madvise(mmap.MADV_DONTNEED, dropped, behind - dropped)
                dropped = behind
    finally:
        del windows  # numpy's views of the map must go before the map can close
    return raw_words


def _decode_words(raw_words: list[bytes], path: Path) -> list[str]:
    """All words decoded in one call; entry by entry only to name the first bad one."""
    try:
        words = b"\n".join(raw_words).decode("utf-8").split("\n")
    except UnicodeDecodeError:
        words = []
    if len(words) == len(raw_words) and all(words):
        return words
    words = []
    for i, raw in enumerate(raw_words):
        try:
            word = raw.decode("utf-8")
        except UnicodeDecodeError:
            word = ""
        if not word:
            raise InputError(f"entry {i + 1}: the word is empty or not valid UTF-8 ({raw[:40]!r})", path=path,
                             hint="the file is corrupt or not a word2vec binary file")
        words.append(word)
    return words


def _all_finite(vectors: np.ndarray, chunk_rows: int = 65536) -> bool:
    """``np.isfinite(vectors).all()`` without a boolean copy of the whole matrix."""
    import numpy as np

    return all(bool(np.isfinite(vectors[i : i + chunk_rows]).all()) for i in range(0, len(vectors), chunk_rows))


def _parse_header(header: bytes, path: Path) -> tuple[int, int]:
    parts = header.split()
    if not header.endswith(b"\n") or len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise InputError(
            f"not a word2vec binary file: the first line should be '<n_words> <dim>', it is {header[:60]!r}",
            path=path,
            line=1,
            hint="write the vectors with greenadapt w2v or gensim's save_word2vec_format(binary=True)",
        )
    n, dim = int(parts[0]), int(parts[1])
    if dim <= 0:
        raise InputError(f"word2vec header gives dimension {dim}", path=path, line=1, hint="the file is corrupt")
    return n, dim


def write_word2vec_binary(path: str | os.PathLike[str], words: Sequence[str], vectors: np.ndarray) -> None:
    """Write ``words`` and their ``vectors`` in gensim's word2vec binary layout (float32, no newlines)."""
    import numpy as np

    matrix = np.ascontiguousarray(vectors, dtype="<f4")
    if matrix.ndim != 2 or matrix.shape[0] != len(words):
        raise ValueError(f"{len(words)} words but vectors of shape {matrix.shape}")
    with open(path, "wb") as handle:
        handle.write(f"{matrix.shape[0]} {matrix.shape[1]}\n".encode())
        chunk: list[bytes] = []
        for word, row in zip(words, matrix):
            if not word or any(c.isspace() for c in word):
                raise ValueError(f"word2vec words must be non-empty and hold no whitespace: {word!r}")
            chunk.append(word.encode("utf-8") + b" ")
            chunk.append(row.tobytes())
            if len(chunk) >= 8192:
                handle.write(b"".join(chunk))
                chunk.clear()
        handle.write(b"".join(chunk))


def read_counts(path: str | os.PathLike[str]) -> dict[str, int]:
    """Read ``word<TAB>count`` lines into a dict that keeps the file's order."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8", newline="\n") as handle:
            lines = handle.read().split("\n")
    except UnicodeDecodeError:
        raise InputError("counts file is not UTF-8", path=path, hint="rerun the w2v stage with --force") from None
    except OSError as exc:
        raise InputError(f"cannot read counts file: {exc.strerror or exc}", path=path) from None
    if lines and lines[-1] == "":
        lines.pop()
    # Fast path, no per-line Python: one split, then C-level checks on the columns.
    fields = "\t".join(lines).split("\t")
    if len(fields) == 2 * len(lines):
        words, numbers = fields[0::2], fields[1::2]
        # Equal totals could still hide a line with two tabs next to one with none.
        one_tab_each = list(map("\t".join, zip(words, numbers))) == lines
        if one_tab_each and all(words) and all(map(str.isdecimal, numbers)):
            return dict(zip(words, map(int, numbers)))
    counts: dict[str, int] = {}
    for line_no, line in enumerate(lines, start=1):
        word, tab, count = line.rpartition("\t")
        if not tab or not word or not count.isdecimal():
            raise InputError(
                f"expected 'word<TAB>count', got {line[:60]!r}",
                path=path,
                line=line_no,
                hint="the counts file is corrupt; rerun the w2v stage with --force",
            )
        counts[word] = int(count)
    return counts


def write_counts(path: str | os.PathLike[str], counts: Sequence[tuple[str, int]]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(f"{word}\t{count}\n" for word, count in counts)
