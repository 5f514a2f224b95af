"""Task data from the ``datasets`` ecosystem: a ``save_to_disk`` folder or a Parquet file.

``finetune --train/--dev/--test`` and ``predict`` accept, where the
``datasets`` package is installed, a folder written by
``Dataset.save_to_disk`` (one split; a ``DatasetDict`` folder is refused with
the split folders to pick from) or a local ``.parquet`` file — no dataset
script is ever run. Columns are found by the same names as in JSON lines
(``tokens``/``ner_tags``, ``text``/``label``, …, or ``--text-field`` and
friends); ``ClassLabel`` columns are turned into their label names, so a Hub
NER set's integer tags become ``B-Disease``-style strings. Rows are then read
by the JSON-lines readers, row numbers standing in for line numbers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from greenadapt.errors import DataError, UsageError

DATASET_SUFFIXES = (".parquet",)


def is_dataset_input(path: Path) -> bool:
    """A ``save_to_disk`` folder (or ``DatasetDict`` folder), or a Parquet file."""
    if path.is_dir():
        return any((path / name).is_file() for name in ("state.json", "dataset_dict.json", "dataset_info.json"))
    return path.suffix.lower() in DATASET_SUFFIXES and path.is_file()


def dataset_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(1-based row number, row)`` with ``ClassLabel`` values as their names."""
    dataset = _load(path)
    names = {column: _label_names(feature) for column, feature in dataset.features.items()}
    for number, row in enumerate(dataset, 1):
        yield number, {column: _named(value, names.get(column)) for column, value in row.items()}


def _load(path: Path) -> Any:
    try:
        import datasets
    except ImportError:
        raise UsageError(
            "reading a saved dataset needs the `datasets` package", path=path, hint="pip install datasets, or pass a JSON-lines/TSV file"
        ) from None
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
            splits = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8")).get("splits") or []
            raise DataError(
                f"a DatasetDict with splits {', '.join(splits)}: pass one split's folder",
                path=path, hint=f"e.g. {path / (splits[0] if splits else 'train')}",
            )
        try:
            return datasets.load_from_disk(str(path))
        except (FileNotFoundError, ValueError, OSError) as exc:
            raise DataError(f"not a readable saved dataset ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})", path=path,
                            hint="write it with Dataset.save_to_disk") from None
    try:
        return datasets.Dataset.from_parquet(str(path))
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError, ArrowIOError an OSError
        raise DataError(f"not a readable Parquet file ({type(exc).__name__})", path=path, hint="check the file") from None


def _label_names(feature: Any) -> list[str] | None:
    inner = getattr(feature, "feature", None)  # Sequence(ClassLabel) / List(ClassLabel)
    if inner is not None and hasattr(inner, "names"):
        return list(inner.names)
    return list(feature.names) if hasattr(feature, "names") else None


def _named(value: Any, names: list[str] | None) -> Any:
    if names is None:
        return value
    if isinstance(value, list):
        return [names[v] if isinstance(v, int) and 0 <= v < len(names) else v for v in value]
    # GLUE's test splits mark a missing label with -1.
    return None if value == -1 else names[value] if isinstance(value, int) and 0 <= value < len(names) else value
