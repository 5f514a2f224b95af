"""Memory-attention: a layer's own self-attention, with a memory appended to its keys and values.

:class:`MemoryAttention` replaces the self-attention module of a BERT-style
layer (``layer.attention.self``). It adopts that module's ``query``, ``key``,
``value`` and ``dropout`` submodules under the same names, so the layer's
state-dict keys do not change and no parameter is added or copied. With no
memory set it calls the original module, so an unfused forward pass runs
transformers' own code, whatever the release and attention implementation.
With a memory M (batch, M positions, hidden) and its padding mask it computes

    softmax(Q Kᵀ·s ⊕ mask) V  with  K = [K_own; key(M)],  V = [V_own; value(M)]

where Q comes from the domain hidden states only. Padded memory positions
are excluded by a boolean mask, so their attention weight is exactly zero
(the reference code multiplied two additive masks and never masked them).

The computation is the standard scaled dot-product attention, not a copy of
any transformers layer: it relies only on the attributes every BERT-style
self-attention has had across releases (``query``/``key``/``value`` Linear
modules, ``num_attention_heads``, ``attention_head_size``), and on the
layer passing ``attention_mask`` as a 2-D padding mask, a 4-D boolean mask
or a 4-D additive float mask (eager, sdpa and flash attention's forms).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from greenadapt.errors import ModelError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GeneralMemory:
    """The general hidden states a batch's fused layers read.

    ``states[i]`` is general state ``state_indices[i]`` (0 = embedding
    output), shape (batch, memory length, hidden); ``mask`` (batch, memory
    length) is True at real, False at padded positions.
    """

    states: torch.Tensor
    mask: torch.Tensor
    state_indices: tuple[int, ...]

    def slots(self, indices: tuple[int, ...]) -> list[int]:
        position = {s: i for i, s in enumerate(self.state_indices)}
        missing = [s for s in indices if s not in position]
        if missing:
            raise ValueError(f"the memory holds general states {list(self.state_indices)}, not {missing}")
        return [position[s] for s in indices]


_ADOPTED = ("query", "key", "value")


class MemoryAttention(nn.Module):
    """Drop-in replacement of a BERT-style self-attention module that can attend to a memory."""

    original: Any  # the transformers module, set unregistered (see __init__)

    def __init__(self, original: Any, *, name: str = "") -> None:
        super().__init__()
        _check_adoptable(original, name)
        self.query: nn.Linear = original.query
        self.key: nn.Linear = original.key
        self.value: nn.Linear = original.value
        self.dropout: nn.Module = getattr(original, "dropout", nn.Dropout(0.0))
        self.num_heads = int(original.num_attention_heads)
        self.head_size = int(original.attention_head_size)
        self.scaling = float(getattr(original, "scaling", self.head_size**-0.5))
        # Not registered as a submodule: its parameters are the adopted ones,
        # and registering it would add a second set of state-dict keys.
        object.__setattr__(self, "original", original)
        self.name = name
        self.memory: torch.Tensor | None = None  # (batch, M, hidden), set per forward pass by GmapModel
        self.memory_mask: torch.Tensor | None = None  # (batch, M) bool, True = attend

    def train(self, mode: bool = True) -> MemoryAttention:
        # The original module is unregistered, so Module.train would not
        # reach it, and its forward reads its own ``training`` for dropout.
        super().train(mode)
        self.original.train(mode)
        return self

    def set_memory(self, memory: torch.Tensor | None, mask: torch.Tensor | None = None) -> None:
        """Attend to ``memory`` from now on (None: behave as the original module)."""
        if memory is not None:
            if memory.dim() != 3:
                raise ValueError(f"memory must be (batch, length, hidden), got shape {tuple(memory.shape)}")
            if mask is None:
                mask = torch.ones(memory.shape[:2], dtype=torch.bool, device=memory.device)
            if tuple(mask.shape) != tuple(memory.shape[:2]):
                raise ValueError(f"memory mask shape {tuple(mask.shape)} does not match memory {tuple(memory.shape)}")
            mask = mask.bool()
        self.memory, self.memory_mask = memory, (mask if memory is not None else None)

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if self.memory is None:
            return self.original(hidden_states, *args, **kwargs)
        attention_mask = kwargs.get("attention_mask", args[0] if args else None)
        if kwargs.get("past_key_values") is not None or kwargs.get("encoder_hidden_states") is not None:
            raise ModelError(
                f"G-MAP memory-attention in {self.name or 'a layer'} got a key/value cache or encoder states",
                hint="G-MAP fuses into bidirectional encoders (BERT, RoBERTa), not decoders",
            )
        return self.attend(hidden_states, attention_mask, self.memory, self.memory_mask)

    def attend(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Any,
        memory: torch.Tensor,
        memory_mask: torch.Tensor | None,
        *,
        return_weights: bool | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(context, attention weights or None): attention over [own positions; memory positions].

        Weights are computed explicitly (and returned) under the eager
        implementation or when ``return_weights``; otherwise PyTorch's fused
        scaled-dot-product attention does the work.
        """
        batch, length = hidden_states.shape[:2]
        if memory.shape[0] != batch:
            raise ValueError(f"memory batch {memory.shape[0]} differs from the domain batch {batch}")
        if memory_mask is None:
            memory_mask = torch.ones(memory.shape[:2], dtype=torch.bool, device=memory.device)
        memory_mask = memory_mask.to(hidden_states.device, torch.bool)
        memory = memory.to(hidden_states.device, hidden_states.dtype)
        # Zero weight is not enough on its own: 0 × NaN is NaN, and a padded
        # memory row may be garbage (a fully masked general input gives NaN
        # under some attention kernels).
        memory = memory.masked_fill(~memory_mask[..., None], 0.0)

        def heads(x: torch.Tensor) -> torch.Tensor:
            return x.view(batch, x.shape[1], self.num_heads, self.head_size).transpose(1, 2)

        query = heads(self.query(hidden_states))
        key = torch.cat([heads(self.key(hidden_states)), heads(self.key(memory))], dim=2)
        value = torch.cat([heads(self.value(hidden_states)), heads(self.value(memory))], dim=2)
        own = own_key_mask(attention_mask, batch, length, device=hidden_states.device)
        from_memory = memory_mask[:, None, None, :].expand(batch, own.shape[1], own.shape[2], memory.shape[1])
        allowed = torch.cat([own, from_memory], dim=-1)
        dropout = self.dropout.p if self.training and isinstance(self.dropout, nn.Dropout) else 0.0
        if return_weights is None:
            config = getattr(self.original, "config", None)
            return_weights = getattr(config, "_attn_implementation", None) == "eager"
        if return_weights:
            scores = torch.matmul(query, key.transpose(-1, -2)) * self.scaling
            # masked_fill, not an additive mask: the masked logit is the
            # lowest float whatever the score, so exp() underflows to exactly 0.
            scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
            weights = torch.softmax(scores, dim=-1)
            context = torch.matmul(nn.functional.dropout(weights, p=dropout, training=self.training), value)
        else:
            weights = None
            context = nn.functional.scaled_dot_product_attention(
                query, key, value, attn_mask=allowed, dropout_p=dropout, scale=self.scaling
            )
        context = context.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_size)
        return context, weights


