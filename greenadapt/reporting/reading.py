"""Reading what a run left: its stage folders and their manifests, and JSON files refused in one line when damaged."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from greenadapt.errors import StageError

MANIFEST = "manifest.json"
SEED_DIR = re.compile(r"^seed[-_]?\d+$")


def find_stage_folders(run: Path) -> list[Path]:
    """Every stage folder (one holding ``manifest.json``) at or under ``run``, sorted."""
    if not run.exists():
        raise StageError("no such folder", path=run, hint="pass a run folder, e.g. <workdir>/<corpus>/<model>")
    if not run.is_dir():
        raise StageError("not a folder", path=run, hint="pass a run folder, e.g. <workdir>/<corpus>/<model>, not a file")
    found: list[Path] = []
    for root, dirs, files in os.walk(run):
        if MANIFEST in files:
            found.append(Path(root))
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.endswith(".checkpoint"))
    if not found:
        raise StageError(
            "not a greenadapt run folder: no stage output (manifest.json) at or under it",
            path=run,
            hint="pass a workspace run folder (<workdir>/<corpus>/<model>), a stage folder or a finetune output folder",
        )
    return sorted(found)


def read_json_file(path: Path, what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise StageError(f"garbled {what}: not UTF-8 text", path=path, hint="rerun the stage with --force") from None
    except OSError as exc:
        raise StageError(f"cannot read {what}: {exc.strerror or exc}", path=path) from None
    try:
        return json.loads(text)
    except RecursionError:
        raise StageError(f"garbled {what}: JSON nested too deeply", path=path, hint="rerun the stage with --force") from None
    except json.JSONDecodeError as exc:
        raise StageError(
            f"garbled {what}: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno, hint="rerun the stage with --force"
        ) from None


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    manifest = read_json_file(path, "manifest")
    if not isinstance(manifest, dict) or not isinstance(manifest.get("kind"), str):
        raise StageError("garbled manifest: not a greenadapt stage manifest (no 'kind')", path=path, hint="rerun the stage with --force")
    return manifest


def optional_json(path: Path, what: str) -> Any:
    """A stage's JSON file, or None when it has none; refused when it no longer matches the checksum its manifest holds."""
    if not path.is_file():
        return None
    _check_against_manifest(path, what)
    return read_json_file(path, what)


def _check_against_manifest(path: Path, what: str) -> None:
    """A file a manifest vouches for (its own folder's, or a seed folder's run) must still be what the run wrote:
    a report of edited figures would pass them off as measured."""
    from greenadapt.artifacts.files import sha256_file

    for owner in (path.parent, path.parent.parent):
        if not (owner / MANIFEST).is_file():
            continue
        files = (read_json_file(owner / MANIFEST, "manifest") or {}).get("files")
        meta = files.get(path.relative_to(owner).as_posix()) if isinstance(files, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("sha256"), str):
            if path.stat().st_size != meta.get("size") or sha256_file(path) != meta["sha256"]:
                raise StageError(f"{what} no longer matches the checksum in {owner / MANIFEST}: edited or damaged after the run",
                                 path=path, hint="restore the file, or rerun the stage with --force")
            return
