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
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.defaults import check_max_length
from greenadapt.errors import ModelError, UsageError

if TYPE_CHECKING:
    from greenadapt.artifacts.pretrained import ModelRef

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

    def save(self, folder: Path, *, domain: bool = True) -> None:
        """The tokenizers as a model folder keeps them (every runner writes them so): with a domain tokenizer (and
        ``domain``), it at the folder's top and the general one in ``general-tokenizer/``; else the general one at the top."""
        from greenadapt.artifacts.pretrained import save_tokenizer

        saved = {folder: self.general}
        if domain and self.domain is not None:
            saved = {folder: self.domain, folder / GENERAL_TOKENIZER_DIR: self.general}
        for place, tokenizer in saved.items():
            save_tokenizer(tokenizer, place)

    def for_pool(self, pool: str) -> dict[str, Any]:
        """The tokenizers pooling mode ``pool`` runs, by name (``mean``: both)."""
        if pool == "mean" and self.domain is not None:
            return {"general": self.general, "domain": self.domain}
        if pool == "domain":
            return {"domain": self.domain}
        return {"general": self.general}


def load_tokenizers(folder: Path, *, inference: bool = False) -> TokenizerPair:
    """T̂ from the folder's root and T_LM from ``general-tokenizer/``, or the one tokenizer of a plain folder.
    ``inference``: each read from its files where they say all inference needs (:mod:`~greenadapt.artifacts.saved_tokenizer`:
    no transformers), else transformers' tokenizer, which training needs (it saves and extends them)."""
    from greenadapt.artifacts.pretrained import load_fast_tokenizer
    from greenadapt.artifacts.saved_tokenizer import read_saved_tokenizer

    def load(path: Path) -> Any:
        saved = read_saved_tokenizer(path) if inference else None
        return saved if saved is not None else load_fast_tokenizer(path)

    general_dir = folder / GENERAL_TOKENIZER_DIR
    if general_dir.is_dir():
        domain = load(folder)
        general = load(general_dir)
    else:
        domain = None
        general = load(folder)
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


def position_limit(config: Mapping[str, Any]) -> int:
    """The longest input a model's position embeddings take (512 when its config does not say)."""
    positions = config.get("max_position_embeddings")
    limit = positions if isinstance(positions, int) and 0 < positions < _UNSET_MODEL_MAX_LENGTH else 512
    if config.get("model_type") in ("roberta", "xlm-roberta"):
        limit -= 2  # RoBERTa's positions start after the padding index
    return limit


def length_limit(config: Mapping[str, Any], tokenizer: Any) -> int:
    """The longest input the model takes: its position embeddings and its tokenizer's limit."""
    limit = getattr(tokenizer, "model_max_length", None)
    tokenizer_limit = limit if isinstance(limit, int) and 0 < limit < _UNSET_MODEL_MAX_LENGTH else None
    return min(position_limit(config), tokenizer_limit) if tokenizer_limit else position_limit(config)


@dataclass
class ExpandedModel:
    """A model folder (expanded or plain) as every training and prediction command reads it."""

    ref: ModelRef
    tokenizers: TokenizerPair

    @classmethod
    def open(cls, spec: ModelRef | str | os.PathLike[str] | None, *, inference: bool = False) -> ExpandedModel:
        """Resolve ``--model`` (a folder, a Hub id or the bundled default) and read its tokenizers (:func:`load_tokenizers`)."""
        from greenadapt.artifacts.pretrained import ModelRef, resolve_model

        ref = spec if isinstance(spec, ModelRef) else resolve_model(None if spec is None else str(spec))
        return cls(ref, load_tokenizers(ref.path, inference=inference))

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
            raise UsageError(f"--max-length {requested} exceeds the model's {positions} position embeddings",
                             hint=f"use at most {positions}")
        return requested

    def check_rows(self, embedding_rows: int) -> None:
        check_vocab_fits(self.tokenizers, embedding_rows, self.path)
