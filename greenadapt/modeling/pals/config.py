"""PAL options and the parameter-count formula (import-free: the CLI and reports use it).

Adapters (``--adapter``):

- ``pals``: per task, V_E (d → s) and V_D (s → d) with biases, shared by all
  layers, plus per layer the query/key/value projections (s → s, with
  biases) of a multi-head attention in the s-dimensional space, no output
  projection (the reference code's choice). Per task and per layer count:
  ``2·d·s + d + s`` once and ``3·(s² + s)`` per layer.
- ``low-rank``: the paper's low-rank baseline, TS(h) = V_D · GELU(V_E · h)
  with its own V_E, V_D per layer (``(2·d·s + d + s)`` per layer).
- ``none``: no adapter; the encoder is shared and each task has a head only.

Heads: ``d·L + L`` for L labels (a linear layer on the pooled output for
classification, on every token for NER).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from greenadapt.errors import UsageError

ADAPTERS = ("pals", "low-rank", "none")
DEFAULT_SIZE = 204
DEFAULT_HEADS = 12  # the paper's; the reference code used 6 heads of 34
CONFIG_FILE = "pals_config.json"
CONFIG_FORMAT = 1
TASK_TYPES = ("ner", "classify")
TASK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
BASE_DIR = "base"
TASKS_DIR = "tasks"
ADAPTER_FILE = "adapter.safetensors"


def check_task_name(name: str) -> None:
    if not TASK_NAME.match(name):
        raise UsageError(
            f"task name {name!r} is not usable as a folder name",
            hint="use letters, digits, '-' and '_', starting with a letter or digit",
        )


@dataclass(frozen=True)
class PalsConfig:
    adapter: str = "pals"
    size: int = DEFAULT_SIZE
    heads: int = DEFAULT_HEADS

    def __post_init__(self) -> None:
        if self.adapter not in ADAPTERS:
            raise UsageError(f"unknown --adapter {self.adapter!r}", hint=f"choose from {', '.join(ADAPTERS)}")
        if self.adapter != "none":
            if self.size < 1:
                raise UsageError("--pal-size must be at least 1")
            if self.adapter == "pals" and (self.heads < 1 or self.size % self.heads):
                raise UsageError(
                    f"--pal-size {self.size} is not a multiple of --pal-heads {self.heads}",
                    hint="e.g. --pal-size 204 with 12 or 6 heads",
                )

    def to_json(self) -> dict[str, Any]:
        return {"format": CONFIG_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> PalsConfig:
        return cls(**{k: obj[k] for k in ("adapter", "size", "heads") if k in obj})


def adapter_parameters(config: PalsConfig, hidden: int, layers: int) -> int:
    """Parameters of one task's adapter (PALs or low-rank layers) on a ``layers``-layer, ``hidden``-wide encoder."""
    d, s = hidden, config.size
    projections = 2 * d * s + d + s  # V_E (d·s + s) and V_D (s·d + d)
    if config.adapter == "none":
        return 0
    if config.adapter == "low-rank":
        return layers * projections
    return projections + layers * 3 * (s * s + s)


def head_parameters(hidden: int, n_labels: int) -> int:
    return hidden * n_labels + n_labels


def relative_size(base: int, per_task: list[int]) -> float:
    """Total parameters of the multi-task model relative to one base model."""
    return (base + sum(per_task)) / base


__all__ = ["ADAPTERS", "DEFAULT_HEADS", "DEFAULT_SIZE", "PalsConfig", "adapter_parameters", "head_parameters", "relative_size"]
