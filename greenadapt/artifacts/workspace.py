"""Where stages put their output when no ``--out`` is given.

Layout under the workspace (``--workdir``, else ``$GREENADAPT_WORKDIR``,
else ``./greenadapt-work``)::

    <workdir>/<corpus-key>/<model-slug>/w2v/
    <workdir>/<corpus-key>/<model-slug>/align/
    <workdir>/<corpus-key>/<model-slug>/expand/
    <workdir>/cache/pretok/<key>/        (pre-tokenized corpora, shared)

so ``greenadapt align --corpus cord19`` finds what ``w2v --corpus cord19``
wrote, and when only one model was used with that corpus it needs no
``--model`` either.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from pathlib import Path

from greenadapt.artifacts.manifest import canonical_json
from greenadapt.artifacts.pretrained import slugify
from greenadapt.errors import StageError, UsageError
from greenadapt.redaction import KEY_PAIR_SCHEMES, URL_RE

WORKDIR_ENV = "GREENADAPT_WORKDIR"
DEFAULT_WORKDIR = "greenadapt-work"


def workdir(explicit: str | os.PathLike[str] | None = None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get(WORKDIR_ENV)
    return Path(env) if env else Path(DEFAULT_WORKDIR)




def corpus_key(specs: Sequence[str], *, as_given: bool = False) -> str:
    """A stable folder name for a list of ``--corpus`` values.

    Registered names stay readable (``cord19``); paths and URLs become their
    stem plus a short hash of the full spec, so two different ``data.txt``
    files do not collide. A local path is hashed as its absolute, resolved
    form: ``slice.txt`` from its folder, ``../data/slice.txt`` and the absolute
    path are one corpus and share their stages. ``as_given``: the key of
    greenadapt until this release, which hashed the spec as typed (see :func:`corpus_folder`).
    """
    if not specs:
        raise UsageError("no --corpus given", hint="name a registered corpus, a file, a glob or a URL")
    parts = []
    for spec in specs:
        if _looks_like_name(spec):
            parts.append(spec)
        else:
            spec = without_credentials(spec)  # a folder name is shown everywhere: never a user:password@
            stem = Path(spec.rstrip("/").split("?")[0]).name.split(".")[0] or "corpus"
            hashed = spec if as_given or URL_RE.match(spec) else os.path.realpath(os.path.expanduser(spec))
            parts.append(f"{slugify(stem)}-{hashlib.sha256(hashed.encode()).hexdigest()[:8]}")
    key = "+".join(parts)
    if len(key) > 100:
        key = key[:80] + "-" + hashlib.sha256(key.encode()).hexdigest()[:12]
    return key


def corpus_folder(root: Path, specs: Sequence[str]) -> Path:
    """The workspace folder of a corpus: ``root / corpus_key(specs)``, or the folder an earlier greenadapt made for
    the same spelling of it (keyed on the spec as typed), so that its stages are found rather than made again."""
    folder = root / corpus_key(specs)
    if not folder.exists():
        earlier = root / corpus_key(specs, as_given=True)
        if earlier != folder and earlier.is_dir():
            return earlier
    return folder




def without_credentials(spec: str) -> str:
    """A URL with its ``user:password@`` (or an object store's ``KEY:SECRET@``) removed; any other spec as it is."""
    scheme, sep, rest = spec.partition("://")
    if not sep or not scheme.replace("+", "").replace("-", "").replace(".", "").isalnum():
        return spec
    if scheme.lower() in KEY_PAIR_SCHEMES:
        if "@" in rest:
            rest = rest.rpartition("@")[2]
    else:
        authority, slash, path = rest.partition("/")
        authority = authority.rpartition("@")[2]
        rest = authority + slash + path
    return f"{scheme}://{rest}"


def _looks_like_name(spec: str) -> bool:
    return spec.replace("-", "").replace("_", "").isalnum() and not Path(spec).exists()


def model_folder_name(root: Path, corpus: Sequence[str], ref: Any) -> str:
    """The workspace folder of ``ref`` (a ModelRef) under ``corpus``: its slug (``bert``), unless that folder holds
    the stages of another model with the same folder name (``a/bert`` beside ``b/bert``); then ``bert-<hash of its
    path>``, so that each model keeps its own stages and no ``--force`` replaces another's.

    The same model is recognised by its path, or by its files (a model folder moved elsewhere keeps its stages).
    """
    from greenadapt.artifacts.manifest import read_manifest

    slug = ref.slug
    folder = corpus_folder(root, corpus) / slug
    if not folder.is_dir():
        return slug
    mine = ref.identity()
    others = False
    for manifest_file in sorted(folder.glob("*/manifest.json")):
        recorded = ((read_manifest(manifest_file.parent) or {}).get("config") or {}).get("model")
        if not isinstance(recorded, Mapping) or "path" not in recorded:
            continue
        if _same_path(recorded.get("path"), ref.path) or recorded.get("files_digest") == mine.get("files_digest"):
            return slug
        others = True
    if not others:
        return slug
    return f"{slug}-{hashlib.sha256(str(Path(ref.path).resolve()).encode()).hexdigest()[:8]}"


def _same_path(recorded: Any, path: Path) -> bool:
    try:
        return Path(str(recorded)).resolve() == Path(path).resolve()
    except OSError:
        return False


def stage_dir(root: Path, corpus: Sequence[str], model_slug: str, stage: str) -> Path:
    return corpus_folder(root, corpus) / model_slug / stage


VARIANT_MARK = "+"  # <stage>+<key>: a second configuration of a stage, beside the first


def stage_variant_dir(default: Path, config: Mapping[str, Any], defaults: Callable[[], Mapping[str, Any]], *, force: bool) -> Path:
    """Where a stage writes when no --out is given: its default folder, unless that holds a run of other options.

    Then (and without --force, which redoes the default folder) the run goes to a sibling named by what its
    options change from the defaults (``w2v+epochs-10``, ``expand+min-count-20``; ``+defaults`` for the default
    options when the default folder holds another configuration), so a second configuration lives beside the
    first and never replaces a stage another folder was built from. The same options always name the same folder.
    ``defaults()``, the config of the default options, is built only then.
    """
    from greenadapt.artifacts.manifest import read_manifest

    existing = None if force else read_manifest(default)
    if existing is None or canonical_json(existing.get("config") or {}) == canonical_json(config):
        return default
    return default.with_name(f"{default.name}{VARIANT_MARK}{variant_key(config, defaults())}")


def variant_key(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> str:
    """A folder-name key for the options of ``config`` that differ from ``defaults``: readable, else a hash."""
    changed = sorted(k for k in set(config) | set(defaults) if canonical_json(config.get(k)) != canonical_json(defaults.get(k)))
    if not changed:
        return "defaults"
    parts = []
    for name in changed:
        value = config.get(name)
        readable = isinstance(value, bool | int | float | str) and len(str(value)) <= 16
        parts.append(f"{name.replace('_', '-')}-{slugify(str(value))}" if readable else f"{name.replace('_', '-')}-{_digest(value)}")
    key = "-".join(parts)
    return key if len(key) <= 48 else _digest({name: config.get(name) for name in changed})


def _digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:8]


def find_stage_dir(root: Path, corpus: Sequence[str], model_slug: str | None, stage: str) -> Path:
    """Locate what an earlier stage wrote for ``corpus`` (and ``model_slug`` if given)."""
    base = corpus_folder(root, corpus)
    if model_slug is not None:
        return base / model_slug / stage
    candidates = sorted(p.parent.parent for p in base.glob(f"*/{stage}/manifest.json"))  # the model folders
    if not candidates:
        raise StageError(
            f"no {stage} output for corpus {'+'.join(corpus)} in workspace {root}",
            hint=f"run `greenadapt {stage} --corpus {' --corpus '.join(corpus)}` first, or pass --workdir",
        )
    if len(candidates) > 1:
        names = ", ".join(p.name for p in candidates)
        raise UsageError(
            f"{stage} outputs for several models exist for this corpus ({names})",
            hint="pass --model to choose one",
        )
    return candidates[0] / stage
