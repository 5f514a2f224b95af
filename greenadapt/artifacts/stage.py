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
import json
import logging
import os
import re
import shutil
import stat
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from greenadapt.version import __version__
from greenadapt.artifacts import kinds
from greenadapt.artifacts.differences import run_difference
from greenadapt.artifacts.files import fsync_directory, library_versions, readable_as_the_umask_says, sha256_file, write_json
from greenadapt.artifacts.locks import lock_within, release_output_lock, take_output_lock
from greenadapt.artifacts.manifest import (
    MANIFEST,
    MANIFEST_FORMAT,
    Manifest,
    check_ownership,
    fingerprint,
    legacy_fingerprint,
    parse_manifest,
    recorded_inputs,
    sealed,
    verify_files,
)
from greenadapt.errors import (
    OutputExistsError,
    ResourceError,
    StageError,
)
from greenadapt.machine.cost import CostMeter
from greenadapt.options import OPTIONS_FILE, recorded_settings

log = logging.getLogger(__name__)

# A run whose output is up to date waits this long for another process that holds the output's lock
# (most often one checking the same up-to-date output) instead of failing at once.
UP_TO_DATE_WAIT_SECONDS = 120.0


# --------------------------------------------------------------------------
# Writing stage folders


@dataclass(frozen=True)
class StageOutcome:
    """What a stage function returns: where its output is, its manifest, whether it was skipped."""

    path: Path
    manifest: dict[str, Any]
    skipped: bool
    skip_reason: str = ""

    def __repr__(self) -> str:
        # The manifest is kilobytes: a printed result shows what a person looks for first.
        state = f"skipped: {self.skip_reason}" if self.skipped and self.skip_reason else "skipped" if self.skipped else "done"
        return f"<{self.manifest.get('kind') or 'stage'} {state} at {str(self.path)!r}{self._headline()}>"

    def _headline(self) -> str:
        """``: test f1 80.65 ± 0.39 (mean pooling, 3 seeds)``: a training run's score, as a person looks for it first."""
        stats = self.manifest.get("stats") or {}
        summary = stats.get("summary")
        if not isinstance(summary, dict) or not summary:
            return ""
        try:  # the metric's name is in the run's metrics.json
            metric = json.loads((self.path / "metrics.json").read_text(encoding="utf-8")).get("primary_metric") or "score"
        except (OSError, ValueError, AttributeError, RecursionError):
            metric = "score"
        for split in ("test", "dev"):
            figure = summary.get(split)
            if isinstance(figure, dict) and isinstance(figure.get("mean"), int | float):
                seeds = int(figure.get("n") or 1)
                spread = f" ± {100 * float(figure.get('std') or 0):.2f}" if seeds > 1 else ""
                pool = f"{stats['pool']} pooling, " if stats.get("pool") else ""
                return f": {split} {metric} {100 * figure['mean']:.2f}{spread} ({pool}{seeds} seed{'s' if seeds > 1 else ''})"
        return ""


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
        inputs: Sequence[Mapping[str, Any]],
        *,
        force: bool = False,
        wait: bool = False,
        libraries: tuple[str, ...] = (),
    ) -> None:
        self.kind = kind
        self.out = self._destination(Path(out_dir).absolute())
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

    @property
    def meter(self) -> CostMeter:
        """What the stage has cost so far (the manifest's cost block at commit)."""
        return self._meter

    def _destination(self, out: Path) -> Path:
        """The folder written: a user's link at ``out`` is written through, never replaced (:func:`_through_links`)."""
        return _through_links(out)

    # -- lifecycle ----------------------------------------------------------
    def __enter__(self) -> StageRun:
        self._refuse_overlapping_inputs()
        try:
            self.out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _resource_error(exc, self.out.parent) from exc
        self._acquire_lock()
        try:
            self._clean_stale_temporaries()
            if self._existing_is_current():
                return self
            self._meter.probe.track()
            self.tmp = beside(self.out, "tmp")
            self.tmp.mkdir()
            # Written first: a later run removes a dead run's temporary only on this proof that greenadapt made it.
            (self.tmp / TEMPORARY_MARKER).write_text(f"greenadapt {self.kind} output {self.out}\n", encoding="utf-8")
        except BaseException:
            if self.tmp != self.out:  # stopped before its marker: nothing of it is left behind
                with contextlib.suppress(OSError):
                    remove_temporary(self.tmp)
            self._release_lock()
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self._meter.probe.close()
            if self.tmp != self.out and self.tmp.exists():
                remove_temporary(self.tmp)
        finally:
            self._release_lock()
        # A full disk while the stage wrote its own files (vectors, weights): one clear line, not
        # an internal error. Only errors that writing alone raises; EACCES may come from an input.
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG):
            raise _resource_error(exc, self.out) from exc

    # -- decisions ----------------------------------------------------------
    def _refuse_overlapping_inputs(self) -> None:
        """An output that is, holds or lies inside what the stage reads is refused whatever the flags: replacing it
        (``--force``, an option change) would destroy the input. Every command checks this before its work
        (artifacts/destination.py); here it holds for every stage, whichever command or API call reached it."""
        from greenadapt.artifacts.destination import check_destination_apart, protected

        reads = [read for item in self.inputs if isinstance(item, Mapping) and isinstance(item.get("path"), str)
                 and "://" not in item["path"]
                 for read in protected(f"this command's {item.get('role') or item.get('kind') or 'input'}", item["path"])]
        check_destination_apart(self.out, reads)

    def _existing_is_current(self) -> bool:
        # Under the lock: the folder may have changed since the command's check_destination.
        manifest = check_ownership(self.out, kind=self.kind, force=self.force)
        if manifest is None or manifest.get("kind") != self.kind or self.force:
            return False
        if not self._same_fingerprint(manifest):
            changed, retimed = run_difference(self.kind, Manifest.of(manifest, self.out).config, manifest.get("inputs") or [],
                                              self.config, self.inputs)
            if changed:
                raise OutputExistsError(
                    f"{self.kind} output exists but was made with other inputs or options ({changed})",
                    path=self.out,
                    hint="pass --force to redo it, or choose another --out",
                )
            log.info("%s: %s changed only in modification time (the same SHA-256 as when the output was made)",
                     self.kind, ", ".join(retimed))
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
    def commit(self, *, stats: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None,
               cost: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Checksum the temporary folder, write the manifest, swap it into place."""
        if self.skipped:
            raise RuntimeError("commit() on a skipped stage")
        settings = recorded_settings()
        if settings is not None and self.kind not in kinds.CACHES:  # the command's options, as --config replays them
            write_json(self.tmp / OPTIONS_FILE, settings.document())
        files: dict[str, dict[str, Any]] = {}
        readable_as_the_umask_says(self.tmp)
        for path in sorted(self.tmp.rglob("*")):
            if path.is_file() and path.name != MANIFEST and path.relative_to(self.tmp).as_posix() != TEMPORARY_MARKER:
                rel = path.relative_to(self.tmp).as_posix()
                files[rel] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
        manifest: dict[str, Any] = {
            "kind": self.kind,
            "format": MANIFEST_FORMAT,
            "greenadapt_version": __version__,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "fingerprint": self.fingerprint,
            "config": self.config,
            "inputs": recorded_inputs(self.inputs, self.out),
            "libraries": library_versions(*self.libraries),
            "stats": dict(stats or {}),
            "cost": {**self._meter.snapshot(), **(cost or {})},
            "files": files,
        }
        if settings is not None and self.kind not in kinds.CACHES:
            manifest["options"] = settings.document()
        if extra:
            manifest.update(extra)
        manifest = sealed(manifest)  # the checksum covers the fields as a reader will parse them back
        try:
            write_json(self.tmp / MANIFEST, manifest)  # from here on the manifest is the proof
            (self.tmp / TEMPORARY_MARKER).unlink(missing_ok=True)
            fsync_directory(self.tmp)
            self._swap_into_place()
        except OSError as exc:
            raise _resource_error(exc, self.out) from exc
        self.manifest = manifest
        return manifest

    def _swap_into_place(self) -> None:
        swap_into_place(self.tmp, self.out)
        self.tmp = self.out

    # -- locking ------------------------------------------------------------
    @property
    def lock_path(self) -> Path:
        return self.out.parent / f".{self.out.name}.lock"

    def _acquire_lock(self) -> None:
        self._lock_handle = take_output_lock(self.out, self.kind, wait=self.wait, patience=self._patience)

    def _patience(self, handle: Any, holder: str) -> bool:
        """A run whose output is up to date may wait a little for a holder that is only checking it."""
        return self._looks_up_to_date() and lock_within(handle, UP_TO_DATE_WAIT_SECONDS, holder, self.out)

    def _looks_up_to_date(self) -> bool:
        """Whether the output there was made with this run's inputs and options (not verified: the holder may be
        only checking it, which takes seconds; a run that would redo it must not queue without --wait)."""
        if self.force:
            return False
        manifest, _ = parse_manifest(self.out) if self.out.is_dir() else (None, "")
        return manifest is not None and self._same_fingerprint(manifest)

    def _same_fingerprint(self, manifest: Mapping[str, Any]) -> bool:
        return manifest.get("fingerprint") in (self.fingerprint, fingerprint(self.kind, self.config, self.inputs, spelled=True),
                                               legacy_fingerprint(self.kind, self.config, self.inputs))

    def _release_lock(self) -> None:
        release_output_lock(self._lock_handle)
        self._lock_handle = None

    def _clean_stale_temporaries(self) -> None:
        # We hold this output's lock, so any temporary of it is a dead run's; only this output's, and only greenadapt's.
        for pattern in (f".{self.out.name}.tmp-*", f".{self.out.name}.old-*"):
            for stale in self.out.parent.glob(pattern):
                if _LEFTOVER.match(stale.name) and written_by_greenadapt(stale):
                    log.info("removing %s, left by a run that was killed", stale)
                    shutil.rmtree(stale, ignore_errors=True)


def beside(out: Path, role: str) -> Path:
    """A hidden folder name next to ``out`` for its temporary (``tmp``) or replaced (``old``) contents:
    ``.<name>.<role>-<pid>-<hex>``, the names a later run of ``out`` may sweep away (under its lock)."""
    return out.parent / f".{out.name}.{role}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def swap_into_place(tmp: Path, out: Path) -> None:
    """``tmp`` (a finished stage) becomes ``out`` in one rename; what ``out`` was is moved aside first and removed after."""
    old = None
    if out.exists():
        old = beside(out, "old")
        os.rename(out, old)
    os.rename(tmp, out)
    fsync_directory(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def written_by_greenadapt(folder: Path) -> bool:
    """Whether ``folder`` (a real folder, not a link) carries greenadapt's proof: a temporary's marker or a manifest."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    return (folder / TEMPORARY_MARKER).is_file() or parse_manifest(folder)[0] is not None


