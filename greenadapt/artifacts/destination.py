"""Where greenadapt may write: the one rule every writing command checks before it works.

greenadapt replaces only what it wrote itself. A destination folder is

- new, or empty: fine;
- a finished greenadapt folder (a ``manifest.json`` that greenadapt wrote, and no
  file in the folder that the manifest does not list): replaced when ``--force``
  (or an option change) asks for it, and only after the new output is complete;
- anything else (a user's folder, a folder with a file the user added to one of
  ours, a folder whose manifest is damaged): refused, with or without ``--force``.

And it must not overlap what the command reads: a destination that is, contains
or lies inside the base model, an input stage folder, an input file or corpus
folder, or the workspace's cache is refused; so is one that is or contains the
workspace itself (stage folders *inside* the workspace are where greenadapt puts
its outputs by default, so those are fine).

Every command calls :func:`check_destination` after parsing its options and before
its first expensive step; :class:`greenadapt.artifacts.stage.StageRun` applies the ownership
rule again under its lock, since a folder can change between the two.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from greenadapt.artifacts.manifest import check_ownership
from greenadapt.errors import OutputExistsError, ResourceError, UsageError

# Every HTML page `greenadapt report` writes carries this line, so a rerun may replace its own page and nothing else.
REPORT_MARKER = '<meta name="generator" content="greenadapt report">'


@dataclass(frozen=True)
class Protected:
    """Something the command reads, named for the message (``"the base --model"``)."""

    role: str
    path: Path


def protected(role: str, path: str | os.PathLike[str] | None) -> list[Protected]:
    """A one-item list for a path that exists, else an empty one (so callers can add optional inputs freely)."""
    if path is None:
        return []
    p = Path(path)
    return [Protected(role, p)] if p.exists() else []


def check_destination(
    out: str | os.PathLike[str],
    *,
    kind: str,
    force: bool,
    reads: Iterable[Protected] = (),
    workspace: str | os.PathLike[str] | None = None,
    option: str = "--out",
    is_file: bool = False,
) -> Path:
    """Refuse ``out`` unless greenadapt may write ``kind`` there; return it as an absolute path.

    Checks, cheapest first, without writing anything: overlap with what the
    command reads and with the workspace; ownership of an existing folder (see
    the module docstring); that the nearest existing parent is writable.
    ``is_file`` is for single-file outputs (``predict --output``).
    """
    target = _absolute(out)
    if workspace is not None:
        root = _absolute(workspace)
        relation = _overlap(target, root)
        if relation in ("is", "contains"):
            raise UsageError(
                f"{option} {relation} the workspace ({workspace}), which holds the cache and every stage's output",
                path=out,
                hint=f"choose an {option} outside the workspace, or a new folder inside it",
            )
        cache = root / "cache"
        if _overlap(target, cache):
            raise UsageError(
                f"{option} overlaps the workspace's cache ({cache})",
                path=out,
                hint=f"choose an {option} outside {cache}",
            )
    check_destination_apart(out, reads, option=option)
    if is_file:
        from greenadapt.artifacts.files import writes_through

        if writes_through(Path(out)):  # a pipe or a device (or a link to one): written as a shell redirection would
            if not os.access(out, os.W_OK):
                raise ResourceError("cannot write here", path=out, hint="check its permissions or choose another destination")
            return Path(out)
        if target.is_dir():
            raise UsageError(f"{option} is a folder; a file is written here", path=out,
                             hint=f"name a file, e.g. {Path(out) / 'predictions.tsv'}")
        if target.exists() and not force:
            raise OutputExistsError("the file exists", path=out, hint="pass --force to replace it, or choose another file")
    else:
        check_ownership(target, kind=kind, force=force, shown=Path(out))
    _check_writable(target, shown=Path(out))
    return target


def check_destination_apart(out: str | os.PathLike[str], reads: Iterable[Protected], *, option: str = "--out") -> None:
    """Refuse an ``out`` that is, contains or lies inside anything the command reads (whatever the flags)."""
    target = _absolute(out)
    for item in reads:
        relation = _overlap(target, _absolute(item.path))
        if relation:
            raise UsageError(
                f"{option} {relation} {item.role} ({item.path})",
                path=out,
                hint=f"choose an {option} outside what this command reads",
            )


def _overlap(target: Path, other: Path) -> str:
    if target == other:
        return "is"
    if target in other.parents:
        return "contains"
    if other in target.parents:
        return "lies inside"
    return ""


def _absolute(path: str | os.PathLike[str]) -> Path:
    """An absolute path with links resolved as far as the path exists (so two spellings of one folder match)."""
    p = Path(os.path.abspath(os.fspath(path)))
    existing = p
    rest: list[str] = []
    while not existing.exists() and existing != existing.parent:
        rest.append(existing.name)
        existing = existing.parent
    return existing.resolve().joinpath(*reversed(rest))


def _check_writable(target: Path, *, shown: Path) -> None:
    # The output is made beside its destination and renamed into place: the parent must be writable.
    existing = target.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{existing} is a file, so nothing can be written below it", path=shown, hint="choose another destination")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ResourceError("cannot write here", path=shown, hint=f"check the permissions of {existing} or choose another destination")


def corpus_reads(specs: Iterable[str]) -> list[Protected]:
    """The local files and folders named by ``--corpus`` values (names and URLs protect nothing here)."""
    return [item for spec in specs if "://" not in spec for item in protected("a --corpus input", spec)]


def check_run_destination(
    out: str | os.PathLike[str],
    *,
    kind: str,
    force: bool,
    model: str | os.PathLike[str],
    data: Iterable[str | os.PathLike[str] | None] = (),
    workdir: str | os.PathLike[str] | None = None,
) -> Path:
    """:func:`check_destination` for a training or inference run: it reads a model, data files and a workspace."""
    from greenadapt.artifacts.workspace import workdir as resolve_workdir

    reads = protected("the --model", model)
    for path in data:
        reads += protected("a data file", path)
    return check_destination(out, kind=kind, force=force, reads=reads, workspace=resolve_workdir(workdir))


def check_prediction_output(
    output: str | os.PathLike[str], *, force: bool, model: str | os.PathLike[str], input_path: str | os.PathLike[str]
) -> Path:
    """``predict --output``: a file, never the input or inside the model folder; an existing one only with --force."""
    from greenadapt.options import refuse_remote_output

    refuse_remote_output(os.fspath(output), "--output")
    reads = [*protected("the --input file", input_path), *protected("the --model folder", model)]
    return check_destination(output, kind="predictions", force=force, reads=reads, option="--output", is_file=True)


def check_report_output(path: str | os.PathLike[str]) -> Path:
    """``report --html FILE``: a new file, or a page greenadapt wrote (replaced); never a folder or someone else's file."""
    from greenadapt.options import refuse_remote_output

    refuse_remote_output(os.fspath(path), "--html")
    target = _absolute(path)
    if target.is_dir():
        raise UsageError("--html is a folder; a file is written here", path=path, hint=f"name a file, e.g. {Path(path) / 'report.html'}")
    if target.exists():
        with open(target, "rb") as handle:
            head = handle.read(4096)
        if REPORT_MARKER.encode() not in head:
            raise OutputExistsError(
                "refusing to replace this file: it is not a page greenadapt report wrote",
                path=path,
                hint="choose a new file name",
            )
    _check_writable(target, shown=Path(path))
    return target
