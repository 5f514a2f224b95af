"""Stage folders on disk: manifests (read, verified, checksummed), input identities, fingerprints, atomic writes.

A manifest is written last into a stage folder and lists every file with its
size and SHA-256, the stage's kind, options (``config``), input identities
and a checksum of its own fields, so a hand edit is noticed. :func:`load_stage`
is how a stage opens an upstream folder; :class:`greenadapt.artifacts.stage.StageRun`
writes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenadapt.artifacts.files import sha256_file
from greenadapt.errors import OutputExistsError, ResourceError, StageError
from greenadapt.options import OPTIONS_FILE

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
MANIFEST_CHECKSUM = "manifest_sha256"
EDITED = "edited by hand (its checksum no longer matches its fields)"
_SHOWN = 3


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def fingerprint(kind: str, config: Mapping[str, Any], inputs: Sequence[Mapping[str, Any]], *, spelled: bool = False) -> str:
    """What names a stage's output: its kind, options and inputs.

    Upstream stages are named by their content (fingerprint and file checksums), not
    by where they lie, so a workspace moved or copied (``mv``, ``cp -a``) stays up to
    date; corpus files, data files and models keep their paths. A model is named by its
    identity (its resolved path and files), not by how the command spelled it (``runs/../m``,
    ``m``, ``/abs/m``): a replay of options.json, which keeps paths absolute, is the same
    stage. ``spelled``: the fingerprint written before that (outputs made then stay up to date).
    """
    if not spelled:
        config, inputs = _without_model_spelling(config, inputs)
    payload = canonical_json({"kind": kind, "config": _without_paths(config), "inputs": _without_paths(inputs)})
    return hashlib.sha256(payload.encode()).hexdigest()


def _without_model_spelling(config: Mapping[str, Any], inputs: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
    """The config and inputs without the model as it was typed, where an input identifies the model by its path."""
    identified = [isinstance(item, Mapping) and "model" in item and "path" in item for item in inputs]
    if not any(identified):
        return dict(config), list(inputs)
    return ({k: v for k, v in config.items() if k != "model"},
            [{k: v for k, v in item.items() if k != "model"} if named else item for item, named in zip(inputs, identified, strict=True)])


def legacy_fingerprint(kind: str, config: Mapping[str, Any], inputs: Sequence[Mapping[str, Any]]) -> str:
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


# Recorded beside an input's identity, not part of it (fingerprints are computed without them).
RECORD_ONLY = frozenset({"relpath", "sha256"})


def names_local_file(entry: Mapping[str, Any]) -> bool:
    """Whether an input identity names a local file by path, size and modification time."""
    return "path" in entry and "mtime_ns" in entry and "files" not in entry and "content" not in entry


def recorded_inputs(inputs: Sequence[Mapping[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """``inputs`` as a manifest in ``folder`` records them: each local path also relative to the folder, and each
    local file named by size and time also by its content's SHA-256.

    The fingerprint names such a file cheaply, so a copy, a checkout or a
    refreshed data folder makes every stage over it look stale; the digest lets
    a later run tell a file whose time alone changed from one that was edited.
    It is kept only while the file still has the size and time the run started
    from (a file rewritten during the run gets none). One read per file per
    process (:func:`sha256_file` caches it).
    """
    recorded = []
    for item in inputs:
        entry = dict(item)
        if isinstance(entry.get("path"), str) and not isinstance(entry.get("relpath"), str):
            entry["relpath"] = os.path.relpath(entry["path"], folder)
        path = Path(str(entry.get("path")))
        if names_local_file(entry) and path.is_file():
            with contextlib.suppress(OSError):
                started_from = (entry.get("size"), entry["mtime_ns"])
                before = _size_and_time(path)
                digest = sha256_file(path)
                if before == started_from == _size_and_time(path):
                    entry["sha256"] = digest
        recorded.append(entry)
    return recorded


def _size_and_time(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


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


def multitask_tasks(config: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A multitask run's tasks, from its manifest's config, by name: each one's task settings (task, metric, labels)."""
    return {task["name"]: task.get("settings") or {} for task in config.get("tasks") or []
            if isinstance(task, dict) and isinstance(task.get("name"), str)}