def empty_temporary(folder: Path) -> bool:
    """An empty folder of a temporary's name: what a run stopped between making its temporary and writing the marker
    (or between removing the marker and the folder) leaves. It holds nothing of anyone's."""
    return bool(_LEFTOVER.match(folder.name)) and folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir())


def remove_temporary(tmp: Path) -> None:
    """Remove a stage's temporary folder, its marker last: a second stop signal in the middle (Ctrl-C to a process
    group, then the workers' SIGTERM) leaves a folder that still proves itself greenadapt's, which the next run
    sweeps, never one that a compare folder's check would take for the user's."""
    marker = tmp / TEMPORARY_MARKER
    try:
        children = list(tmp.iterdir())
    except OSError:
        children = []
    for child in children:
        if child == marker:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
    marker.unlink(missing_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)


def sweep_stale_temporaries(folder: Path) -> int:
    """Remove the temporary and superseded folders of dead runs in ``folder`` (a cache greenadapt owns); how many.

    Only greenadapt's (:func:`written_by_greenadapt`), and only those whose
    output's lock exists and can be taken: then no live process (on any host
    sharing the lock) is writing them. No lock file is created.
    """
    removed = 0
    if not folder.is_dir():
        return removed
    for leftover in folder.glob(".*"):
        match = _LEFTOVER.match(leftover.name)
        if match is None or not written_by_greenadapt(leftover):
            continue
        try:
            descriptor = os.open(folder / f".{match['out']}.lock", os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue  # no lock (or a link at its name): not a temporary of a greenadapt run
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            continue  # a live run owns it
        try:
            log.info("removing %s, left by a run that was killed", leftover)
            shutil.rmtree(leftover, ignore_errors=True)
            removed += 1
        finally:
            fcntl.flock(descriptor, fcntl.LOCK_UN)
            os.close(descriptor)
    return removed


def _through_links(out: Path) -> Path:
    """The folder an output path names: a symbolic link (the user's) is written through, never replaced."""
    if not out.is_symlink():
        return out
    target = out.resolve()
    if not target.exists():  # a link to nothing: writing would make a folder wherever it points, unasked
        raise OutputExistsError(f"is a link to {os.readlink(out)}, which does not exist", path=out,
                                hint="make the folder it points to first, or choose another --out")
    log.info("%s is a link: writing into %s, the folder it points to", out, target)
    return target


TEMPORARY_MARKER = ".greenadapt-temporary"  # the first file of every stage's temporary folder
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
