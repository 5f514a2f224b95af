"""Opening a question-answering model folder: weights, QA head check, one or two tokenizers.

An expanded folder (``greenadapt expand``) has the domain tokenizer T̂ at
its top and the general tokenizer T_LM in ``general-tokenizer/``; a plain
transformers folder has only T_LM at its top.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenadapt.domain_tokenizer import GENERAL_TOKENIZER_DIR
from greenadapt.errors import ModelError, UsageError
from greenadapt.models import ModelRef, load_wordpiece_tokenizer, quiet_transformers

log = logging.getLogger(__name__)

POOLS = ("mean", "general", "domain")
_NO_HEAD_HINT = (
    "fine-tune it on SQuAD first (`greenadapt finetune --task qa --train train-v1.1.json`) "
    "or start from a SQuAD model; `greenadapt expand` keeps a QA head when its input has one"
)
# transformers models cap the usable length below absurd tokenizer defaults.
_UNSET_MODEL_MAX_LENGTH = 100_000


@dataclass(frozen=True)
class QaTokenizers:
    general: Any  # transformers fast tokenizer (T_LM)
    domain: Any | None  # T̂ of an expanded folder, else None

    def for_pool(self, pool: str) -> dict[str, Any]:
        """The tokenizers ``pool`` runs, by name."""
        if pool == "mean":
            return {"general": self.general, "domain": self.domain}
        return {pool: self.general if pool == "general" else self.domain}


def load_tokenizers(path: Path) -> QaTokenizers:
    top = load_wordpiece_tokenizer(path)
    general_dir = path / GENERAL_TOKENIZER_DIR
    if general_dir.is_dir():
        tokenizers = QaTokenizers(general=load_wordpiece_tokenizer(general_dir), domain=top)
    else:
        tokenizers = QaTokenizers(general=top, domain=None)
    for tokenizer in (tokenizers.general, tokenizers.domain):
        if tokenizer is not None and (tokenizer.cls_token_id is None or tokenizer.sep_token_id is None):
            raise ModelError(
                "a tokenizer of this model has no [CLS] or [SEP] token, which question answering inputs need",
                path=path,
                hint="pass a BERT-style model folder",
            )
    return tokenizers


def resolve_pool(pool: str | None, tokenizers: QaTokenizers, path: Path) -> str:
    """``None`` means mean for an expanded model, general for a plain one."""
    if pool is None:
        return "mean" if tokenizers.domain is not None else "general"
    if pool not in POOLS:
        raise UsageError(f"unknown --pool {pool!r}", hint="use mean, general or domain")
    if pool != "general" and tokenizers.domain is None:
        raise UsageError(
            f"--pool {pool} needs a domain tokenizer, but this model has only one (no {GENERAL_TOKENIZER_DIR}/ folder)",
            path=path,
            hint="use --pool general, or pass a model folder written by `greenadapt expand`",
        )
    return pool


def check_qa_head(path: Path, config: dict[str, Any]) -> None:
    """Fail early, before loading weights, when the checkpoint has no QA head."""
    architectures = config.get("architectures") or []
    if architectures and not any(str(name).endswith("ForQuestionAnswering") for name in architectures):
        raise ModelError(
            f"the model has no question-answering head (architectures: {', '.join(map(str, architectures))})",
            path=path,
            hint=_NO_HEAD_HINT,
        )
    keys = _checkpoint_keys(path)
    if keys is not None and not any("qa_outputs" in key for key in keys):
        raise ModelError("the checkpoint has no question-answering head (no qa_outputs weights)", path=path, hint=_NO_HEAD_HINT)


def _checkpoint_keys(path: Path) -> list[str] | None:
    """Tensor names in the safetensors checkpoint, or None when they cannot be listed cheaply."""
    import json

    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            return list(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}))
        except (OSError, ValueError):
            return None
    single = path / "model.safetensors"
    if not single.is_file():
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(single), framework="np") as handle:
            return list(handle.keys())
    except Exception as exc:  # a corrupt file is reported by the real load with its reason
        log.debug("cannot list %s: %s", single, exc)
        return None


def load_qa_model(ref: ModelRef, device: Any) -> Any:
    """``AutoModelForQuestionAnswering`` in eval mode on ``device``, in float32 (autocast does the rest)."""
    import torch
    from transformers import AutoModelForQuestionAnswering

    check_qa_head(ref.path, ref.config())
    try:
        with quiet_transformers():
            model, info = AutoModelForQuestionAnswering.from_pretrained(
                str(ref.path), dtype=torch.float32, output_loading_info=True
            )
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise ModelError(
            f"cannot load the model as a question-answering model: {type(exc).__name__}: {first}",
            path=ref.path,
            hint="pass a transformers model folder with a question-answering head",
        ) from None
    prefix = getattr(model, "base_model_prefix", "")
    head_missing = [key for key in info.get("missing_keys", ()) if not (prefix and key.startswith(prefix + "."))]
    if head_missing:
        raise ModelError(
            f"the checkpoint has no trained question-answering head (missing {', '.join(sorted(head_missing)[:4])})",
            path=ref.path,
            hint=_NO_HEAD_HINT,
        )
    missing = list(info.get("missing_keys", ()))
    if missing:
        log.warning("%s: %d encoder weights missing from the checkpoint, randomly initialised: %s", ref.path, len(missing), ", ".join(sorted(missing)[:5]))
    model.eval()
    return model.to(device)


def check_vocabulary(model: Any, tokenizers: QaTokenizers, path: Path) -> None:
    """Every id a tokenizer can produce must have an embedding row."""
    rows = model.get_input_embeddings().num_embeddings
    for name, tokenizer in (("general", tokenizers.general), ("domain", tokenizers.domain)):
        if tokenizer is not None and len(tokenizer) > rows:
            raise ModelError(
                f"the {name} tokenizer has {len(tokenizer)} entries but the model only {rows} embedding rows",
                path=path,
                hint="the folder mixes a tokenizer and weights of different models; rerun `greenadapt expand`",
            )


def default_max_length(config: dict[str, Any], tokenizer: Any) -> int:
    positions = config.get("max_position_embeddings")
    limits = [value for value in (positions, getattr(tokenizer, "model_max_length", None)) if isinstance(value, int)]
    limits = [value for value in limits if 0 < value < _UNSET_MODEL_MAX_LENGTH]
    return min(limits) if limits else 512


def resolve_max_length(requested: int | None, config: dict[str, Any], tokenizer: Any) -> int:
    positions = config.get("max_position_embeddings")
    if requested is None:
        return default_max_length(config, tokenizer)
    if requested < 8:
        raise UsageError(f"--max-length {requested} is too short", hint="use at least 8 (BERT models: 384 or 512)")
    if isinstance(positions, int) and requested > positions:
        raise UsageError(
            f"--max-length {requested} exceeds the model's {positions} position embeddings",
            hint=f"use at most {positions}",
        )
    return requested


def resolve_device(spec: str | None) -> Any:
    import torch

    if spec in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError):
        raise UsageError(f"unknown --device {spec!r}", hint="use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda but no CUDA GPU is available", hint="use --device cpu or auto")
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"unsupported --device {spec!r}", hint="use auto, cpu, cuda or cuda:N")
    return device