# --------------------------------------------------------------------------
# The manifest as a typed, checked record


@dataclass(frozen=True, eq=False)
class Manifest(Mapping[str, Any]):
    """A stage folder's manifest: its sections typed and checked once, when it is read (:meth:`of`).

    It stays a read-only mapping over the document as written, so ``manifest["stats"]``
    and ``--json`` output are what they were; code reads the typed sections
    (``kind``, ``config``, ``stats``, ``cost``, ``inputs``, ``files``) and nested
    ones through :meth:`section`, never through ``.get(name, {})`` chains that would
    turn a damaged field into a silent default.
    """

    document: Mapping[str, Any]
    kind: str
    config: Mapping[str, Any]
    stats: Mapping[str, Any]
    cost: Mapping[str, Any]
    inputs: tuple[Mapping[str, Any], ...]
    files: Mapping[str, Any]
    where: Path | None = None  # the manifest file, for error messages

    @classmethod
    def of(cls, document: Mapping[str, Any], folder: Path | None = None) -> Manifest:
        """``document`` checked: each section present is of its type (a StageError names the file and field)."""
        if isinstance(document, Manifest):
            return document
        where = folder / MANIFEST if folder is not None else None
        kind = document.get("kind", "")
        if not isinstance(kind, str):
            raise _damaged(where, "kind", kind, "a string")
        sections = {name: _checked(document, name, dict, where) for name in ("config", "stats", "cost", "files")}
        inputs = _checked(document, "inputs", list, where)
        for index, entry in enumerate(inputs):
            if not isinstance(entry, dict):
                raise _damaged(where, f"inputs[{index}]", entry, "an object")
        return cls(document, kind, inputs=tuple(inputs), where=where, **sections)

    def section(self, *names: str) -> Mapping[str, Any]:
        """A nested section, e.g. ``section("config", "model")``: empty when absent, an error when not an object."""
        value: Any = self.document
        for depth, name in enumerate(names):
            value = value.get(name, {})
            if not isinstance(value, dict):
                raise _damaged(self.where, ".".join(names[: depth + 1]), value, "an object")
        return value

    def __getitem__(self, key: str) -> Any:
        return self.document[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.document)

    def __len__(self) -> int:
        return len(self.document)


def _checked(document: Mapping[str, Any], name: str, kind: type, where: Path | None) -> Any:
    value = document.get(name, kind())
    if not isinstance(value, kind):
        raise _damaged(where, name, value, "an object" if kind is dict else "a list")
    return value


def _damaged(where: Path | None, field: str, value: Any, expected: str) -> StageError:
    found = {dict: "an object", list: "a list", str: "a string", type(None): "null"}.get(type(value), type(value).__name__)
    return StageError(
        f"damaged manifest: its field {field!r} is {found}, not {expected}",
        path=where,
        hint="rerun the stage that wrote this folder with --force",
    )


# --------------------------------------------------------------------------
# Reading and verifying existing stage folders


def read_manifest(folder: Path) -> dict[str, Any] | None:
    manifest, _ = read_manifest_checked(folder)
    return manifest


def manifest_checksum(manifest: Mapping[str, Any]) -> str:
    """The checksum a manifest carries over its own fields, so a hand edit is told from changed inputs."""
    body = {k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM}
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


