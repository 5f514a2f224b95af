"""Named corpora: TOML recipes that say where a corpus lives and how to read it.

Recipes are looked up in the folders of ``$GREENADAPT_CORPORA``
(``os.pathsep``-separated) first, then among the bundled ones (the repo's
top-level ``corpora/`` folder, installed as the package
``greenadapt.corpora``). A recipe file ``<name>.toml`` holds::

    name = "pubmed"                 # optional; must equal the file name
    description = "..."
    homepage = "https://..."
    license = "..."
    citation = "..."

    [[sources]]
    url = "https://..."             # or: path = "relative/to/this/file.txt.gz"
    # or: url_template = "https://.../pubmed25n{n:04d}.xml.gz" with range = [1, 1274]
    format = "pubmed-xml"           # optional: inferred from the extension
    text_fields = ["text"]          # for jsonl/csv/tsv
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenadapt.corpus.formats import DEFAULT_TEXT_FIELDS, FORMATS, format_for_name
from greenadapt.corpus.source import CorpusSource
from greenadapt.errors import CorpusError
from greenadapt.structured_text import NestedTooDeeply, loads_toml

log = logging.getLogger(__name__)

CORPORA_ENV = "GREENADAPT_CORPORA"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_RECIPE_KEYS = {"name", "description", "homepage", "license", "citation", "sources"}
_SOURCE_KEYS = {"url", "path", "url_template", "range", "format", "text_fields"}
_MAX_TEMPLATE_FILES = 1_000_000


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    homepage: str
    license: str
    citation: str
    sources: tuple[CorpusSource, ...]
    path: str  # the recipe file

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly description (for `--json` listings and manifests)."""
        return {
            "name": self.name,
            "description": self.description,
            "homepage": self.homepage,
            "license": self.license,
            "sources": len(self.sources),
            "recipe": self.path,
        }


def bundled_dir() -> Path | None:
    """The folder of the recipes that ship with greenadapt."""
    import importlib.resources

    try:
        folder = importlib.resources.files("greenadapt.corpora")
    except ModuleNotFoundError:
        folder = None
    if isinstance(folder, Path) and folder.is_dir():
        return folder
    # A source checkout used without reinstalling (or an editable install
    # made before the mapping existed): the recipes sit beside the package.
    checkout = Path(__file__).resolve().parents[2] / "corpora"
    return checkout if checkout.is_dir() else None


def recipe_dirs() -> list[Path]:
    dirs = [Path(p).expanduser() for p in os.environ.get(CORPORA_ENV, "").split(os.pathsep) if p.strip()]
    for missing in [folder for folder in dirs if not folder.is_dir()]:
        _warn_once(f"${CORPORA_ENV} names {missing}, which is not a folder: no recipes are read from it")
    bundled = bundled_dir()
    if bundled is not None:
        dirs.append(bundled)
    return dirs


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning("%s", message)


def find_recipe(name: str) -> Recipe | None:
    """The recipe called ``name`` (the first folder that has it wins), or None."""
    if not NAME_RE.match(name):
        return None
    for folder in recipe_dirs():
        candidate = folder / f"{name}.toml"
        if candidate.is_file():
            return load_recipe(candidate)
    return None


def available_corpora() -> dict[str, Recipe]:
    """Every registered corpus by name; a broken recipe file is skipped with a warning."""
    found: dict[str, Recipe] = {}
    for folder in recipe_dirs():
        if not folder.is_dir():
            log.debug("%s=%s: not a folder, ignored", CORPORA_ENV, folder)
            continue
        for path in sorted(folder.glob("*.toml")):
            if path.stem in found or not NAME_RE.match(path.stem):
                continue
            try:
                found[path.stem] = load_recipe(path)
            except CorpusError as exc:
                log.warning("ignoring corpus recipe: %s", exc.one_line())
    return dict(sorted(found.items()))


