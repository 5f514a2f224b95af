"""Stage folders: atomic creation, manifests, locks and skip-if-unchanged.

Every stage writes into a private temporary sibling folder and renames it
into place only after ``manifest.json`` (written last, with checksums of
every file) is on disk. So a folder with a valid manifest is complete by
construction, and a killed run leaves the previous output or nothing.

A stage's *fingerprint* hashes its kind, its result-relevant options and
the identities of its inputs; a rerun whose fingerprint matches a verified
existing output is skipped.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import platform
import re
import resource
import shutil
import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, UTC
from pathlib import Path
from typing import IO, Any

from greenadapt import __version__
from greenadapt.energy import EnergyProbe
from greenadapt.errors import (
    LockedError,
    OutputExistsError,
    ResourceError,
    StageError,
)

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
MANIFEST_CHECKSUM = "manifest_sha256"
EDITED = "edited by hand (its checksum no longer matches its fields)"
_HASH_CHUNK = 8 << 20
_SHOWN = 3
# A run whose output is up to date waits this long for another process that holds the output's lock
# (most often one checking the same up-to-date output) instead of failing at once.
UP_TO_DATE_WAIT_SECONDS = 120.0


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def fingerprint(kind: str, config: Mapping[str, Any], inputs: list[Mapping[str, Any]]) -> str:
    """What names a stage's output: its kind, options and inputs.

    Upstream stages are named by their content (fingerprint and file checksums), not
    by where they lie, so a workspace moved or copied (``mv``, ``cp -a``) stays up to
    date; corpus files, data files and models keep their paths.
    """
    payload = canonical_json({"kind": kind, "config": _without_paths(config), "inputs": _without_paths(inputs)})
    return hashlib.sha256(payload.encode()).hexdigest()


def legacy_fingerprint(kind: str, config: Mapping[str, Any], inputs: list[Mapping[str, Any]]) -> str:
    """The fingerprint greenadapt wrote before paths were left out: outputs made then stay up to date."""
    payload = canonical_json({"kind": kind, "config": config, "inputs": inputs})
    return hashlib.sha256(payload.encode()).hexdigest()


_PATH_KEYS = frozenset({"path", "relpath"})


def _without_paths(value: Any) -> Any:
    # Only upstream stages are named by content (their files' checksums); a file or model named by
    # size and modification time keeps its path, or two equal-sized files written in the same
    # second of a coarse-clock file system would be taken for one.
    if isinstance(value, Mapping):
        content_named = "content" in value
        return {k: _without_paths(v) for k, v in value.items() if not (content_named and k in _PATH_KEYS)}
    if isinstance(value, list | tuple):
        return [_without_paths(v) for v in value]
    return value


def with_relative_paths(inputs: list[Mapping[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """``inputs`` as a manifest in ``folder`` records them: each local path also relative to the folder."""
    recorded = []
    for item in inputs:
        entry = dict(item)
        if isinstance(entry.get("path"), str) and not isinstance(entry.get("relpath"), str):
            entry["relpath"] = os.path.relpath(entry["path"], folder)
        recorded.append(entry)
    return recorded


def recorded_input_path(recorded: Mapping[str, Any], manifest_folder: Path) -> Path:
    """Where an input a manifest records is now: its path, else the same place relative to the manifest's
    folder (the two moved together); raises a StageError saying "moved" when neither exists."""
    path = Path(str(recorded.get("path", "")))
    if recorded.get("path") and path.exists():
        return path
    relative = recorded.get("relpath")
    if isinstance(relative, str) and (manifest_folder / relative).exists():
        return Path(os.path.normpath(manifest_folder / relative))
    raise StageError(
        f"its {recorded.get('stage') or 'input'} input was moved: {path} no longer exists"
        + (f", nor {manifest_folder / relative}" if isinstance(relative, str) else ""),
        path=manifest_folder,
        hint="move it back, or rerun this stage with --force on the input's new place",
    )


def same_identity(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two recorded identities name the same content, wherever it lies."""
    return _without_paths(a) == _without_paths(b)


