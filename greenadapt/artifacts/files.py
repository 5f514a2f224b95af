"""File identities and atomic writes: the checksums and identities manifests record, and writes that leave the old file
or the new one, never a part."""

from __future__ import annotations

import contextlib
import errno
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


class NotARegularFile(OSError):
    """greenadapt's own file is a FIFO, device, socket or folder: opening it to read could wait forever."""

    def __init__(self, path: str | os.PathLike[str], mode: int) -> None:
        kind = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
                stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}.get(stat.S_IFMT(mode), "not a regular file")
        super().__init__(errno.EINVAL, f"{kind}, not a file greenadapt wrote (not read: it could block)", str(path))
        self.kind = kind


def open_regular(path: str | os.PathLike[str]) -> IO[bytes]:
    """``path`` opened to read only if it is a regular file (a link to one counts): opened without blocking, checked on
    the open descriptor, then read as usual, so a FIFO or device put where greenadapt reads back its own file raises
    :class:`NotARegularFile` at once instead of waiting forever."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(path, mode)
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_own_text(path: str | os.PathLike[str], limit: int = 256 << 20) -> str:
    """A text file greenadapt wrote (a manifest, checkpoint record, cache record, compare.json): regular files only,
    UTF-8, at most ``limit`` bytes (a larger one is damaged: ValueError)."""
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path}: over {limit} bytes, larger than any file greenadapt writes there")
    return data.decode("utf-8")


def process_umask() -> int:
    """This process's umask, read without changing it (Linux's /proc; elsewhere set and restored at once)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def readable_as_the_umask_says(folder: Path) -> None:
    """Give every file and folder under ``folder`` the mode a plain write would (0666/0777 less the umask): libraries
    that write through a private temporary (transformers' ``save_pretrained`` writes model.safetensors 0600) would
    otherwise leave a model that another user of a shared server, or a cron job under another account, cannot read."""
    mask = process_umask()
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.stat().st_mode)
        wanted = (0o777 if path.is_dir() or mode & 0o111 else 0o666) & ~mask  # an executable (serve_onnx.py) stays one
        if mode != wanted:
            os.chmod(path, wanted)


def _sha256_contents(path: Path) -> str:
    digest = hashlib.sha256()
    with open_regular(path) as handle:
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
_TEMPORARY_NAME = r"\.{name}\.greenadapt-[0-9a-f]{{8}}\.tmp"
# An extended attribute set on every temporary when it is created: a leftover is removed only when it carries it
# (its name alone proves nothing: a user's file may look like one). Where the file system has no user attributes,
# nothing is marked and a killed write's temporary stays until the user removes it.
OWNER_ATTRIBUTE = "user.greenadapt"
OWNER_MARK = b"temporary"


# A model folder's cache of what is made from its weights (ONNX exports): greenadapt's own, tagged as a cache
# directory (bford.info/cachedir: backup tools skip it), and passed over when the folder's files are checked.
CACHE_FOLDER = ".greenadapt-cache"
CACHE_TAG = "CACHEDIR.TAG"
CACHE_SIGNATURE = "Signature: 8a477f597d28d172789f06886806bc55"


