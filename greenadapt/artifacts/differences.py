"""Why an existing stage output is not this run's: the options or inputs that changed, said in one line."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from greenadapt.artifacts.files import sha256_file
from greenadapt.artifacts.manifest import RECORD_ONLY, names_local_file
from greenadapt.options import recorded_settings


def canonical(value: Any) -> Any:
    """``value`` as a manifest reads back: JSON's types, paths and other objects as text."""
    return json.loads(json.dumps(value, default=str))


def run_difference(kind: str, recorded_config: Mapping[str, Any], recorded_inputs: Sequence[Mapping[str, Any]],
                   config: Mapping[str, Any], inputs: Sequence[Mapping[str, Any]]) -> tuple[str, list[str]]:
    """Why what a ``kind`` run made from ``recorded_config`` and ``recorded_inputs`` (a stage output, a checkpoint) is
    not this run's ('' when it is: the same options, inputs whose files at most got a new modification time), and the
    files whose time alone changed."""
    if canonical(recorded_config) != canonical(config):
        settings = recorded_settings()  # the command that runs this stage, to name its options as it spells them
        return config_difference(recorded_config, config, settings.names_in(kind) if settings is not None else None), []
    return input_difference(recorded_inputs, inputs)


def _moved_file(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """An input now read from another path (the same argument now a link, or a file moved): "=" and the words for the
    log when its bytes are the ones recorded, else why it is not the same input, naming both paths."""
    then, now = old["path"], new["path"]
    digest = old.get("sha256")
    if not digest:
        return f"{then} is now read from {now}; its content was not recorded, so it cannot be compared"
    if old.get("size") != new.get("size"):
        return f"{then} is now read from {now}, of {new.get('size')} bytes, not {old.get('size')}"
    try:
        same = sha256_file(Path(now)) == digest
    except OSError as exc:
        return f"{now} cannot be read: {exc.strerror or exc}"
    return f"={then} (now read from {now}, the same bytes)" if same else f"{then} is now read from {now}, and its content differs"


def input_difference(recorded: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]]) -> tuple[str, list[str]]:
    """What changed between the inputs an output was made from and this run's ('' if only the modification time of
    some files, their content the same), and those files."""
    if len(recorded) != len(current):
        return f"{len(current)} inputs instead of {len(recorded)}", []
    retimed = []
    for old, now_recorded in zip(recorded, canonical(list(current)), strict=True):
        old_identity = {k: v for k, v in old.items() if k not in RECORD_ONLY}
        new = {k: v for k, v in now_recorded.items() if k not in RECORD_ONLY}
        if old_identity == new:
            continue
        if names_local_file(new) and names_local_file(old_identity) and old_identity.get("path") != new["path"]:
            moved = _moved_file(old, new)  # a link (or a move) to a file: the same input if its bytes are
            if moved.startswith("="):
                retimed.append(moved[1:])
                continue
            return moved, []
        if not (names_local_file(new) and old_identity.get("path") == new["path"]):
            return "inputs changed", []
        name = new["path"]
        if old_identity.get("size") != new.get("size"):
            return f"{name} changed: {old_identity.get('size')} bytes then, {new.get('size')} now", []
        if {k: v for k, v in old_identity.items() if k != "mtime_ns"} != {k: v for k, v in new.items() if k != "mtime_ns"}:
            return "inputs changed", []
        then, now = _local_time(old_identity.get("mtime_ns")), _local_time(new["mtime_ns"])
        digest = old.get("sha256")
        if not digest:  # an output of an earlier version, which kept no digest
            return f"{name} was modified: {then} then, {now} now; its content was not recorded, so it cannot be compared", []
        try:
            same = sha256_file(Path(name)) == digest
        except OSError as exc:
            return f"{name} cannot be read: {exc.strerror or exc}", []
        if not same:
            return f"{name} was modified: {then} then, {now} now, and its content differs", []
        retimed.append(name)
    return ("" if retimed else "inputs changed"), retimed


def _local_time(mtime_ns: Any) -> str:
    try:
        return datetime.fromtimestamp(int(mtime_ns) / 1e9).strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def config_difference(old: Mapping[str, Any], new: Mapping[str, Any], names: Mapping[str, str] | None = None) -> str:
    """``changed: train.lr 5e-05 -> 0.0001``: the options that differ, down to the nested one, with short values;
    ``names``: how the command that ran the stage spells a key (``min_count`` -> ``min_count (adapt's --min-count-new)``)."""
    changed = _changed_keys(old, new, "", names or {})
    if not changed:
        return "inputs changed"
    return "changed: " + ", ".join(changed[:5]) + ("…" if len(changed) > 5 else "")


def _changed_keys(old: Any, new: Any, prefix: str, names: Mapping[str, str]) -> list[str]:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        found: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            if old.get(key) != new.get(key):
                found += _changed_keys(old.get(key), new.get(key), f"{prefix}{key}.", names)
        return found
    name = names.get(prefix.rstrip("."), prefix.rstrip("."))
    shown = [json.dumps(v, default=str) for v in (old, new)]
    return [f"{name} {shown[0]} -> {shown[1]}" if all(len(s) <= 24 for s in shown) else name]