def own_key_mask(attention_mask: Any, batch: int, length: int, *, device: torch.device) -> torch.Tensor:
    """The layer's own attention mask as bool (batch, heads, rows, length), True = attend; heads and rows may be 1.

    Additive float masks (0 = attend, a large negative value = masked) are
    read as binary, which is what BERT-style padding masks are.
    """
    if attention_mask is None:
        return torch.ones(batch, 1, 1, length, dtype=torch.bool, device=device)
    if not isinstance(attention_mask, torch.Tensor):
        raise ModelError(
            f"G-MAP cannot read an attention mask of type {type(attention_mask).__name__}",
            hint='load the domain model with attn_implementation="sdpa" or "eager"',
        )
    mask = attention_mask.to(device)
    if mask.dim() == 2:
        mask = mask[:, None, None, :]
    if mask.dim() != 4 or mask.shape[-1] != length:
        raise ModelError(f"G-MAP cannot read an attention mask of shape {tuple(attention_mask.shape)}")
    if mask.dtype == torch.bool:
        allowed = mask
    elif mask.is_floating_point():
        allowed = mask > torch.finfo(mask.dtype).min / 2
    else:
        allowed = mask != 0
    return allowed.expand(batch, allowed.shape[1], allowed.shape[2], length)


def _check_adoptable(module: nn.Module, name: str) -> None:
    where = name or type(module).__name__
    for attr in (*_ADOPTED, "num_attention_heads", "attention_head_size"):
        if not hasattr(module, attr):
            raise ModelError(
                f"{where} ({type(module).__name__}) is not a BERT-style self-attention: it has no {attr!r}",
                hint="G-MAP supports BERT-style encoders (BERT, RoBERTa, ELECTRA, XLM-R)",
            )
    for attr in _ADOPTED:
        if not isinstance(getattr(module, attr), nn.Linear):
            raise ModelError(f"{where}.{attr} is not a Linear layer", hint="G-MAP supports BERT-style encoders")
    # Parameters beyond query/key/value (relative position embeddings, say)
    # would change the attention in ways this wrapper does not reproduce.
    others = sorted(n for n, _ in module.named_parameters() if n.split(".")[0] not in _ADOPTED)
    if others:
        raise ModelError(
            f"{where} has attention parameters G-MAP does not handle: {', '.join(others[:4])}",
            hint="use a model with absolute position embeddings",
        )


def wrap_layer(layer: Any, *, name: str = "") -> MemoryAttention:
    """Replace ``layer.attention.self`` by a :class:`MemoryAttention` around it (idempotent)."""
    attention: Any = getattr(layer, "attention", None)
    current = getattr(attention, "self", None)
    if current is None:
        raise ModelError(
            f"{name or type(layer).__name__} has no attention.self module",
            hint="G-MAP supports BERT-style encoders (BERT, RoBERTa, ELECTRA, XLM-R)",
        )
    if isinstance(current, MemoryAttention):
        return current
    wrapper = MemoryAttention(current, name=name)
    attention.self = wrapper
    return wrapper


def unwrap_layer(layer: Any) -> None:
    """Put the original self-attention module back."""
    current = layer.attention.self
    if isinstance(current, MemoryAttention):
        layer.attention.self = current.original


__all__ = ["MemoryAttention", "own_key_mask", "unwrap_layer", "wrap_layer"]
