"""G-MAP options, default layers and which general hidden states each fused layer reads.

Numbering. Domain layers are 1-based (layer 1 is the first transformer layer,
layer L the last), as in the paper and on the command line. General hidden
states are numbered as transformers' ``output_hidden_states`` numbers them:
state 0 is the embedding output, state g the output of general layer g, so a
general model with G layers has states 0…G.

Strategies (L domain layers, G general layers; defaults for L = 12, G = 12 in
brackets):

- ``single``: every fused layer reads the general model's last hidden state,
  state G. Default layer ⌈3L/4⌉ [9].
- ``multi``: domain layer l reads state l−1, the *input* of the general layer
  at the same depth (state 0, the embedding output, for layer 1). Default:
  every layer [1…12 ← 0…11]. State G is not used. This is the alignment the
  reference code's chunk configuration implies (see ``chunk``).
- ``gated``: a token-level softmax over *all* general states 0…G, scored by a
  ``Linear(hidden, 1)``, mixes them into one memory. Default layer ⌈3L/4⌉
  [9 ← gated 0…12].
- ``chunk``: the fused layers l₁ < … < l_k split the general states into
  contiguous chunks; layer l_j reads a gated mix (one ``Linear(hidden, 1)``
  per fused layer) of states l_{j−1} … l_j − 1 (l₀ = 0). Default layers ⌈L/2⌉
  and L [6 ← gated 0…5, 12 ← gated 6…11], the reference code's
  configuration; state G is not used there either. With every layer fused,
  ``chunk`` reads what ``multi`` reads (through a one-state gate).

When G ≠ L, state indices are scaled by G/L (rounded half up), so a
6-layer general model feeds a 12-layer domain model at matching relative
depths.

Indexing (``--gmap-indexing``). The above is the reference code's alignment
(``reference``, the default). The paper writes the memory of domain layer l
as M^l, the *output* of general layer l, and the gated mix over M¹…M^G;
``paper`` follows that: ``multi`` layer l reads state l (scaled), ``gated``
mixes states 1…G (not the embedding output). ``single`` and ``chunk`` are
the same under both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from greenadapt.errors import UsageError

STRATEGIES = ("single", "multi", "gated", "chunk")
INDEXINGS = ("reference", "paper")
GATED_STRATEGIES = ("gated", "chunk")

CONFIG_FILE = "gmap_config.json"
GATES_FILE = "gmap_gates.safetensors"
GENERAL_DIR = "gmap-general"  # the fine-tuned general model of an --gmap-unfrozen run
CONFIG_FORMAT = 1


def default_layers(strategy: str, n_layers: int) -> tuple[int, ...]:
    """The paper's fused domain layers (1-based) for an ``n_layers``-layer domain model."""
    _check_strategy(strategy)
    if n_layers < 1:
        raise UsageError(f"a model with {n_layers} layers cannot be fused", hint="G-MAP needs a transformer encoder")
    if strategy in ("single", "gated"):
        return (math.ceil(3 * n_layers / 4),)
    if strategy == "chunk":
        return tuple(sorted({math.ceil(n_layers / 2), n_layers}))
    return tuple(range(1, n_layers + 1))


def _scale(index: int, n_domain: int, n_general: int) -> int:
    """Domain depth ``index`` at the general model's depth, rounded half up."""
    return (2 * index * n_general + n_domain) // (2 * n_domain)


@dataclass(frozen=True)
class FusionPlan:
    """Which general hidden states each fused domain layer reads."""

    strategy: str
    states: Mapping[int, tuple[int, ...]]  # 1-based domain layer -> general state indices (0 = embeddings)
    n_domain: int
    n_general: int

    @property
    def gated(self) -> bool:
        return self.strategy in GATED_STRATEGIES

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(sorted(self.states))

    @property
    def state_indices(self) -> tuple[int, ...]:
        """Every general state some fused layer reads, ascending: what a forward pass (or the cache) must keep."""
        return tuple(sorted({s for indices in self.states.values() for s in indices}))

    def describe(self) -> str:
        parts = []
        for layer in self.layers:
            indices = self.states[layer]
            span = str(indices[0]) if len(indices) == 1 else f"{indices[0]}-{indices[-1]}"
            parts.append(f"{layer}<-{'gated ' if self.gated else ''}{span}")
        return f"{self.strategy}: " + ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "n_domain_layers": self.n_domain,
            "n_general_layers": self.n_general,
            "states": {str(layer): list(self.states[layer]) for layer in self.layers},
        }