def sha256_file(path: Path) -> str:
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


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[IO[str]]:
    """A text file written piece by piece that readers see whole at ``path`` when the block ends, or not at all."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def atomic_write_text(path: Path, text: str) -> None:
    """Write a file so readers see the old content or the new, never a part."""
    with atomic_writer(path) as handle:
        handle.write(text)


def write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


# --------------------------------------------------------------------------
# Reading and verifying existing stage folders


def read_manifest(folder: Path) -> dict[str, Any] | None:
    manifest, _ = read_manifest_checked(folder)
    return manifest


def manifest_checksum(manifest: Mapping[str, Any]) -> str:
    """The checksum a manifest carries over its own fields, so a hand edit is told from changed inputs."""
    body = {k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM}
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


def read_manifest_checked(folder: Path) -> tuple[dict[str, Any] | None, str]:
    """A manifest greenadapt wrote, unedited; else None and why not ("" when there is none at all)."""
    manifest, damage = _parse_manifest(folder)
    if manifest is not None and _edited(manifest):
        return None, EDITED
    return manifest, damage


def _edited(manifest: Mapping[str, Any]) -> bool:
    recorded = manifest.get(MANIFEST_CHECKSUM)
    # Manifests written before the checksum existed carry none; they are trusted as before.
    return recorded is not None and recorded != manifest_checksum(manifest)


def _parse_manifest(folder: Path) -> tuple[dict[str, Any] | None, str]:
    """A manifest in greenadapt's form (maybe edited), or None and why not ("" when there is none at all)."""
    path = folder / MANIFEST
    if not path.is_file():
        return None, ""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}): truncated or damaged"
    except UnicodeDecodeError:
        return None, "not UTF-8 text: damaged"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    if not isinstance(manifest, dict):
        return None, f"a JSON {type(manifest).__name__}, not an object: damaged"
    if not isinstance(manifest.get("kind"), str):
        return None, "not one greenadapt writes (it names no stage kind)"
    return manifest, ""


def verify_files(folder: Path, manifest: Mapping[str, Any], *, checksums: bool = True) -> str | None:
    """Return None if every file the manifest vouches for matches, else why not."""
    files = manifest.get("files")
    if not isinstance(files, dict):
        return "the manifest lists no files"
    for rel, meta in files.items():
        if not isinstance(meta, dict) or not isinstance(meta.get("size"), int) or not isinstance(meta.get("sha256"), str):
            return f"the manifest's entry for {rel} is damaged (no size and sha256)"
        if rel.startswith("/") or ".." in rel.split("/") or "\\" in rel or not rel:
            return f"the manifest names {rel!r}, a file outside its folder"
        path = folder / rel
        if not path.is_file():
            return f"{rel} is missing"
        if path.stat().st_size != meta.get("size"):
            return f"{rel} has size {path.stat().st_size}, the manifest says {meta.get('size')}"
        if checksums and sha256_file(path) != meta.get("sha256"):
            return f"{rel} does not match its checksum"
    return None


def load_stage(folder: str | os.PathLike[str], kind: str, *, checksums: bool = True) -> dict[str, Any]:
    """Open a finished stage folder of ``kind`` or raise a StageError saying why not."""
    path = Path(folder)
    if not path.is_dir():
        raise StageError(
            f"no {kind} output here",
            path=path,
            hint=f"run `greenadapt {kind}` first or pass the folder it wrote",
        )
    manifest, damage = read_manifest_checked(path)
    if manifest is None and damage:
        raise StageError(
            f"{MANIFEST} is {damage}",
            path=path / MANIFEST,
            # An edited manifest is still greenadapt's, so --force may replace the folder; an unreadable one is not.
            hint=f"rerun `greenadapt {kind} ... --force`" if damage == EDITED else f"delete {path} and rerun `greenadapt {kind}`",
        )
    if manifest is None:
        raise StageError(
            "not a finished greenadapt stage folder (no manifest.json)",
            path=path,
            hint=f"pass the folder `greenadapt {kind}` wrote",
        )
    if manifest.get("kind") != kind:
        raise StageError(
            f"this is a {manifest.get('kind')!r} folder, a {kind!r} folder is needed here",
            path=path,
            hint=f"pass the folder written by `greenadapt {kind}`",
        )
    problem = verify_files(path, manifest, checksums=checksums)
    if problem:
        raise StageError(
            f"corrupt {kind} output: {problem}",
            path=path / MANIFEST if problem.startswith("the manifest") else path,
            hint=f"rerun `greenadapt {kind} ... --force`",
        )
    return manifest


