"""The one reader of a model folder greenadapt trains or predicts with: ``ExpandedModel``.

An expanded folder (what ``greenadapt expand`` writes) holds the domain
tokenizer T̂ at its root and the base model's tokenizer T_LM in
``general-tokenizer/``; a plain transformers folder holds one tokenizer.
Every command that trains or predicts opens its model through
:meth:`ExpandedModel.open`, so they agree on:

- the tokenizers (:class:`TokenizerPair`: both, their shared special ids, and
  which ones a pooling mode runs);
- the vocabulary check (every id a tokenizer can produce has an embedding row);
- the longest input the model takes (position embeddings, the tokenizer's limit);
- the device (``--device``: auto = CUDA, then Apple MPS, then CPU).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.defaults import check_max_length
from greenadapt.errors import ModelError, UsageError

if TYPE_CHECKING:
    from greenadapt.models import ModelRef

log = logging.getLogger(__name__)

GENERAL_TOKENIZER_DIR = "general-tokenizer"
# A tokenizer limit this large means "not set" (transformers fills in VERY_LARGE_INTEGER).
_UNSET_MODEL_MAX_LENGTH = 100_000


@dataclass
class TokenizerPair:
    """T_LM and, when the model folder has one, T̂; plus the special ids both share."""

    general: Any
    domain: Any | None
    cls_id: int
    sep_id: int
    pad_id: int
    unk_id: int
    general_vocab_size: int

    @property
    def views(self) -> list[Any]:
        return [self.general] if self.domain is None else [self.general, self.domain]

    @property
    def has_domain(self) -> bool:
        return self.domain is not None

    def for_pool(self, pool: str) -> dict[str, Any]:
        """The tokenizers pooling mode ``pool`` runs, by name (``mean``: both)."""
        if pool == "mean" and self.domain is not None:
            return {"general": self.general, "domain": self.domain}
        if pool == "domain":
            return {"domain": self.domain}
        return {"general": self.general}


def load_tokenizers(folder: Path) -> TokenizerPair:
    """T̂ from the folder's root and T_LM from ``general-tokenizer/``, or the one tokenizer of a plain folder."""
    from greenadapt.models import load_wordpiece_tokenizer

    general_dir = folder / GENERAL_TOKENIZER_DIR
    if general_dir.is_dir():
        domain = load_wordpiece_tokenizer(folder)
        general = load_wordpiece_tokenizer(general_dir)
    else:
        domain = None
        general = load_wordpiece_tokenizer(folder)
    ids = {}
    for name in ("cls_token_id", "sep_token_id", "pad_token_id", "unk_token_id"):
        values = {getattr(tok, name) for tok in ([general] if domain is None else [general, domain])}
        if len(values) != 1 or None in values:
            raise ModelError(
                f"the tokenizers disagree on or lack {name.replace('_token_id', '').upper()} ({sorted(map(str, values))})",
                path=folder,
                hint="pass a BERT-style model folder; a domain tokenizer must extend the general one's vocabulary",
            )
        ids[name] = values.pop()
    return TokenizerPair(
        general=general,
        domain=domain,
        cls_id=ids["cls_token_id"],
        sep_id=ids["sep_token_id"],
        pad_id=ids["pad_token_id"],
        unk_id=ids["unk_token_id"],
        general_vocab_size=len(general),
    )


def check_vocab_fits(tokenizers: TokenizerPair, vocab_rows: int, folder: Path) -> None:
    """Every id a tokenizer can produce must have an embedding row."""
    for name, tok in zip(("general", "domain"), tokenizers.views, strict=False):
        if len(tok) > vocab_rows:
            raise ModelError(
                f"the {name} tokenizer has {len(tok)} entries but the model only {vocab_rows} embedding rows",
                path=folder,
                hint="the folder mixes a tokenizer and weights of different models; rerun `greenadapt expand`",
            )


def length_limit(config: dict[str, Any], tokenizer: Any) -> int:
    """The longest input the model takes: its position embeddings and its tokenizer's limit (512 when neither says)."""
    limits = [config.get("max_position_embeddings"), getattr(tokenizer, "model_max_length", None)]
    known = [value for value in limits if isinstance(value, int) and 0 < value < _UNSET_MODEL_MAX_LENGTH]
    return min(known) if known else 512


def pick_device(spec: str | None = "auto", local_rank: int = 0, *, allow_mps: bool = True) -> Any:
    """``--device``: auto (CUDA, then Apple MPS, then CPU), cpu, cuda, cuda:N, mps."""
    import torch

    spec = spec or "auto"
    if spec == "auto":
        if torch.cuda.is_available():
            spec = f"cuda:{local_rank}"
        elif allow_mps and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            spec = "mps"
        else:
            spec = "cpu"
    elif spec == "cuda":
        spec = f"cuda:{local_rank}"
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise UsageError(f"unknown --device {spec!r}", hint="auto, cpu, cuda, cuda:N or mps") from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise UsageError(f"unsupported --device {spec!r}", hint="auto, cpu, cuda, cuda:N or mps")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
        raise UsageError("--device mps but Apple's MPS backend is not available", hint="use --device cpu or auto")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError("--device cuda but no CUDA GPU is available", hint="use --device cpu or auto")
        visible = torch.cuda.device_count()
        if device.index is not None and device.index >= visible:
            # torchrun gives process N the GPU N: more processes than GPUs would fail deep in CUDA, and NCCL
            # refuses two ranks on one GPU anyway.
            raise UsageError(
                f"this process would run on {device}, but only {visible} CUDA GPU(s) are visible",
                hint="start at most one process per GPU (torchrun --nproc_per_node), or pick --device cuda:N with N below that",
            )
        torch.cuda.set_device(device)
    return device


@dataclass
class ExpandedModel:
    """A model folder (expanded or plain) as every training and prediction command reads it."""

    ref: ModelRef
    tokenizers: TokenizerPair

    @classmethod
    def open(cls, spec: ModelRef | str | os.PathLike[str] | None) -> ExpandedModel:
        """Resolve ``--model`` (a folder, a Hub id or the bundled default) and read its tokenizers."""
        from greenadapt.models import ModelRef, resolve_model

        ref = spec if isinstance(spec, ModelRef) else resolve_model(None if spec is None else str(spec))
        return cls(ref, load_tokenizers(ref.path))

    @property
    def path(self) -> Path:
        return Path(self.ref.path)

    @cached_property
    def config(self) -> dict[str, Any]:
        return self.ref.config()

    @property
    def length_limit(self) -> int:
        return length_limit(self.config, self.tokenizers.general)

    def capped_length(self, requested: int) -> int:
        """``requested`` (``--max-length``), or the model's limit when that is shorter (with a warning)."""
        limit = self.length_limit
        if limit < requested:
            log.warning("--max-length %d is more than the model handles; using %d", requested, limit)
        return min(requested, limit)

    def checked_length(self, requested: int | None) -> int:
        """``requested`` if the model takes it (refused in one line otherwise); ``None``: the model's limit."""
        if requested is None:
            return self.length_limit
        check_max_length(requested)
        positions = self.config.get("max_position_embeddings")
        if isinstance(positions, int) and requested > positions:
            raise UsageError(f"--max-length {requested} exceeds the model's {positions} position embeddings", hint=f"use at most {positions}")
        return requested

    def check_rows(self, embedding_rows: int) -> None:
        check_vocab_fits(self.tokenizers, embedding_rows, self.path)