def sealed(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``manifest`` as it will be written and parsed back, with its checksum over exactly that: through JSON, and with
    every credential seen in this process taken out (what ``write_json`` does to the file's text). A checksum taken
    before that scrub did not match the written file wherever a secret, such as a URL's user name, was also part of
    a path: the next run called the stage edited by hand."""
    from greenadapt.redaction import scrub_secrets

    body = {k: v for k, v in manifest.items() if k != MANIFEST_CHECKSUM}
    written: dict[str, Any] = json.loads(scrub_secrets(json.dumps(body, default=str), record=True))
    written[MANIFEST_CHECKSUM] = manifest_checksum(written)
    return written


def read_manifest_checked(folder: Path) -> tuple[dict[str, Any] | None, str]:
    """A manifest greenadapt wrote, unedited; else None and why not ("" when there is none at all)."""
    manifest, damage = parse_manifest(folder)
    if manifest is not None and _edited(manifest):
        return None, EDITED
    return manifest, damage


def _edited(manifest: Mapping[str, Any]) -> bool:
    recorded = manifest.get(MANIFEST_CHECKSUM)
    # Manifests written before the checksum existed carry none; they are trusted as before.
    return recorded is not None and recorded != manifest_checksum(manifest)


def parse_manifest(folder: Path) -> tuple[dict[str, Any] | None, str]:
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
    except RecursionError:
        return None, "JSON nested too deeply: damaged"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    if not isinstance(manifest, dict):
        return None, f"a JSON {type(manifest).__name__}, not an object: damaged"
    if not isinstance(manifest.get("kind"), str):
        return None, "not one greenadapt writes (it names no stage kind)"
    return manifest, ""


# Files greenadapt writes (the manifest lists them, so the folder stays its own) that a user may edit: options.json is
# the file ``--config`` replays, and README presents it so; what ran is the manifest's own ``options`` section.
EDITABLE_FILES = (OPTIONS_FILE,)


def verify_files(folder: Path, manifest: Mapping[str, Any], *, checksums: bool = True) -> str | None:
    """Return None if every file the manifest vouches for matches, else why not."""
    files = manifest.get("files")
    if not isinstance(files, dict):
        return "the manifest lists no files"
    for rel, meta in files.items():
        if rel in EDITABLE_FILES:
            continue
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


def load_stage(folder: str | os.PathLike[str], kind: str, *, checksums: bool = True) -> Manifest:
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
    return Manifest.of(manifest, path)


def manifest_identity(folder: Path, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """How a downstream stage names this upstream stage in its own fingerprint.

    The content digest (over the upstream file checksums) matters as much as
    the fingerprint: a forced redo with multi-threaded training can produce
    different vectors from identical options, and downstream must notice.
    """
    content = hashlib.sha256(canonical_json(Manifest.of(manifest, folder).files).encode()).hexdigest()
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
    does not list; a greenadapt folder of another kind is refused, ``force`` or not (``force`` redoes the same kind).
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
    manifest, damage = parse_manifest(out)
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
    if manifest.get("kind") != kind:  # --force redoes this command's own output, never another command's (a run, a model)
        raise OutputExistsError(
            f"output folder exists and is a {manifest.get('kind')!r} folder, which this command ({kind}) did not write",
            path=name,
            hint="choose another --out; --force replaces only a folder the same command wrote (remove this one yourself if it is to go)",
        )
    return manifest


def foreign_files(folder: Path, manifest: Mapping[str, Any]) -> list[str]:
    """Files (and links) under ``folder`` that its manifest does not list, sorted."""
    from greenadapt.artifacts.files import CACHE_FOLDER, is_greenadapt_cache

    listed = set(Manifest.of(manifest, folder).files) | {MANIFEST}
    cache = folder / CACHE_FOLDER if is_greenadapt_cache(folder / CACHE_FOLDER) else None  # what greenadapt made from the weights
    found = []
    for path in folder.rglob("*"):
        if cache is not None and (path == cache or cache in path.parents):
            continue
        if path.is_symlink() or path.is_file():
            rel = path.relative_to(folder).as_posix()
            if rel not in listed:
                found.append(rel)
        elif not path.is_dir():
            found.append(path.relative_to(folder).as_posix())
    return sorted(found)