def manifest_identity(folder: Path, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """How a downstream stage names this upstream stage in its own fingerprint.

    The content digest (over the upstream file checksums) matters as much as
    the fingerprint: a forced redo with multi-threaded training can produce
    different vectors from identical options, and downstream must notice.
    """
    content = hashlib.sha256(canonical_json(manifest.get("files", {})).encode()).hexdigest()
    return {
        "stage": manifest.get("kind"),
        "path": str(folder.resolve()),
        "fingerprint": manifest.get("fingerprint"),
        "content": content,
    }


def check_ownership(out: Path, *, kind: str, force: bool, shown: Path | None = None) -> dict[str, Any] | None:
    """The manifest of an existing greenadapt folder at ``out`` (None when ``out`` is new or empty).

    Raises for a destination greenadapt must not replace: greenadapt replaces
    only a folder whose manifest it wrote and that holds no file the manifest
    does not list; a greenadapt folder of another kind needs ``force``.
    """
    name = shown if shown is not None else out
    if not out.exists() and not out.is_symlink():
        return None
    if not out.is_dir():
        raise OutputExistsError("exists and is not a folder", path=name, hint="choose a new or empty folder")
    try:
        entries = list(out.iterdir())
    except OSError as exc:
        raise ResourceError(f"cannot read the folder: {exc.strerror or exc}", path=name) from None
    if not entries:
        return None
    manifest, damage = _parse_manifest(out)
    if manifest is not None and _edited(manifest) and not force:
        raise OutputExistsError(f"existing output's {MANIFEST} was {EDITED}", path=name, hint="pass --force to redo it")
    if manifest is None:
        what = f"its {MANIFEST} is {damage}" if damage else "it holds files greenadapt did not write"
        raise OutputExistsError(
            f"refusing to replace this folder: {what}",
            path=name,
            hint="choose a new or empty folder; greenadapt replaces only folders it wrote, with or without --force",
        )
    foreign = foreign_files(out, manifest)
    if foreign:
        listed = ", ".join(foreign[:_SHOWN]) + (f" and {len(foreign) - _SHOWN} more" if len(foreign) > _SHOWN else "")
        raise OutputExistsError(
            f"refusing to replace this greenadapt folder: it also holds files greenadapt did not write ({listed})",
            path=name,
            hint="move those files elsewhere, or choose a new or empty folder",
        )
    if manifest.get("kind") != kind and not force:
        raise OutputExistsError(
            f"output folder exists and is a {manifest.get('kind')!r} folder",
            path=name,
            hint="choose another --out, or pass --force to replace it",
        )
    return manifest


def foreign_files(folder: Path, manifest: Mapping[str, Any]) -> list[str]:
    """Files (and links) under ``folder`` that its manifest does not list, sorted."""
    listed = set(manifest.get("files", {}) or {}) | {MANIFEST}
    found = []
    for path in folder.rglob("*"):
        if path.is_symlink() or path.is_file():
            rel = path.relative_to(folder).as_posix()
            if rel not in listed:
                found.append(rel)
        elif not path.is_dir():
            found.append(path.relative_to(folder).as_posix())
    return sorted(found)


# --------------------------------------------------------------------------
# Writing stage folders


@dataclass(frozen=True)
class StageOutcome:
    """What a stage function returns: where its output is, its manifest, whether it was skipped."""

    path: Path
    manifest: dict[str, Any]
    skipped: bool
    skip_reason: str = ""


@dataclass
class CostMeter:
    """Wall time, CPU seconds and peak memory of this process and its children,
    plus GPU time, energy (measured or estimated, method stated) and CO₂: see greenadapt.energy."""

    wall_start: float = field(default_factory=time.perf_counter)
    cpu_start: float = field(default_factory=lambda: _cpu_seconds())
    probe: EnergyProbe = field(default_factory=EnergyProbe)

    def snapshot(self) -> dict[str, Any]:
        self_usage = resource.getrusage(resource.RUSAGE_SELF)
        child_usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        # ru_maxrss is KiB on Linux; the children figure is the largest child's.
        peak_kib = max(self_usage.ru_maxrss, child_usage.ru_maxrss)
        cost: dict[str, Any] = {
            "wall_seconds": round(time.perf_counter() - self.wall_start, 3),
            "cpu_seconds": round(_cpu_seconds() - self.cpu_start, 3),
            "peak_rss_mib": round(peak_kib / 1024, 1),
            "cpu_count": os.cpu_count(),
            "host": socket.gethostname(),
        }
        cost.update(
            self.probe.finish(
                wall_seconds=cost["wall_seconds"],
                cpu_seconds=cost["cpu_seconds"],
                peak_rss_mib=cost["peak_rss_mib"],
                cpu_count=cost["cpu_count"],
            )
        )
        return cost


def _cpu_seconds() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


class StageRun:
    """Context manager that owns one stage output folder while it is made.

    >>> with StageRun("w2v", out, config, inputs, force=False) as run:
    ...     if run.skipped:
    ...         return run.manifest
    ...     (run.tmp / "vectors.bin").write_bytes(...)
    ...     manifest = run.commit(stats={...})
    """

    def __init__(
        self,
        kind: str,
        out_dir: str | os.PathLike[str],
        config: Mapping[str, Any],
        inputs: list[Mapping[str, Any]],
        *,
        force: bool = False,
        wait: bool = False,
        libraries: tuple[str, ...] = (),
    ) -> None:
        self.kind = kind
        self.out = Path(out_dir).absolute()
        self.config = dict(config)
        self.inputs = list(inputs)
        self.force = force
        self.wait = wait
        self.libraries = libraries
        self.fingerprint = fingerprint(kind, self.config, self.inputs)
        self.skipped = False
        self.skip_reason = ""
        self.manifest: dict[str, Any] | None = None
        self.tmp: Path = self.out  # replaced in __enter__
        self._lock_handle: Any = None
        self._meter = CostMeter()

    # -- lifecycle ----------------------------------------------------------
    def __enter__(self) -> StageRun:
        try:
            self.out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _resource_error(exc, self.out.parent) from exc
        self._acquire_lock()
        try:
            self._clean_stale_temporaries()
            if self._existing_is_current():
                return self
            self.tmp = self.out.parent / f".{self.out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            self.tmp.mkdir()
        except BaseException:
            self._release_lock()
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if self.tmp != self.out and self.tmp.exists():
                shutil.rmtree(self.tmp, ignore_errors=True)
        finally:
            self._release_lock()
        # A full disk while the stage wrote its own files (vectors, weights): one clear line, not
        # an internal error. Only errors that writing alone raises; EACCES may come from an input.
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG):
            raise _resource_error(exc, self.out) from exc

    # -- decisions ----------------------------------------------------------
    def _existing_is_current(self) -> bool:
        # Under the lock: the folder may have changed since the command's check_destination.
        manifest = check_ownership(self.out, kind=self.kind, force=self.force)
        if manifest is None or manifest.get("kind") != self.kind or self.force:
            return False
        if manifest.get("fingerprint") not in (self.fingerprint, legacy_fingerprint(self.kind, self.config, self.inputs)):
            changed = _config_difference(manifest.get("config", {}), self.config)
            raise OutputExistsError(
                f"{self.kind} output exists but was made with other inputs or options ({changed})",
                path=self.out,
                hint="pass --force to redo it, or choose another --out",
            )
        problem = verify_files(self.out, manifest)
        if problem:
            raise StageError(
                f"existing {self.kind} output is corrupt: {problem}",
                path=self.out,
                hint="pass --force to redo it",
            )
        self.skipped = True
        self.skip_reason = f"up to date: same inputs and options as the run of {manifest.get('created', '?')}"
        self.manifest = manifest
        log.info("%s: %s (%s); --force redoes it", self.kind, self.skip_reason, self.out)
        return True

    # -- writing ------------------------------------------------------------
    def commit(self, *, stats: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Checksum the temporary folder, write the manifest, swap it into place."""
        if self.skipped:
            raise RuntimeError("commit() on a skipped stage")
        files: dict[str, dict[str, Any]] = {}
        for path in sorted(self.tmp.rglob("*")):
            if path.is_file() and path.name != MANIFEST:
                rel = path.relative_to(self.tmp).as_posix()
                files[rel] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
        manifest: dict[str, Any] = {
            "kind": self.kind,
            "format": MANIFEST_FORMAT,
            "greenadapt_version": __version__,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "fingerprint": self.fingerprint,
            "config": self.config,
            "inputs": with_relative_paths(self.inputs, self.out),
            "libraries": library_versions(*self.libraries),
            "stats": dict(stats or {}),
            "cost": self._meter.snapshot(),
            "files": files,
        }
        if extra:
            manifest.update(extra)
        # The checksum covers the fields as a reader will parse them back.
        manifest = json.loads(json.dumps(manifest, default=str))
        manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
        try:
            write_json(self.tmp / MANIFEST, manifest)
            _fsync_dir(self.tmp)
            self._swap_into_place()
        except OSError as exc:
            raise _resource_error(exc, self.out) from exc
        self.manifest = manifest
        return manifest

    def _swap_into_place(self) -> None:
        old = None
        if self.out.exists():
            old = self.out.parent / f".{self.out.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            os.rename(self.out, old)
        os.rename(self.tmp, self.out)
        _fsync_dir(self.out.parent)
        self.tmp = self.out
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    # -- locking ------------------------------------------------------------
    @property
    def lock_path(self) -> Path:
        return self.out.parent / f".{self.out.name}.lock"

    def _acquire_lock(self) -> None:
        try:
            handle = open(self.lock_path, "a+")
        except OSError as exc:
            raise _resource_error(exc, self.out.parent) from exc
        flags = fcntl.LOCK_EX if self.wait else fcntl.LOCK_EX | fcntl.LOCK_NB
        try:
            fcntl.flock(handle, flags)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            if self._looks_up_to_date() and _lock_within(handle, UP_TO_DATE_WAIT_SECONDS, holder, self.out):
                handle.seek(0)
                handle.truncate()
                handle.write(f"greenadapt pid {os.getpid()} on {socket.gethostname()}")
                handle.flush()
                self._lock_handle = handle
                return
            handle.close()
            raise LockedError(
                f"{holder} is writing this {self.kind} output right now",
                path=self.out,
                hint="wait for it to finish, or pass --wait to queue behind it",
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"greenadapt pid {os.getpid()} on {socket.gethostname()}")
        handle.flush()
        self._lock_handle = handle

    def _looks_up_to_date(self) -> bool:
        """Whether the output there was made with this run's inputs and options (not verified: the holder may be
        only checking it, which takes seconds; a run that would redo it must not queue without --wait)."""
        if self.force:
            return False
        manifest, _ = _parse_manifest(self.out) if self.out.is_dir() else (None, "")
        return manifest is not None and manifest.get("fingerprint") in (
            self.fingerprint, legacy_fingerprint(self.kind, self.config, self.inputs)
        )

    def _release_lock(self) -> None:
        if self._lock_handle is not None:
            with contextlib.suppress(OSError):
                self._lock_handle.seek(0)
                self._lock_handle.truncate()
                fcntl.flock(self._lock_handle, fcntl.LOCK_UN)
            self._lock_handle.close()
            self._lock_handle = None

    def _clean_stale_temporaries(self) -> None:
        # We hold the lock, so any temporary of this output is a dead run's; a sibling's, only if its lock is free.
        for pattern in (f".{self.out.name}.tmp-*", f".{self.out.name}.old-*"):
            for stale in self.out.parent.glob(pattern):
                log.debug("removing leftover %s", stale)
                shutil.rmtree(stale, ignore_errors=True)
        sweep_stale_temporaries(self.out.parent)


def sweep_stale_temporaries(folder: Path) -> int:
    """Remove the temporary and superseded folders of dead runs in ``folder``; how many were removed.

    A temporary belongs to a run that holds its output's lock; when that lock can
    be taken, no live process (on any host sharing the lock) is writing it.
    """
    removed = 0
    if not folder.is_dir():
        return removed
    for leftover in folder.glob(".*"):
        match = _LEFTOVER.match(leftover.name)
        if match is None:
            continue
        try:
            handle = open(folder / f".{match['out']}.lock", "a+")
        except OSError:
            continue
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue  # a live run owns it
        try:
            log.info("removing %s, left by a run that was killed", leftover)
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
            removed += 1
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
    return removed


def _lock_within(handle: Any, seconds: float, holder: str, out: Path) -> bool:
    """Take the lock on ``handle`` if its holder lets it go within ``seconds``."""
    log.info("%s holds %s, whose output is up to date: waiting up to %.0f s for it", holder, out, seconds)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            continue
    return False


def _config_difference(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if not changed:
        return "inputs changed"
    return "changed: " + ", ".join(changed[:5]) + ("…" if len(changed) > 5 else "")


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_TEMPORARY = re.compile(r"^\.(?P<out>.+)\.tmp-\d+-[0-9a-f]{8}$")
_LEFTOVER = re.compile(r"^\.(?P<out>.+)\.(?:tmp|old)-\d+-[0-9a-f]{8}$")


def _resource_error(exc: OSError, path: Path) -> ResourceError:
    # A stage's hidden temporary folder is gone by the time the message is read: name its output.
    match = _TEMPORARY.match(Path(path).name)
    if match:
        path = Path(path).parent / match["out"]
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ResourceError("disk full", path=path, hint="free space or choose another --workdir/--out")
    if exc.errno == errno.EFBIG:
        return ResourceError("file too large for this file system", path=path, hint="choose another --workdir/--out")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ResourceError("cannot write here", path=path, hint="check permissions or choose another --workdir/--out")
    return ResourceError(f"cannot write: {exc.strerror or exc}", path=path)


@contextlib.contextmanager
def resource_errors(path: Path) -> Iterator[None]:
    """Turn OSErrors from writing under ``path`` into one-line ResourceErrors."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EACCES, errno.EPERM, errno.EROFS):
            raise _resource_error(exc, path) from exc
        raise