def fusion_plan(strategy: str, layers: tuple[int, ...], n_domain: int, n_general: int, indexing: str = "reference") -> FusionPlan:
    """The general states each of ``layers`` reads; see the module docstring for the rules."""
    _check_strategy(strategy)
    _check_indexing(indexing)
    shift = 1 if indexing == "paper" else 0  # the paper's M^l is state l; the reference code reads state l - 1
    if n_general < 1:
        raise UsageError(f"the general model has {n_general} layers", hint="use a transformer encoder as --general-model")
    if not layers:
        raise UsageError("no G-MAP layers given", hint="--gmap-layers takes one or more 1-based layer numbers")
    for layer in layers:
        if not 1 <= layer <= n_domain:
            raise UsageError(
                f"G-MAP layer {layer} does not exist: the domain model has {n_domain} layers",
                hint=f"--gmap-layers takes 1-based layer numbers from 1 to {n_domain}",
            )
    states: dict[int, tuple[int, ...]] = {}
    if strategy == "single":
        states = {layer: (n_general,) for layer in layers}
    elif strategy == "gated":
        states = {layer: tuple(range(shift, n_general + 1)) for layer in layers}
    elif strategy == "multi":
        states = {layer: (_scale(layer - 1 + shift, n_domain, n_general),) for layer in layers}
    else:
        start = 0
        for layer in layers:
            stop = _scale(layer, n_domain, n_general)
            if stop <= start:
                raise UsageError(
                    f"chunk fusion into layers {', '.join(map(str, layers))} leaves layer {layer} no general states "
                    f"(the general model has {n_general} layers)",
                    hint="choose fewer or farther-apart --gmap-layers",
                )
            states[layer] = tuple(range(start, stop))
            start = stop
    return FusionPlan(strategy, states, n_domain, n_general)


@dataclass(frozen=True)
class GmapConfig:
    """What ``--gmap``, ``--gmap-layers``, ``--gmap-unfrozen`` and ``--general-model`` ask for.

    ``layers`` are 1-based domain layers; None means the paper's default for
    the domain model's depth (:func:`default_layers`). ``general_model`` is
    the general model as the user named it (folder or Hub id); a saved G-MAP
    model records it, with the weights' fingerprint, to reload the same one.
    """

    strategy: str = "chunk"
    layers: tuple[int, ...] | None = None
    unfrozen: bool = False
    general_model: str | None = None
    indexing: str = "reference"

    def __post_init__(self) -> None:
        _check_strategy(self.strategy)
        _check_indexing(self.indexing)
        if self.layers is not None:
            layers = tuple(self.layers)
            if any(isinstance(x, bool) or not isinstance(x, int) for x in layers):
                raise UsageError(f"G-MAP layers must be whole numbers, got {list(layers)}")
            if len(set(layers)) != len(layers):
                raise UsageError(f"G-MAP layers repeat: {list(layers)}", hint="name each layer once")
            object.__setattr__(self, "layers", tuple(sorted(layers)))

    @property
    def gated(self) -> bool:
        return self.strategy in GATED_STRATEGIES

    def resolved_layers(self, n_domain: int) -> tuple[int, ...]:
        return self.layers if self.layers is not None else default_layers(self.strategy, n_domain)

    def plan(self, n_domain: int, n_general: int) -> FusionPlan:
        return fusion_plan(self.strategy, self.resolved_layers(n_domain), n_domain, n_general, self.indexing)

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "layers": None if self.layers is None else list(self.layers),
            "unfrozen": self.unfrozen,
            "general_model": self.general_model,
            "indexing": self.indexing,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GmapConfig:
        # An unknown key may be an option of a newer release (a fusion variant,
        # say); ignoring it would silently run a different model.
        unknown = set(data) - {"strategy", "layers", "unfrozen", "general_model", "indexing"}
        if unknown:
            raise UsageError(
                f"unknown G-MAP settings {', '.join(sorted(unknown))}", hint="was it written by a newer greenadapt?"
            )
        if not isinstance(data.get("strategy"), str):
            raise UsageError("a G-MAP configuration needs a strategy", hint=f"one of {', '.join(STRATEGIES)}")
        layers = data.get("layers")
        if layers is not None and not isinstance(layers, list):
            raise UsageError(f"G-MAP layers must be a list, got {layers!r}")
        unfrozen = data.get("unfrozen", False)
        if not isinstance(unfrozen, bool):
            raise UsageError(f"G-MAP 'unfrozen' must be true or false, got {unfrozen!r}")
        general = data.get("general_model")
        if general is not None and not isinstance(general, str):
            raise UsageError(f"G-MAP 'general_model' must be a string, got {general!r}")
        indexing = data.get("indexing", "reference")  # models saved before the option: the reference alignment
        if not isinstance(indexing, str):
            raise UsageError(f"G-MAP 'indexing' must be a string, got {indexing!r}")
        return cls(
            strategy=data["strategy"],
            layers=None if layers is None else tuple(layers),
            unfrozen=unfrozen,
            general_model=general,
            indexing=indexing,
        )


def parse_layers(text: str) -> tuple[int, ...]:
    """``--gmap-layers "6,12"`` -> (6, 12)."""
    try:
        layers = tuple(int(part) for part in text.replace(" ", "").split(",") if part)
    except ValueError:
        raise UsageError(f"--gmap-layers {text!r} is not a list of layer numbers", hint='e.g. --gmap-layers "6,12"') from None
    if not layers:
        raise UsageError("--gmap-layers is empty", hint='e.g. --gmap-layers "6,12"')
    return layers


def _check_indexing(indexing: str) -> None:
    if indexing not in INDEXINGS:
        raise UsageError(f"unknown --gmap-indexing {indexing!r}", hint=f"choose from {', '.join(INDEXINGS)}")


def _check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown G-MAP strategy {strategy!r}", hint=f"choose from {', '.join(STRATEGIES)}")


__all__ = [
    "CONFIG_FILE",
    "CONFIG_FORMAT",
    "GATED_STRATEGIES",
    "GATES_FILE",
    "GENERAL_DIR",
    "STRATEGIES",
    "FusionPlan",
    "GmapConfig",
    "default_layers",
    "fusion_plan",
    "parse_layers",
]
