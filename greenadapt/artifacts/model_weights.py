"""A model folder's weights, read without building the model: which files hold them, each tensor as stored, the
checks that refuse weights transformers would fail on or silently ignore, and the input embedding matrix.

One reader for every part of greenadapt that opens a model's weights (adaptation, fine-tuning, prediction): it
sits here, below them all, so that prediction does not depend on the adaptation stages.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.errors import ModelError

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.artifacts.raw_tensors import RawTensor

log = logging.getLogger(__name__)

EMBEDDING_SUFFIXES = ("word_embeddings.weight", "tok_embeddings.weight")  # BERT/RoBERTa/DeBERTa; ModernBERT


def weight_libraries(model_path: Path) -> tuple[str, ...]:
    """The libraries beside safetensors that reading ``model_path``'s weights takes, for a manifest: torch for a
    pickled ``.bin``, torch and transformers for a layout only transformers reads, none for safetensors."""
    kind, _ = checkpoint_files(model_path)
    return () if kind == "safetensors" else ("torch",) if kind == "bin" else ("torch", "transformers")


def checkpoint_files(model_path: Path) -> tuple[str, list[Path]]:
    """The weight files of a model folder: ``("safetensors"|"bin", files)``; ``("", [])`` if none we read."""
    for kind, single, index in (
        ("safetensors", "model.safetensors", "model.safetensors.index.json"),
        ("bin", "pytorch_model.bin", "pytorch_model.bin.index.json"),
    ):
        if (model_path / single).is_file():
            return kind, [model_path / single]
        if (model_path / index).is_file():
            try:
                weight_map = json.loads((model_path / index).read_text(encoding="utf-8"))["weight_map"]
                shards = sorted(set(weight_map.values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ModelError(f"unreadable shard index: {exc}", path=model_path / index) from None
            missing = [s for s in shards if not (model_path / s).is_file()]
            if missing:
                raise ModelError(f"shard {missing[0]} named by the index is missing", path=model_path / index)
            return kind, [model_path / s for s in shards]
    return "", []


def iter_state_dict(model_path: Path) -> Iterator[tuple[str, RawTensor]]:
    """Yield ``(name, RawTensor)`` for every tensor of the checkpoint, shard by shard (torch only for a ``.bin``)."""
    from greenadapt.artifacts.raw_tensors import read_pickled, read_safetensors

    kind, files = checkpoint_files(model_path)
    if not files:
        raise ModelError(
            "no model.safetensors or pytorch_model.bin (single or sharded) in the model folder",
            path=model_path,
            hint="save the model with save_pretrained (PyTorch weights)",
        )
    for file in files:
        yield from read_safetensors(file) if kind == "safetensors" else read_pickled(file)


def check_weights_load_safely(model_path: Path) -> None:
    """Refuse, as ``align`` does, weights transformers would fail on, before it meets them: one line, exit 3.

    Pickled weights that ``weights_only`` loading rejects (transformers would relay
    torch's advice to turn the safety off), and safetensors files whose header is
    damaged or promises more bytes than the file holds (a truncated download or copy;
    transformers would raise ``SafetensorError``). Only headers are read.

    The model's config and weight names are checked too (:func:`greenadapt.artifacts.pretrained.check_encoder_config`):
    transformers loads a model whose weights it cannot match (a ``module.`` prefix of a DistributedDataParallel
    save) or whose type is no encoder without complaint, from freshly initialised weights.
    """
    from greenadapt.artifacts.pretrained import check_encoder_config

    check_encoder_config(model_path)
    kind, files = checkpoint_files(model_path)
    names: list[str] = []
    if kind == "safetensors":
        from safetensors import SafetensorError, safe_open

        for file in files:
            try:
                with safe_open(str(file), framework="numpy") as reader:  # only the header is read: no torch
                    names += list(reader.keys())
            except (SafetensorError, OSError) as exc:
                raise ModelError(
                    f"unreadable safetensors file: {' '.join(str(exc).split())[:160]}",
                    path=file,
                    hint="the file is damaged or truncated: copy or download it again",
                ) from None
    elif kind:
        names = [name for name, _ in iter_state_dict(model_path)]
    else:
        raise ModelError("no model.safetensors or pytorch_model.bin (single or sharded) in the model folder", path=model_path,
                         hint="save the model with save_pretrained (PyTorch weights)")
    if names and all(name.startswith("module.") for name in names):
        raise ModelError(
            "every weight's name starts with 'module.' (a DistributedDataParallel wrapper was saved), so transformers "
            "would match none of them and train from random weights",
            path=files[0],
            hint="save the unwrapped model (model.module.save_pretrained), or strip the 'module.' prefix from the names",
        )


def pick_embedding_key(names: Sequence[str], path: Path) -> str:
    """The input word-embedding tensor among ``names`` (the shortest, i.e. outermost, if several)."""
    keys = sorted((n for n in names if n.endswith(EMBEDDING_SUFFIXES)), key=lambda n: (len(n), n))
    if not keys:
        raise ModelError(
            f"no input word-embedding tensor ('*{EMBEDDING_SUFFIXES[0]}' or '*{EMBEDDING_SUFFIXES[1]}') in the checkpoint",
            path=path,
            hint="greenadapt adapts encoders of the BERT, RoBERTa, ModernBERT and DeBERTa families",
        )
    if len(keys) > 1:
        log.info("several word-embedding tensors (%s); aligning to %s", ", ".join(keys), keys[0])
    return keys[0]


def read_input_embeddings(model_path: Path) -> np.ndarray:
    """The model's input word-embedding matrix as ``float32`` (V, d), without building the model."""
    import numpy as np

    kind, _ = checkpoint_files(model_path)
    if not kind:
        return np.ascontiguousarray(_embeddings_via_transformers(model_path).detach().float().numpy(), dtype=np.float32)
    state = dict(iter_state_dict(model_path))  # safetensors are memory-mapped: only the embedding's bytes are read
    return np.ascontiguousarray(state[pick_embedding_key(list(state), model_path)].to_float32(), dtype=np.float32)


def _embeddings_via_transformers(model_path: Path) -> Any:
    from transformers import AutoModel

    log.info("no safetensors/bin checkpoint in %s; loading the model with transformers", model_path)
    try:
        model = AutoModel.from_pretrained(str(model_path))
    except Exception as exc:  # whatever transformers raised: the one line names its kind
        raise ModelError(f"cannot load the model's weights: {type(exc).__name__}", path=model_path,
                         hint="the folder needs model.safetensors or pytorch_model.bin") from None
    return model.get_input_embeddings().weight


def weights_digest(folder: Path) -> str:
    """The SHA-256 of ``folder``'s weights and config (each file's digest, by name): what an ONNX export of the folder
    is made from (its cache key), and what compare.json's provenance records of each model."""
    import hashlib

    from greenadapt.artifacts.files import sha256_file

    digest = hashlib.sha256()
    weights = [p for p in folder.iterdir() if p.is_file() and (p.suffix in (".safetensors", ".bin") or p.name == "config.json")]
    for name in sorted(p.name for p in weights):
        digest.update(f"{name}\n{sha256_file(folder / name)}\n".encode())
    return digest.hexdigest()
