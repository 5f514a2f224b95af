"""G-MAP in ``finetune`` and ``predict``: the general model's inputs, building and reloading the fused model.

The domain model reads each unit under T_LM and T̂ (or one of them: the mixture); the
general model always reads the same text under *its own* tokenizer. When
that tokenizer is T_LM (the usual case: an expanded model and the model it
was expanded from), the memory input of a unit is its T_LM view, whatever
view the domain model gets; otherwise the unit's words (NER) or text
(classification) are tokenized again with the general model's tokenizer,
which a fine-tuned folder then keeps in ``gmap-tokenizer/``. Either way the
memory length differs from the query length under T̂, which
memory-attention allows.

A fine-tuned G-MAP folder is an ordinary fine-tuned folder (the domain model
loads with transformers alone) plus ``gmap_config.json``, the gate weights
and, after ``--gmap-unfrozen``, ``gmap-general/``
(:meth:`greenadapt.modeling.gmap.model.GmapModel.save_pretrained`). ``predict`` and
``qa`` detect ``gmap_config.json`` and reload the fused model.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from greenadapt.artifacts.model_folder import position_limit
from greenadapt.artifacts.pretrained import ModelRef
from greenadapt.errors import ModelError
from greenadapt.modeling.gmap.config import CONFIG_FILE
from greenadapt.modeling.gmap.general_model import check_models, resolve_general_model, same_tokenizer

if TYPE_CHECKING:
    from greenadapt.modeling.gmap.settings import GmapSettings

log = logging.getLogger(__name__)

MEMORY_TOKENIZER_DIR = "gmap-tokenizer"  # the general model's tokenizer, when it is not T_LM


@dataclass
class GmapSetup:
    """Everything a run needs to fuse a general model into the domain model."""

    settings: GmapSettings  # the command's settings (finetune's, multitask's), as they are
    general: ModelRef
    tokenizer: Any | None  # the general model's own tokenizer when it differs from T_LM; None: T_LM
    max_length: int  # the general model's input limit (its position embeddings)
    cache_folder: Path | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "general_model": str(self.general.path),
            "general_tokenizer": "own" if self.tokenizer is not None else "T_LM",
        }


def is_gmap_folder(folder: str | Path) -> bool:
    return (Path(folder) / CONFIG_FILE).is_file()


def prepare(settings: GmapSettings, domain: ModelRef, t_lm: Any, *, cache_root: Path | None = None) -> GmapSetup | None:
    """Resolve and check the general model (before any data is read); None without ``--gmap``."""
    if not settings.fuses:
        return None
    general = resolve_general_model(settings, domain)
    check_models(settings.gmap_config(str(general.path)), domain, general)
    tokenizer = general_tokenizer(general.path, t_lm)
    config = general.config()
    max_length = position_limit(config)
    cache = cache_root / "gmap" if settings.gmap_cache and cache_root is not None else None
    log.info(
        "G-MAP %s with general model %s (%s tokenizer)",
        settings.gmap,
        general.path,
        "its own" if tokenizer is not None else "the T_LM",
    )
    return GmapSetup(settings, general, tokenizer, max_length, cache)


def general_tokenizer(folder: Path, t_lm: Any) -> Any | None:
    """The general model's tokenizer, or None when it is T_LM (or the folder has none: then T_LM is used)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:  # no tokenizer files, or ones transformers cannot read
        log.warning("%s: no usable tokenizer (%s); the general model reads the T_LM view", folder,
                    str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__)
        return None
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError("the general model's tokenizer has no fast (tokenizers) version", path=folder)
    return None if same_tokenizer(tokenizer, t_lm) else tokenizer


def attach_memory(units: Sequence[Any], examples: Sequence[Any], tokenizer: Any | None, max_length: int) -> None:
    """Give every unit the general model's input: its T_LM view, or its text under the general tokenizer."""
    from greenadapt.data.task_files import NerSentence
    from greenadapt.modeling.units import VIEW_GENERAL, shared_backend

    if tokenizer is None:
        for unit in units:
            unit.memory_ids, unit.memory_type_ids = unit.ids[VIEW_GENERAL], unit.type_ids[VIEW_GENERAL]
        return
    pretokenized = bool(units) and isinstance(examples[units[0].example], NerSentence)
    backend = shared_backend(tokenizer, words=pretokenized, max_length=max_length)  # inference: every batch
    inputs: list[Any] = []
    for unit in units:
        example = examples[unit.example]
        if pretokenized:
            inputs.append(list(example.words[unit.first_word : unit.first_word + unit.n_rows]))
        else:
            inputs.append((example.text, example.pair) if example.pair is not None else example.text)
    encodings = backend.encode_batch(inputs, is_pretokenized=pretokenized, add_special_tokens=True)
    for unit, encoding in zip(units, encodings, strict=True):
        unit.memory_ids = np.asarray(encoding.ids, dtype=np.int64)
        types = np.asarray(encoding.type_ids, dtype=np.int64)
        unit.memory_type_ids = types if types.any() else None


def build_model(domain_model: Any, setup: GmapSetup) -> Any:
    """The domain model fused with a freshly loaded general model (fp32; frozen unless ``--gmap-unfrozen``)."""
    import torch
    from transformers import AutoModel

    from greenadapt.artifacts.pretrained import quiet_transformers
    from greenadapt.modeling.gmap.model import GmapModel

    try:
        with quiet_transformers():
            general = AutoModel.from_pretrained(str(setup.general.path), dtype=torch.float32)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise ModelError(f"cannot load the general model: {type(exc).__name__}", path=setup.general.path) from None
    general.to(next(domain_model.parameters()).device)
    model = GmapModel(domain_model, general, setup.settings.gmap_config(str(setup.general.path)))
    if setup.cache_folder is not None:
        model.use_cache(setup.cache_folder)
    return model


def save(model: Any, folder: Path, setup: GmapSetup | None) -> None:
    """``GmapModel.save_pretrained`` (domain checkpoint + gates + gmap_config.json) and the general tokenizer if its own."""
    from greenadapt.artifacts.pretrained import quiet_transformers, save_tokenizer

    with quiet_transformers():
        model.save_pretrained(str(folder))
    if setup is not None and setup.tokenizer is not None:
        save_tokenizer(setup.tokenizer, folder / MEMORY_TOKENIZER_DIR)


def load_fused(folder: Path, *, general_model: str | None = None) -> tuple[Any, Any | None, int]:
    """A fine-tuned G-MAP folder: (GmapModel in eval mode, the general tokenizer or None for T_LM, its input limit)."""
    import torch

    from greenadapt.artifacts.pretrained import quiet_transformers
    from greenadapt.modeling.gmap.model import GmapModel

    with quiet_transformers():
        model = GmapModel.from_pretrained(folder, general_model, dtype=torch.float32)
    tokenizer = None
    if (folder / MEMORY_TOKENIZER_DIR).is_dir():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder / MEMORY_TOKENIZER_DIR))
    max_length = position_limit(model.general.config.to_dict())
    return model, tokenizer, max_length


__all__ = ["MEMORY_TOKENIZER_DIR", "GmapSetup", "attach_memory", "build_model", "is_gmap_folder", "load_fused", "prepare", "save"]