def load_recipe(path: Path) -> Recipe:
    import tomllib

    try:
        data = loads_toml(path.read_text(encoding="utf-8"))
    except NestedTooDeeply as exc:
        raise CorpusError(f"recipe {exc}", path=path, hint="a recipe is a flat [corpus] table") from None
    except OSError as exc:
        raise CorpusError(f"cannot read recipe: {exc.strerror or exc}", path=path) from None
    except UnicodeDecodeError:
        raise CorpusError("recipe is not UTF-8 text", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        raise CorpusError(
            f"invalid TOML: {str(exc).split(' (at ')[0]}", path=path, line=int(match.group(1)) if match else None
        ) from None
    _no_unknown_keys(data, _RECIPE_KEYS, path, "recipe")
    name = data.get("name", path.stem)
    if name != path.stem:
        raise CorpusError(f"recipe name {name!r} differs from its file name", path=path, hint=f"rename it {name}.toml")
    raw_sources = data.get("sources")
    if not isinstance(raw_sources, list) or not raw_sources:
        raise CorpusError("recipe has no [[sources]]", path=path, hint="add a [[sources]] table with url or path")
    sources: list[CorpusSource] = []
    for index, entry in enumerate(raw_sources, start=1):
        sources += _sources_of(entry, index, path)
    return Recipe(
        name=name,
        description=_string(data, "description", path),
        homepage=_string(data, "homepage", path),
        license=_string(data, "license", path),
        citation=_string(data, "citation", path),
        sources=tuple(sources),
        path=str(path),
    )


def _sources_of(entry: Any, index: int, path: Path) -> list[CorpusSource]:
    where = f"[[sources]] #{index}"
    if not isinstance(entry, dict):
        raise CorpusError(f"{where} is not a table", path=path)
    _no_unknown_keys(entry, _SOURCE_KEYS, path, where)
    given = [k for k in ("url", "path", "url_template") if k in entry]
    if len(given) != 1:
        raise CorpusError(f"{where} needs exactly one of url, path, url_template (has {given or 'none'})", path=path)
    text_fields = entry.get("text_fields", list(DEFAULT_TEXT_FIELDS))
    if not isinstance(text_fields, list) or not text_fields or not all(isinstance(f, str) and f for f in text_fields):
        raise CorpusError(f"{where}: text_fields must be a non-empty list of names", path=path)
    fmt = entry.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise CorpusError(f"{where}: unknown format {fmt!r}", path=path, hint=f"use one of {', '.join(FORMATS)}")

    def make(uri: str) -> CorpusSource:
        name = uri.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        return CorpusSource(uri, fmt or format_for_name(name) or "text", tuple(text_fields))

    if "url" in entry:
        return [make(_checked_str(entry["url"], f"{where}: url", path))]
    if "path" in entry:
        relative = Path(_checked_str(entry["path"], f"{where}: path", path)).expanduser()
        return [make(str((path.parent / relative).resolve()))]
    return [make(url) for url in _expand_template(entry, where, path)]


def _expand_template(entry: dict[str, Any], where: str, path: Path) -> list[str]:
    template = _checked_str(entry["url_template"], f"{where}: url_template", path)
    bounds = entry.get("range")
    if (
        not isinstance(bounds, list)
        or len(bounds) != 2
        or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
        or bounds[0] > bounds[1]
        or bounds[1] - bounds[0] >= _MAX_TEMPLATE_FILES
    ):
        raise CorpusError(f"{where}: url_template needs range = [first, last] (integers, first <= last)", path=path)
    try:
        first = template.format(n=bounds[0])
    except (KeyError, IndexError, ValueError) as exc:
        raise CorpusError(
            f"{where}: url_template is not a format string with {{n}} ({exc})", path=path, hint='e.g. "…/part{n:04d}.gz"'
        ) from None
    if first == template:
        raise CorpusError(f"{where}: url_template has no {{n}} placeholder", path=path)
    return [template.format(n=n) for n in range(bounds[0], bounds[1] + 1)]


def _no_unknown_keys(table: dict[str, Any], allowed: set[str], path: Path, where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise CorpusError(
            f"{where} has unknown key(s) {', '.join(unknown)}", path=path, hint=f"allowed: {', '.join(sorted(allowed))}"
        )


def _string(table: dict[str, Any], key: str, path: Path) -> str:
    value = table.get(key, "")
    return _checked_str(value, key, path) if value != "" else ""


def _checked_str(value: Any, what: str, path: Path) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CorpusError(f"{what} must be a non-empty string", path=path)
    return value.strip()
