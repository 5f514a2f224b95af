"""G-MAP's general model: which one (:func:`resolve_general_model`: the one named, else, for a model written by
``greenadapt expand``, the model it was expanded from, its manifest's ``config["model"]``) and whether it fits
(:func:`check_models`: the layer plan and the models' widths, before any training starts, so a bad combination fails in
a second with a one-line error instead of after loading data). No torch.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.errors import ModelError, UsageError
from greenadapt.modeling.gmap.config import FusionPlan, GmapConfig

if TYPE_CHECKING:
    from greenadapt.artifacts.pretrained import ModelRef
    from greenadapt.modeling.gmap.settings import GmapSettings

log = logging.getLogger(__name__)


def resolve_general_model(settings: GmapSettings, domain: ModelRef) -> ModelRef:
    """``--general-model``, else the model an expanded domain model was expanded from."""
    from greenadapt.artifacts.manifest import Manifest, read_manifest
    from greenadapt.artifacts.pretrained import resolve_model

    if settings.general_model is not None:
        return resolve_model(settings.general_model)
    manifest = read_manifest(domain.path)
    source = Manifest.of(manifest, domain.path).section("config", "model") if manifest and manifest["kind"] == "expand" else None
    if isinstance(source, dict):
        path = source.get("path")
        if isinstance(path, str) and Path(path).is_dir():
            return resolve_model(path)
        if isinstance(source.get("model"), str):
            return resolve_model(source["model"])
    raise UsageError(
        f"--gmap {settings.gmap} needs a general model, and {domain.path} does not say which model it was expanded from",
        hint="pass --general-model MODEL (a folder or Hub id of the general model, e.g. the one the domain model was trained from)",
    )


def check_models(fusion: GmapConfig, domain: ModelRef, general: ModelRef) -> FusionPlan:
    """The fusion plan ``fusion`` makes of these two models; a UsageError (bad layers) or ModelError (widths) otherwise."""
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
    return fusion.plan(sizes["domain"][0], sizes["general"][0])


def same_tokenizer(a: Any, b: Any) -> bool:
    """Whether two fast tokenizers split text into the same ids (same normalizer, pre-tokenizer and vocabulary)."""
    try:
        left = json.loads(a.backend_tokenizer.to_str())
        right = json.loads(b.backend_tokenizer.to_str())
    except (AttributeError, ValueError):
        return False
    keys = ("normalizer", "pre_tokenizer", "model")
    return all(left.get(k) == right.get(k) for k in keys)


__all__ = ["check_models", "resolve_general_model", "same_tokenizer"]
