"""A question-answering model's weights and head, and which tokenizers a pooling mode runs.

The folder itself (tokenizers, vocabulary check, length limit, device) is
read by :mod:`greenadapt.artifacts.model_folder`, as for every other command.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR, TokenizerPair
from greenadapt.artifacts.pretrained import ModelRef, quiet_transformers
from greenadapt.errors import ModelError, UsageError

log = logging.getLogger(__name__)

POOLS = ("mean", "general", "domain")
_NO_HEAD_HINT = (
    "fine-tune it on SQuAD first (`greenadapt finetune --task qa --train train-v1.1.json`) "
    "or start from a SQuAD model; `greenadapt expand` keeps a QA head when its input has one"
)


def resolve_pool(pool: str | None, tokenizers: TokenizerPair, path: Path) -> str:
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


# transformers' name for the span head where it is not BERT's ``qa_outputs``
_QA_HEAD_NAMES = {"modernbert": "classifier"}


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
    head = _QA_HEAD_NAMES.get(str(config.get("model_type")), "qa_outputs")
    if keys is not None and not any(key.startswith(f"{head}.") or f".{head}." in key for key in keys):
        raise ModelError(f"the checkpoint has no question-answering head (no {head} weights)", path=path, hint=_NO_HEAD_HINT)


def _checkpoint_keys(path: Path) -> list[str] | None:
    """Tensor names in the safetensors checkpoint, or None when they cannot be listed cheaply."""
    import json

    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
        except (OSError, ValueError, AttributeError):
            return None
        return list(weight_map) if isinstance(weight_map, dict) else None
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
        log.warning("%s: %d encoder weights missing from the checkpoint, randomly initialised: %s", ref.path, len(missing),
                    ", ".join(sorted(missing)[:5]))
    model.eval()
    return model.to(device)
