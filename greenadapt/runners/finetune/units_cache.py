"""Tokenized task files kept for the next run in the same process: compare's workers train seed after seed on the
same files with the same model, and a notebook reruns a fine-tuning; each run after the first skips the tokenizing
(3 s for NCBI-disease train+dev with MiniLM on 2 loaded cores).

A run's units are the same when its examples, its task settings and its tokenizers are: the key holds a digest of
the examples as read, the settings as recorded, and the model folder's tokenizer files (path, size, mtime). The
units are shared read-only (training reads them; a G-MAP run, which attaches its general model's input to them,
does not use the cache), and each caller gets its own list.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

KEPT = 6  # train, dev and test of two models: a compare worker alternating between models still hits

_UNITS: OrderedDict[str, tuple[list[Any], dict[str, int]]] = OrderedDict()


def tokenizer_files(folder: Path) -> list[tuple[str, int, int]]:
    """What identifies a model folder's tokenizers on disk."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and ("tokenizer" in path.name or path.name in ("vocab.txt", "merges.txt", "vocab.json", "spm.model")):
            stat = path.stat()
            found.append((str(path.resolve()), stat.st_size, stat.st_mtime_ns))
    return found


def units_key(task: str, examples: list[Any], settings: dict[str, Any], tokenizers: list[tuple[str, int, int]], training: bool) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps([task, settings, tokenizers, training], sort_keys=True, default=str).encode())
    for example in examples:
        digest.update(repr(example).encode())
    return digest.hexdigest()


def cached_units(key: str, make: Callable[[], tuple[list[Any], dict[str, int]]]) -> tuple[list[Any], dict[str, int]]:
    """``make()``'s units, from the cache when the same key made them before in this process."""
    if key in _UNITS:
        _UNITS.move_to_end(key)
    else:
        _UNITS[key] = make()
        while len(_UNITS) > KEPT:
            _UNITS.popitem(last=False)
    units, stats = _UNITS[key]
    return list(units), dict(stats)


def forget() -> None:
    _UNITS.clear()