def make_cache(root: Path) -> None:
    """``root`` as a tagged cache folder (made if missing). The tag is created, never written through a link (a link
    at its name, even one to nothing, is refused by the caller before this)."""
    from greenadapt.errors import ResourceError

    try:
        root.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(root / CACHE_TAG, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return
    except OSError as exc:
        raise ResourceError(f"cannot make greenadapt's cache here: {exc.strerror or exc}", path=root,
                            hint="check the path (and $XDG_CACHE_HOME), or make the model's folder writable") from None
    with os.fdopen(descriptor, "w", encoding="utf-8") as tag:
        tag.write(f"{CACHE_SIGNATURE}\n# greenadapt's cache (ONNX exports of this folder's weights): safe to delete, made again when "
                  f"needed\n")


def is_greenadapt_cache(folder: Path) -> bool:
    """Whether ``folder`` is a cache greenadapt made (a real folder holding its tag)."""
    tag = folder / CACHE_TAG
    with contextlib.suppress(OSError):
        return not folder.is_symlink() and folder.is_dir() and tag.is_file() and tag.read_text(encoding="utf-8").startswith(CACHE_SIGNATURE)
    return False


PARTIAL_SUFFIX = ".partial"  # atomic_writer(sidecar=True): <path>.partial links to the file being written


def refuse_planted(path: Path, what: str, *, kind: str = "file") -> None:
    """``path`` is a name greenadapt writes or removes beside a user's files (a lock, a log, a checkpoints folder,
    compare.json): whatever is there that greenadapt cannot have made (a symbolic link to anything, a pipe or device,
    a file with other names, a file where a folder belongs or the reverse) is never written through, replaced or
    removed: a :class:`~greenadapt.errors.ResourceError` (exit 5) naming it, the thing and its target untouched."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    found = _planted(st, kind)
    if found is not None:
        raise _refusal(path, what, found)


def _refusal(path: Path, what: str, found: str) -> Exception:
    from greenadapt.errors import ResourceError

    return ResourceError(f"{what} is {found}, which greenadapt did not make: it neither writes through it nor replaces it",
                         path=path, hint="move it away (greenadapt writes this name itself), then rerun")


def _planted(st: os.stat_result, kind: str) -> str | None:
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if kind == "folder":
        return None if stat.S_ISDIR(mode) else "not a folder"
    if stat.S_ISDIR(mode):
        return "a folder"
    if not stat.S_ISREG(mode):
        return "a pipe, socket or device"
    if st.st_nlink > 1:
        return f"a file with {st.st_nlink - 1} other name(s) (hard links)"
    return None


def open_own(path: Path, what: str, *, append: bool = False, read: bool = False) -> IO[str]:
    """A text file greenadapt names itself (a log), opened without following a link and without emptying anything that
    is not a plain file of its own name: see :func:`refuse_planted`. ``append`` keeps what it holds, ``read`` opens it
    for reading and writing from the start (a lock)."""
    from greenadapt.errors import ResourceError

    flags = os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_RDWR if read else os.O_WRONLY)
    try:
        descriptor = os.open(path, flags | (os.O_APPEND if append else 0), 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):  # a link, a folder, a FIFO nobody reads
            refuse_planted(path, what)
            raise ResourceError(f"{what} cannot be opened ({exc.strerror})", path=path, hint="move it away, then rerun") from None
        raise
    try:
        found = _planted(os.fstat(descriptor), "file")
        if found is not None:
            raise _refusal(path, what, found)
        os.set_blocking(descriptor, True)
        if not append and not read:
            os.ftruncate(descriptor, 0)
        return os.fdopen(descriptor, "r+" if read else ("a" if append else "w"), encoding="utf-8")
    except BaseException:
        os.close(descriptor)
        raise


def mark_ours(descriptor: int) -> None:
    """Record on an open temporary that greenadapt made it (see :data:`OWNER_ATTRIBUTE`)."""
    with contextlib.suppress(OSError, AttributeError):
        os.setxattr(descriptor, OWNER_ATTRIBUTE, OWNER_MARK)


def is_ours(descriptor: int) -> bool:
    """Whether the open file carries greenadapt's mark of a temporary."""
    try:
        return os.getxattr(descriptor, OWNER_ATTRIBUTE) == OWNER_MARK
    except (OSError, AttributeError):
        return False


@contextlib.contextmanager
def atomic_writer(path: Path, *, sidecar: bool = False, user_path: bool = False) -> Iterator[IO[str]]:
    """A text file written piece by piece that readers see whole at ``path`` when the block ends, or not at all.

    ``user_path``: ``path`` is the user's own choice (predict's ``-o``, a report's file): what it already is stays
    what it is, as with a shell redirection: a symbolic link to a file is written through (the file it points to is
    replaced, atomically, and the link stays); a pipe, a character device (``/dev/stdout``, ``/dev/null``) or a link
    to one is opened and written, never replaced by a regular file. Otherwise ``path`` is a name greenadapt chose
    (compare.json, a manifest): a link or anything else greenadapt cannot have made there is refused
    (:func:`refuse_planted`), never written through.
    The temporary is locked while it is written and marked as greenadapt's, so that a run killed halfway leaves a
    hidden file that the next write to the same path removes. ``sidecar``: while it is written, ``<path>.partial`` is
    a link to it, so a long write (a cron job's predictions) can be followed with ``tail -F <path>.partial``; the link
    goes when the file is in place (a killed run's, dangling, is removed by the next write).
    """
    path = Path(path)
    if not user_path:
        refuse_planted(path, f"{path.name}, a file greenadapt writes,")
    elif writes_through(path):
        with open(path, "w", encoding="utf-8") as handle:
            yield handle
        return
    elif path.is_symlink():
        path = Path(os.path.realpath(path))
    _sweep_dead_temporaries(path)
    tmp = path.with_name(f".{path.name}{_TEMPORARY_TAG}{uuid.uuid4().hex[:8]}.tmp")
    partial = path.with_name(path.name + PARTIAL_SUFFIX)
    try:
        descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # released by the kernel when this process dies
            mark_ours(descriptor)
            if sidecar:
                _link_partial(partial, tmp, path)
            yield handle
            handle.flush()
            os.fsync(descriptor)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if sidecar and partial.is_symlink() and os.readlink(partial) == tmp.name:
            partial.unlink()


def _is_dead_sidecar(partial: Path, path: Path) -> bool:
    """Whether ``partial`` is a sidecar link a killed write left for ``path``: a link to nothing, named as greenadapt
    names its temporaries of ``path`` (a dangling link holds no data; a user's link to a file is never one)."""
    import re

    if not partial.is_symlink() or partial.exists():
        return False
    return re.fullmatch(_TEMPORARY_NAME.format(name=re.escape(path.name)), os.readlink(partial)) is not None


def _link_partial(partial: Path, tmp: Path, path: Path) -> None:
    """``partial`` -> ``tmp`` (relative); a dead sidecar of ``path``'s is replaced, anything else of that name left alone."""
    if partial.exists() or partial.is_symlink():
        if not _is_dead_sidecar(partial, path):
            return  # a user's file or link of that name: left alone, no sidecar this time
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
    """Remove the temporaries of ``path`` that a killed writer left: plain files carrying greenadapt's mark whose lock
    is free (a live writer's stay; a user's file or folder of such a name is never touched)."""
    for leftover in path.parent.glob(f".{glob.escape(path.name)}{_TEMPORARY_TAG}*.tmp"):
        try:
            descriptor = os.open(leftover, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            st = os.fstat(descriptor)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or not is_ours(descriptor):
                continue
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
    if _is_dead_sidecar(partial, path):
        partial.unlink()  # the sidecar of a killed write: it points at nothing now


def fsync_directory(path: Path) -> None:
    """Make a rename into ``path`` durable: it is so only once the directory entry is on disk (a file system that
    cannot sync a directory is left as it is)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_text(path: Path, text: str, *, user_path: bool = False) -> None:
    """Write a file so readers see the old content or the new, never a part (``user_path``: see :func:`atomic_writer`)."""
    with atomic_writer(path, user_path=user_path) as handle:
        handle.write(text)


def write_json(path: Path, obj: Any, *, scrub: bool = True) -> None:
    """A JSON file at a name greenadapt chose (a manifest, compare.json), written atomically, never through a link, with
    credentials in any spelling taken out (:func:`~greenadapt.redaction.scrub_secrets`, as a record: its paths stay
    readable). ``scrub=False`` for a file of the user's own data (predictions, whose words are theirs to keep as they are)."""
    from greenadapt.redaction import scrub_secrets

    text = json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n"
    atomic_write_text(path, scrub_secrets(text, record=True) if scrub else text)
