"""File identities and atomic writes: the checksums and identities manifests record, and writes that leave the old file or the new one, never a part."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import logging
import json
import os
import platform
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from greenadapt.version import __version__

log = logging.getLogger(__name__)

# Digests this process computed, by the file's identity on disk. ``adapt`` runs w2v, align and expand in one
# process: the vectors w2v wrote and checksummed are then verified by align and again by expand without reading
# 1.5 GB twice more (a million new words). Any write to a file moves its modification time, so it is hashed anew.
_DIGESTS: dict[tuple[int, int, int, int], str] = {}

_HASH_CHUNK = 8 << 20


def file_key(path: str | os.PathLike[str] | int) -> tuple[int, int, int, int]:
    """A file's identity on disk while its content stays the same: device, inode, size, modification time.

    ``path`` may be an open file's descriptor: the identity of the file that was opened.
    """
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def sha256_file(path: Path) -> str:
    """The file's SHA-256, computed once per process for as long as the file stays the same."""
    key = file_key(path)
    cached = _DIGESTS.get(key)
    if cached is not None:
        return cached
    digest = _sha256_contents(path)
    if file_key(path) == key:  # not changed while it was read
        _DIGESTS[key] = digest
    return digest


class HashedWriter:
    """Writes a binary file and takes its SHA-256 on the way, the hashing in a thread beside the writes.

    Once the file is closed, :func:`sha256_file` knows its digest, so a stage checksumming its outputs does not
    read back the model it just wrote (1.6 GB for a million new words). A writer that fails remembers nothing.
    """

    def __init__(self, path: Path) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.path = path
        self._handle = open(path, "wb")
        self._digest = hashlib.sha256()
        self._hasher = ThreadPoolExecutor(1, thread_name_prefix="greenadapt-sha256")

    def write(self, data: Any) -> None:
        # hashlib lets go of the GIL for large buffers: the hash runs while the same bytes are written.
        hashed = self._hasher.submit(self._digest.update, data)
        try:
            self._handle.write(data)
        finally:
            hashed.result()

    def __enter__(self) -> HashedWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self._handle.close()
        finally:
            self._hasher.shutdown(wait=True)
        if exc_type is None:
            _DIGESTS[file_key(self.path)] = self._digest.hexdigest()


def _sha256_contents(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Cheap identity of a local input file: path, size and modification time.

    A folder (a saved ``datasets`` split) is identified by its files: their
    count, total size and newest modification time.
    """
    p = Path(path)
    if p.is_dir():
        stats = [f.stat() for f in sorted(p.rglob("*")) if f.is_file()]
        return {
            "path": str(p.resolve()), "files": len(stats),
            "size": sum(st.st_size for st in stats), "mtime_ns": max((st.st_mtime_ns for st in stats), default=0),
        }
    st = p.stat()
    return {"path": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def library_versions(*names: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version(), "greenadapt": __version__}
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "absent"
    return versions


_TEMPORARY_TAG = ".greenadapt-"  # in the name of every temporary atomic_writer makes: .<name>.greenadapt-<hex>.tmp


PARTIAL_SUFFIX = ".partial"  # atomic_writer(sidecar=True): <path>.partial links to the file being written


@contextlib.contextmanager
def atomic_writer(path: Path, *, sidecar: bool = False) -> Iterator[IO[str]]:
    """A text file written piece by piece that readers see whole at ``path`` when the block ends, or not at all.

    What ``path`` already is stays what it is, as with a shell redirection: a symbolic link to a file is written
    through (the file it points to is replaced, atomically, and the link stays); a pipe, a character device
    (``/dev/stdout``, ``/dev/null``) or a link to one is opened and written, never replaced by a regular file.
    The temporary is locked while it is written, so that a run killed halfway leaves a hidden file that the next
    write to the same path removes. ``sidecar``: while it is written, ``<path>.partial`` is a link to it, so a long
    write (a cron job's predictions) can be followed with ``tail -F <path>.partial``; the link goes when the file is
    in place (a killed run's is removed by the next write).
    """
    path = Path(path)
    if writes_through(path):
        with open(path, "w", encoding="utf-8") as handle:
            yield handle
        return
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    _sweep_dead_temporaries(path)
    tmp = path.with_name(f".{path.name}{_TEMPORARY_TAG}{uuid.uuid4().hex[:8]}.tmp")
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # released by the kernel when this process dies
            if sidecar:
                _link_partial(partial, tmp)
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if sidecar and partial.is_symlink() and os.readlink(partial) == tmp.name:
            partial.unlink()


def _link_partial(partial: Path, tmp: Path) -> None:
    """``partial`` -> ``tmp`` (relative), replacing only a link greenadapt made (one to a temporary of ours)."""
    if partial.exists() or partial.is_symlink():
        if not (partial.is_symlink() and _TEMPORARY_TAG in os.readlink(partial)):
            return  # a user's file of that name: left alone, no sidecar this time
        partial.unlink()
    with contextlib.suppress(OSError):
        partial.symlink_to(tmp.name)


def writes_through(path: Path) -> bool:
    """Whether ``path`` is (or links to) something other than a regular file, a folder or nothing: a pipe, a
    device, or a link whose target cannot be named (``/proc/self/fd/1`` of a pipe): written as a shell would."""
    try:
        mode = os.stat(path).st_mode  # follows links
    except OSError:
        return path.is_symlink() and not Path(os.path.realpath(path)).parent.is_dir()
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _sweep_dead_temporaries(path: Path) -> None:
    """Remove the temporaries of ``path`` that a killed writer left (their lock is free); a live writer's stay."""
    for leftover in path.parent.glob(f".{glob.escape(path.name)}{_TEMPORARY_TAG}*.tmp"):
        try:
            descriptor = os.open(leftover, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a live writer holds it
        else:
            log.info("removing %s, left by a write that was killed", leftover)
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        finally:
            os.close(descriptor)
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    if partial.is_symlink() and _TEMPORARY_TAG in os.readlink(partial) and not partial.exists():
        partial.unlink()  # the sidecar of a killed write: it points at nothing now


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file so readers see the old content or the new, never a part."""
    with atomic_writer(path) as handle:
        handle.write(text)


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
