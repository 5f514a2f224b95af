"""What a reader needs to prove that two runs of a comparison pair: the same data files and models (their SHA-256),
the precision each run actually trained in (``--precision auto`` resolved), and the code and libraries that ran them.

compare.json carries it as ``provenance``; bench/study_rule.py refuses to pair unit files whose provenance differs.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from greenadapt.comparison.recipe import Comparison

LIBRARIES = ("torch", "transformers", "tokenizers", "numpy", "safetensors")


def library_versions() -> dict[str, str | None]:
    from greenadapt.version import __version__

    found: dict[str, str | None] = {"greenadapt": __version__}
    for name in LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def model_digest(spec: str) -> str | None:
    """A model folder's :func:`~greenadapt.artifacts.model_weights.weights_digest`; None for a Hub name."""
    from greenadapt.artifacts.model_weights import weights_digest

    return weights_digest(Path(spec)) if Path(spec).is_dir() else None


def data_digests(options: Comparison) -> dict[str, str]:
    from greenadapt.artifacts.files import sha256_file

    settings = options.settings
    files = {"train": settings.train, "dev": settings.dev, "test": settings.test}
    return {role: sha256_file(Path(path)) for role, path in files.items() if path and Path(path).is_file()}


def precision_used(folders: Sequence[Path]) -> str | None:
    """The precision a variant's runs trained in, from each run's own record; "mixed" if its seeds differ."""
    from greenadapt.artifacts.manifest import read_manifest

    found = set()
    for folder in folders:
        manifest = read_manifest(folder) if folder.is_dir() else None
        training = ((manifest or {}).get("stats") or {}).get("training") or {}
        found |= {str(summary["precision_used"]) for summary in training.values()
                  if isinstance(summary, dict) and isinstance(summary.get("precision_used"), str)}
    return found.pop() if len(found) == 1 else ("mixed" if found else None)


def provenance(options: Comparison, variant_folders: dict[str, list[Path]], models: dict[str, str]) -> dict[str, Any]:
    return {
        "libraries": library_versions(),
        "data_sha256": data_digests(options),
        "models_sha256": {name: model_digest(spec) for name, spec in models.items()},
        "precision_used": {name: precision_used(folders) for name, folders in variant_folders.items()},
    }
