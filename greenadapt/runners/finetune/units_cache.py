"""Tokenized task files kept for the next run in the same process: compare's workers train seed after seed on the
same files with the same model, and a notebook reruns a fine-tuning; each run after the first skips the tokenizing
(3 s for NCBI-disease train+dev with MiniLM on 2 loaded cores).

A run's units are the same when its examples, its task settings and its tokenizers are: the key holds a digest of
the examples as read, the settings as recorded, and the model's identity as the stage records it (an expanded
folder's manifest, whose checksums cover both tokenizers; another folder's files, sizes and times). The
units are shared read-only (training reads them; a G-MAP run, which attaches its general model's input to them,
does not use the cache), and each caller gets its own list.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

KEPT = 6  # train, dev and test of two models: a compare worker alternating between models still hits

_UNITS: OrderedDict[str, tuple[list[Any], dict[str, int]]] = OrderedDict()


def units_key(task: str, examples: list[Any], settings: dict[str, Any], model: Mapping[str, Any], training: bool) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps([task, settings, model, training], sort_keys=True, default=str).encode())
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
