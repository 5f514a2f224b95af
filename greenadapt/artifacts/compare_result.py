"""compare.json read back: one typed reader, which `info` and the report both use.

compare writes compare.json, but a person may edit it, a disk may damage it and another program may put something
there. Every field the readers use is checked for its type and range, text has its control characters escaped
(a recommendation cannot move the terminal's cursor), and anything else is one line naming the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from greenadapt.errors import StageError, escape_controls

Check = Callable[[Any, str], Any]
LARGEST = 1e15  # no figure compare writes comes near it: scores are fractions, costs seconds and kWh


class FieldError(ValueError):
    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"field {where} {what}")


def text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise FieldError(where, f"is {_shown(value)}, not text")
    return escape_controls(value)


def number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldError(where, f"is {_shown(value)}, not a number")
    if isinstance(value, int) and abs(value) > LARGEST or not math.isfinite(float(value)) or abs(float(value)) > LARGEST:
        raise FieldError(where, f"is {_shown(value)}, out of range")
    return float(value)


def count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= LARGEST:
        raise FieldError(where, f"is {_shown(value)}, not a count")
    return value


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise FieldError(where, f"is {_shown(value)}, not true or false")
    return value


def optional(check: Check) -> Check:
    return lambda value, where: None if value is None else check(value, where)


def listing(check: Check) -> Check:
    def read(value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise FieldError(where, f"is {_shown(value)}, not a list")
        return [check(item, f"{where}[{i}]") for i, item in enumerate(value)]
    return read


def mapping(check: Check) -> Check:
    """A JSON object of any keys (text), each value checked by ``check``."""
    def read(value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise FieldError(where, f"is {_shown(value)}, not an object")
        return {text(key, where): check(item, f"{where}.{key}") for key, item in value.items()}
    return read


def record(fields: dict[str, Check], *, required: tuple[str, ...] = ()) -> Check:
    """A JSON object whose named fields are checked (missing ones are None unless required); other keys kept as they
    are, unread by greenadapt's readers."""
    def read(value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise FieldError(where, f"is {_shown(value)}, not an object")
        missing = [name for name in required if name not in value]
        if missing:
            raise FieldError(f"{where}.{missing[0]}", "is missing")
        return {**value, **{name: check(value.get(name), f"{where}.{name}") for name, check in fields.items()}}
    return read


def _shown(value: Any) -> str:
    shown = json.dumps(value)[:40] if isinstance(value, str | int | float | bool | type(None)) else type(value).__name__
    return escape_controls(shown) + ("…" if len(shown) == 40 else "")


INTERVAL = optional(listing(number))
SUMMARY = mapping(optional(record({"mean": number, "sd": optional(number), "n": optional(count)}, required=("mean",))))
COST = optional(mapping(optional(number)))
STRATUM = record({"stratum": text, "mentions": count, "f1": mapping(number), "difference": number,
                  "bootstrap_interval95": INTERVAL}, required=("stratum", "f1", "difference"))
PAIR = record({"variant": text, "baseline": text, "mean": number, "differences": listing(number),
               "seed_interval95": INTERVAL, "bootstrap_interval95": INTERVAL, "significant95": optional(flag),
               "verdict": text, "notes": optional(listing(text)), "strata_table": optional(listing(text)),
               "strata": optional(listing(STRATUM)), "not_a_verdict": optional(flag)},
              required=("variant", "baseline", "mean", "differences", "verdict"))
VARIANT = record({"name": text, "model": optional(text), "headline_pool": optional(text),
                  "scores": mapping(mapping(mapping(number))), "summary": optional(SUMMARY),
                  "finetune_cost": COST, "adaptation_cost": COST}, required=("name", "scores"))
STOPPED = record({"why": text, "not_started": optional(count), "finished_runs": optional(listing(text)), "fix": optional(text)},
                 required=("why",))
PLANNED_RUN = record({"name": text, "seed": count, "folder": text}, required=("name", "seed", "folder"))
IN_PROGRESS = record({"runs": listing(PLANNED_RUN), "started": optional(text), "how_to_finish": optional(text)}, required=("runs",))
RESULT = record({"kind": text, "metric": optional(text), "in_progress": optional(IN_PROGRESS),
                 "options": optional(record({"task": optional(text), "comparator": optional(text)})),
                 "variants": listing(VARIANT), "pairs": listing(PAIR), "recommendation": optional(text),
                 "stopped": optional(STOPPED), "seconds": optional(number),
                 "share_of_comparator_gain": optional(mapping(optional(number)))},
                required=("kind", "variants", "pairs"))


def read_compare_result(path: Path) -> dict[str, Any]:
    """compare.json at ``path``, checked: every field `info` and the report read has its type and range, its text
    escaped; else a StageError in one line naming the file and the field."""
    from greenadapt.artifacts.files import read_own_text

    hint = "rerun the compare command that wrote it: it rewrites compare.json"
    try:
        document = json.loads(read_own_text(path, limit=64 << 20))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise StageError(f"unreadable {path.name}: {escape_controls(' '.join(str(error).split()))[:200]}", path=path, hint=hint) from None
    if not isinstance(document, dict) or document.get("kind") != "compare":
        raise StageError(f"this {path.name} was not written by greenadapt compare", path=path)
    try:
        checked: dict[str, Any] = RESULT(document, "compare.json")
    except FieldError as error:
        raise StageError(f"damaged {path.name}: {error}", path=path, hint=hint) from None
    checked["options"] = checked.get("options") or {}
    return checked


def how_to_finish(force: bool) -> str:
    """How to finish a compare cut short: the same command, less a --force that would redo the runs it finished."""
    command = "the same command without --force" if force else "the same command"
    return f"rerun {command} to continue: finished fine-tunings are kept, a cut one resumes from its checkpoint"


def progress_line(document: dict[str, Any], finished: list[str]) -> str | None:
    """For a compare still running or cut short (its compare.json holds the plan, not a result): how many of its
    fine-tunings have finished (``finished``: :func:`finished_runs`, counted from their folders now), and how to
    finish it."""
    planned = (document.get("in_progress") or {}).get("runs")
    if planned is None:
        return None
    how = document["in_progress"].get("how_to_finish") or "rerun the same command to continue"
    return f"not finished: {len(finished)} of {len(planned)} fine-tunings done; {how}"


def finished_runs(document: dict[str, Any], folder: Path) -> list[str]:
    """A compare's planned fine-tunings that have finished now, named as a stopped compare names them ("a seed 1")."""
    planned = (document.get("in_progress") or {}).get("runs") or []
    return [f"{run['name']} seed {run['seed']}" for run in planned if _finished_run(folder, run["folder"])]


def _finished_run(folder: Path, relative: str) -> bool:
    """A planned run's folder holds a finished finetune stage (its manifest); a path that leaves the compare folder
    (an edited plan) counts as not finished."""
    if relative.startswith("/") or ".." in Path(relative).parts:
        return False
    manifest = folder / relative / "manifest.json"
    return manifest.is_file() and not manifest.is_symlink()
