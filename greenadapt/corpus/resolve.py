"""Turning ``--corpus`` values into a list of :class:`CorpusSource`.

A value is tried, in order, as: a URL (``scheme://``), an existing file or
folder, a glob pattern, and a registered corpus name. An existing path wins
over a name, as in :func:`greenadapt.artifacts.workspace.corpus_key`.
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from greenadapt.redaction import is_url, redact_url
from greenadapt.corpus.formats import DEFAULT_TEXT_FIELDS, check_supported_name, format_for_name
from greenadapt.corpus.recipes import NAME_RE, available_corpora, find_recipe, recipe_dirs
from greenadapt.corpus.source import CorpusSource
from greenadapt.errors import CorpusError, UsageError

log = logging.getLogger(__name__)

_GLOB_CHARS = set("*?[")
_FIELD_FORMATS = ("jsonl", "csv", "tsv")


def resolve_corpus(specs: Sequence[str], *, text_fields: Sequence[str] | None = None) -> list[CorpusSource]:
    """Resolve ``--corpus`` values to sources, in order; duplicates are read once.

    ``text_fields`` (``--text-field``), when given, replaces the fields of
    every JSON lines / CSV / TSV source, recipes' included.
    """
    if isinstance(specs, str):
        specs = [specs]
    if not specs:
        raise CorpusError("no corpus given", hint="pass --corpus NAME, a file, a folder, a glob or a URL")
    recipe_dirs()  # says at once when $GREENADAPT_CORPORA names a folder that is not there, whatever the corpus
    fields = tuple(text_fields) if text_fields else None
    if fields is not None and not all(isinstance(f, str) and f for f in fields):
        raise CorpusError("empty --text-field", hint="pass --text-field NAME")
    sources: list[CorpusSource] = []
    seen: set[str] = set()
    for spec in specs:
        for source in _resolve_one(str(spec), fields):
            if fields is not None and source.format in _FIELD_FORMATS and source.text_fields != fields:
                source = CorpusSource(source.uri, source.format, fields, source._access_uri)  # noqa: SLF001
            if source.uri in seen:
                log.warning("%s is named more than once in --corpus; it is read once", source.display)
                continue
            seen.add(source.uri)
            sources.append(source)
    if fields is not None and not any(source.format in _FIELD_FORMATS for source in sources):
        raise UsageError(
            f"--text-field {', '.join(fields)} names fields of JSON lines, CSV or TSV sources; this corpus has none",
            hint="leave --text-field out for plain-text corpora",
        )
    return sources


def _resolve_one(spec: str, fields: tuple[str, ...] | None) -> list[CorpusSource]:
    spec = spec.strip()
    if not spec:
        raise CorpusError("empty --corpus value", hint="pass a corpus name, a file, a folder, a glob or a URL")
    default_fields = fields or DEFAULT_TEXT_FIELDS
    if is_url(spec):
        if spec.lower().startswith("file://"):
            import urllib.parse
            import urllib.request

            return _resolve_path(urllib.request.url2pathname(urllib.parse.urlsplit(spec).path), spec, default_fields)
        return [_url_source(spec, default_fields)]
    path = Path(spec).expanduser()
    if path.exists():
        return _resolve_path(str(path), spec, default_fields)
    if _GLOB_CHARS & set(spec):
        return _resolve_glob(spec, default_fields)
    if NAME_RE.match(spec):
        recipe = find_recipe(spec)
        if recipe is None:
            names = ", ".join(available_corpora()) or "none"
            raise CorpusError(
                f"unknown corpus {spec!r} (registered: {names})",
                hint="name a registered corpus, or pass a file, folder, glob or URL; "
                "add recipes in a folder listed in $GREENADAPT_CORPORA",
            )
        for source in recipe.sources:
            if not source.is_url and not Path(source.uri).exists():
                raise CorpusError(
                    f"corpus {spec!r} names a file that does not exist: {source.uri}",
                    path=recipe.path,
                    hint="fix the recipe's path (relative to the recipe file)",
                )
        return list(recipe.sources)
    raise CorpusError("no such file or folder", path=spec, hint="check the path, or quote a glob pattern")


def _url_source(url: str, fields: tuple[str, ...]) -> CorpusSource:
    import urllib.parse

    redacted = redact_url(url)
    name = urllib.parse.urlsplit(redacted.public).path.rstrip("/").rsplit("/", 1)[-1]
    check_supported_name(name, redacted.public)
    return CorpusSource(url, format_for_name(name) or "text", fields)


def _resolve_path(path: str, shown: str, fields: tuple[str, ...]) -> list[CorpusSource]:
    if os.path.isdir(path):
        files = sorted(_supported_files(path))
        if not files:
            raise CorpusError(
                "folder holds no corpus files",
                path=shown,
                hint="supported: .txt .text .jsonl .ndjson .json .csv .tsv .xml .tar .tgz .zip (optionally .gz .bz2 .xz)",
            )
        return [_file_source(f, fields) for f in files]
    return [_file_source(path, fields)]


def _file_source(path: str, fields: tuple[str, ...]) -> CorpusSource:
    absolute = os.path.abspath(path)
    name = os.path.basename(absolute)
    check_supported_name(name, absolute)
    # An explicitly named file with an unknown extension is read as text;
    # the binary check refuses it if it is not.
    return CorpusSource(absolute, format_for_name(name) or "text", fields)


def _supported_files(folder: str) -> Iterator[str]:
    """Files below ``folder`` whose extension names a known format; hidden ones skipped."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith("."):
                continue
            if format_for_name(name, strict=True) is not None:
                yield os.path.join(root, name)
            else:
                log.debug("skipping %s: not a corpus file type", os.path.join(root, name))


def _resolve_glob(pattern: str, fields: tuple[str, ...]) -> list[CorpusSource]:
    matches = sorted(glob.glob(os.path.expanduser(pattern), recursive=True))
    if not matches:
        raise CorpusError("no file matches this pattern", path=pattern, hint="check the pattern (quote it in the shell)")
    sources: list[CorpusSource] = []
    for match in matches:
        sources += _resolve_path(match, match, fields) if os.path.isdir(match) else [_file_source(match, fields)]
    return sources
