"""What ``--gmap``, ``--gmap-layers``, ``--general-model``, ``--gmap-unfrozen`` and ``--gmap-cache`` ask for.

:class:`GmapOptions` is what the ``finetune`` command hands to the library
(``strategy`` "none" switches G-MAP off). :func:`resolve_general_model`
finds the general model: the one named, else, for a model written by
``greenadapt expand``, the model it was expanded from (its manifest's
``config["model"]``). :func:`check_models` validates the layer plan and the
models' widths before any training starts, so a bad combination fails in a
second with a one-line error instead of after loading data.

Import-free (no torch), so the CLI can build and check the options.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.errors import ModelError, UsageError
from greenadapt.modeling.gmap.config import STRATEGIES, FusionPlan, GmapConfig, parse_layers

if TYPE_CHECKING:
    from greenadapt.artifacts.pretrained import ModelRef

log = logging.getLogger(__name__)

NONE = "none"
CHOICES = (NONE, *STRATEGIES)


@dataclass(frozen=True)
class GmapOptions:
    """G-MAP settings of a fine-tuning run; ``strategy`` "none" means no fusion."""

    strategy: str = NONE
    layers: tuple[int, ...] | None = None  # 1-based domain layers; None: the paper's defaults
    general_model: str | None = None  # None: the model an expanded domain model came from
    unfrozen: bool = False
    cache: bool = False
    indexing: str = "reference"  # "paper": multi/gated read the general layers' outputs M¹…M^G (greenadapt.modeling.gmap.config)

    @property
    def enabled(self) -> bool:
        return self.strategy != NONE

    @classmethod
    def from_cli(
        cls, strategy: str, layers: str | None, general_model: str | None, unfrozen: bool, cache: bool, indexing: str = "reference"
    ) -> GmapOptions:
        options = cls(
            strategy=strategy.strip().lower(),
            layers=parse_layers(layers) if layers is not None else None,
            general_model=general_model,
            unfrozen=unfrozen,
            cache=cache,
            indexing=indexing.strip().lower(),
        )
        options.check()
        return options

    def check(self) -> None:
        if self.strategy not in CHOICES:
            raise UsageError(f"unknown --gmap {self.strategy!r}", hint=f"choose from {', '.join(CHOICES)}")
        if not self.enabled:
            given = [
                flag
                for flag, value in (
                    ("--gmap-layers", self.layers is not None),
                    ("--general-model", self.general_model is not None),
                    ("--gmap-unfrozen", self.unfrozen),
                    ("--gmap-cache", self.cache),
                    ("--gmap-indexing", self.indexing != "reference"),
                )
                if value
            ]
            if given:
                raise UsageError(f"{', '.join(given)} need(s) --gmap", hint="add --gmap chunk (or single, multi, gated)")
            return
        if self.unfrozen and self.cache:
            raise UsageError(
                "--gmap-cache needs a frozen general model: an unfrozen one changes every step",
                hint="drop --gmap-unfrozen or --gmap-cache",
            )
        GmapConfig(strategy=self.strategy, layers=self.layers, indexing=self.indexing)  # validates the layers and the indexing

    def config(self, general_name: str | None) -> GmapConfig:
        return GmapConfig(strategy=self.strategy, layers=self.layers, unfrozen=self.unfrozen, general_model=general_name, indexing=self.indexing)

    def to_config(self, general: ModelRef | None) -> dict[str, Any] | None:
        """What the stage config records (None without G-MAP, so old runs keep their fingerprints)."""
        if not self.enabled:
            return None
        config = {
            "strategy": self.strategy,
            "layers": None if self.layers is None else list(self.layers),
            "unfrozen": self.unfrozen,
            "cache": self.cache,
            "general_model": None if general is None else str(general.path),
        }
        if self.indexing != "reference":  # only when used: runs made before the option stay up to date
            config["indexing"] = self.indexing
        return config


def resolve_general_model(options: GmapOptions, domain: ModelRef) -> ModelRef:
    """``--general-model``, else the model an expanded domain model was expanded from."""
    from greenadapt.artifacts.manifest import Manifest, read_manifest
    from greenadapt.artifacts.pretrained import resolve_model

    if options.general_model is not None:
        return resolve_model(options.general_model)
    manifest = read_manifest(domain.path)
    source = Manifest.of(manifest, domain.path).section("config", "model") if manifest is not None and manifest["kind"] == "expand" else None
    if isinstance(source, dict):
        path = source.get("path")
        if isinstance(path, str) and Path(path).is_dir():
            return resolve_model(path)
        if isinstance(source.get("model"), str):
            return resolve_model(source["model"])
    raise UsageError(
        f"--gmap {options.strategy} needs a general model, and {domain.path} does not say which model it was expanded from",
        hint="pass --general-model MODEL (a folder or Hub id of the general model, e.g. the one the domain model was trained from)",
    )


def check_models(options: GmapOptions, domain: ModelRef, general: ModelRef) -> FusionPlan:
    """The fusion plan for these two models; a UsageError (bad layers) or ModelError (widths) otherwise."""
    domain_config, general_config = domain.config(), general.config()
    sizes = {}
    for role, config, ref in (("domain", domain_config, domain), ("general", general_config, general)):
        layers, hidden = config.get("num_hidden_layers"), config.get("hidden_size")
        if not isinstance(layers, int) or not isinstance(hidden, int):
            raise ModelError(f"the {role} model's config.json does not give num_hidden_layers and hidden_size", path=ref.path)
        sizes[role] = (layers, hidden)
    if sizes["domain"][1] != sizes["general"][1]:
        raise ModelError(
            f"the general model's hidden size {sizes['general'][1]} differs from the domain model's {sizes['domain'][1]}",
            path=general.path,
            hint="G-MAP projects general states with the domain model's key/value matrices; pick a --general-model of the same width",
        )
    return options.config(str(general.path)).plan(sizes["domain"][0], sizes["general"][0])


def same_tokenizer(a: Any, b: Any) -> bool:
    """Whether two fast tokenizers split text into the same ids (same normalizer, pre-tokenizer and vocabulary)."""
    try:
        left = json.loads(a.backend_tokenizer.to_str())
        right = json.loads(b.backend_tokenizer.to_str())
    except (AttributeError, ValueError):
        return False
    keys = ("normalizer", "pre_tokenizer", "model")
    return all(left.get(k) == right.get(k) for k in keys)


__all__ = ["CHOICES", "NONE", "GmapOptions", "check_models", "resolve_general_model", "same_tokenizer"]
