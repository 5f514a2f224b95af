"""A stage folder made on another machine, published here as if it had been made here.

``compare --ray ... --ray-storage local`` fine-tunes on nodes that do not see ``--out``: each node works on copies of
the inputs under paths of its own and sends the finished run folder back. Its manifest names the node's paths, so as it
came the folder would be "made with other inputs" to every later run here. The copies keep each file's size and
modification time, so only the paths differ: they are put back (the node's path -> this machine's), then the
fingerprint and the manifest's checksum are made again, exactly as this machine's own run of the stage makes them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from greenadapt.artifacts.files import write_json
from greenadapt.artifacts.manifest import MANIFEST, RECORD_ONLY, fingerprint, sealed


def moved(value: Any, moves: Mapping[str, str]) -> Any:
    """``value`` with every string that is one of ``moves``' paths, or lies below one, naming the new path instead."""
    if isinstance(value, str):
        for old, new in moves.items():
            if value == old:
                return new
            if value.startswith(old.rstrip("/") + "/"):
                return new.rstrip("/") + value[len(old.rstrip("/")):]
        return value
    if isinstance(value, Mapping):
        return {key: moved(item, moves) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [moved(item, moves) for item in value]
    return value


def relocate_stage(folder: Path, final: Path, moves: Mapping[str, str], options_file: str = "options.json") -> None:
    """Rewrite ``folder``'s manifest (and its options file) for the stage's place ``final`` on this machine.

    ``folder`` is the stage as it came (not yet under ``final``); ``moves`` maps each path the other machine used to the
    path of the same file or folder here.
    """
    manifest = moved(json.loads((folder / MANIFEST).read_text(encoding="utf-8")), moves)
    for entry in manifest.get("inputs") or []:
        if isinstance(entry, dict) and isinstance(entry.get("path"), str) and "relpath" in entry:
            entry["relpath"] = os.path.relpath(entry["path"], final)
    identities = [{k: v for k, v in entry.items() if k not in RECORD_ONLY} if isinstance(entry, dict) else entry
                  for entry in manifest.get("inputs") or []]
    manifest["fingerprint"] = fingerprint(str(manifest.get("kind")), manifest.get("config") or {}, identities)
    write_json(folder / MANIFEST, sealed(manifest))
    options = folder / options_file
    if options.is_file():
        write_json(options, moved(json.loads(options.read_text(encoding="utf-8")), moves))
