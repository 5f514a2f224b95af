"""What a compare folder may hold, and the model a greenadapt output was made from: checked before any training."""

from __future__ import annotations

import json
import re
from pathlib import Path

from greenadapt.artifacts import kinds
from greenadapt.options import OPTIONS_FILE

RESULT_FILE = kinds.COMPARE_RESULT
# A --model NAME names a folder of runs: a plain name
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


# What compare, finetune and its stages write in a model's folder for a seed's run (``seed-1``, ``seed-1-member-2``):
# the run, its log, checkpoints and lock, an ensemble's scores, and the temporaries of a run cut short (a stage's
# ``.seed-1.tmp-PID-HEX`` or ``.old-``, an atomic write's ``.<file>.greenadapt-HEX.tmp``).
_RUN = r"seed-[0-9]+(-member-[0-9]+)?"
_RUN_ENTRY = re.compile(rf"^\.?{_RUN}(\.log|\.checkpoint|\.lock|\.ensemble\.json|\.(tmp|old)-[0-9]+-[0-9a-f]{{8}}"
                        rf"|(\.log|\.ensemble\.json)\.greenadapt-[0-9a-f]{{8}}\.tmp)?$")
_RUN_FOLDER = re.compile(rf"^{_RUN}$")
_FOLDER_ENTRY = re.compile(r"\.checkpoint$|\.(tmp|old)-[0-9]+-[0-9a-f]{8}$")  # checkpoints, a stage's temporaries
TRACKER_FOLDER = "tensorboard"  # compare --report-to tensorboard: <model>/tensorboard/seed-<s>/seed-<s>/events.out.tfevents.*


def check_compare_folder(out: Path) -> None:
    """Refuse, before any training, a compare folder greenadapt did not write: compare writes ``compare.json`` and a
    folder of runs per model there, so only a new or empty folder, or one compare made, may take them."""
    from greenadapt.artifacts.stage import empty_temporary, written_by_greenadapt
    from greenadapt.errors import OutputExistsError

    out = Path(out)
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir():
        raise OutputExistsError("exists and is not a folder", path=out, hint="choose a new or empty folder for --out")

    def refuse(what: Path, why: str) -> None:
        raise OutputExistsError(f"refusing to write a comparison here: {why}", path=what,
                                hint="choose a new or empty folder for --out; compare never replaces files it did not write")

    from greenadapt.artifacts.files import refuse_planted

    for entry in sorted(out.iterdir()):
        if entry.is_symlink():  # compare writes every name it uses itself: a link in its folder is never followed
            refuse_planted(entry, f"{entry.name} in the compare folder")
        if entry.name == RESULT_FILE:
            from greenadapt.artifacts.files import read_own_text

            try:
                ours = json.loads(read_own_text(entry, limit=64 << 20)).get("kind") == "compare"
            except (OSError, ValueError, AttributeError, RecursionError):
                ours = False
            if not ours or entry.is_symlink():
                refuse(entry, f"this {RESULT_FILE} was not written by greenadapt compare")
        elif entry.name == OPTIONS_FILE and _written_by_compare(entry):
            continue  # the options compare ran with (--config replays them)
        elif entry.name == "adapted" and entry.is_dir() and not entry.is_symlink():
            continue  # adapt's folders (--adapt-methods); adapt checks what it replaces there itself
        elif entry.is_dir() and not entry.is_symlink() and MODEL_NAME.match(entry.name):
            for run in entry.iterdir():
                if _RUN_ENTRY.match(run.name):  # a seed's run, log, lock, checkpoints: written only where nothing was planted
                    refuse_planted(run, f"{entry.name}/{run.name} in the compare folder",
                                   kind="folder" if _RUN_FOLDER.match(run.name) or _FOLDER_ENTRY.search(run.name) else "file")
                if run.name == TRACKER_FOLDER and _tensorboard_events_only(run):
                    continue
                is_run_folder = run.is_dir() and not run.is_symlink() and not run.name.endswith(".checkpoint")
                if not _RUN_ENTRY.match(run.name) or (is_run_folder and not written_by_greenadapt(run) and not empty_temporary(run)):
                    refuse(run, "it holds files greenadapt did not write")
        elif not (entry.name.startswith(".") and entry.name.endswith((".tmp", ".lock"))):
            refuse(entry, "it holds files greenadapt did not write")


def _tensorboard_events_only(folder: Path) -> bool:
    """Whether ``folder`` holds only what ``--report-to tensorboard`` writes there: a folder per run and seed of event files."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    for run in folder.iterdir():
        if run.is_symlink() or not run.is_dir() or not re.fullmatch(_RUN, run.name):
            return False
        for seed in run.iterdir():
            if seed.is_symlink() or not seed.is_dir() or not re.fullmatch(r"seed-[0-9]+", seed.name):
                return False
            if any(event.is_symlink() or not event.is_file() or not event.name.startswith("events.out.tfevents.")
                   for event in seed.iterdir()):
                return False
    return True


def recorded_base_model(spec: str) -> str | None:
    """The model a greenadapt output was made from: the folder its manifest records (when it is still there), else
    the Hub id its config names; None for any other model."""
    from greenadapt.artifacts.manifest import read_manifest
    from greenadapt.artifacts.model_card import CONFIG_KEY

    folder = Path(spec)
    if not folder.is_dir():
        return None
    recorded = ((read_manifest(folder) or {}).get("config") or {}).get("model")
    if isinstance(recorded, dict) and recorded.get("path") and (Path(str(recorded["path"])) / "config.json").is_file():
        return str(recorded["path"])
    try:
        block = json.loads((folder / "config.json").read_text(encoding="utf-8")).get(CONFIG_KEY)
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    hub = block.get("base_model_hub_id") if isinstance(block, dict) else None
    return str(hub) if hub else None


def _written_by_compare(entry: Path) -> bool:
    try:
        return not entry.is_symlink() and json.loads(entry.read_text(encoding="utf-8")).get("command") == "compare"
    except (OSError, ValueError, AttributeError, RecursionError):
        return False
