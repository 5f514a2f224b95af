"""The per-task adapter modules and the wrapper that adds them in parallel with each layer.

Placement (the reference code's, see docs/design.md "PALs"): with ``h`` the
input of a transformer layer and ``a = LN(h + SA(h))`` its attention block's
output, the layer returns

    LN(FFN(a) + a + TS(h))

instead of ``LN(FFN(a) + a)``. :class:`PalOutput` replaces the layer's output
block (``layer.output``: dense, dropout, LayerNorm) and adopts those three
submodules under the same names, so the encoder's state-dict keys do not
change and no transformers code is copied: it calls the original block with
``input_tensor + TS(h)``. ``h`` and the layer's attention mask reach it
through a forward pre-hook on the layer (:func:`wrap_layer`). With no task
active, or an adapter whose decoder is zero, the layer computes exactly what
it computed before.

The attention mask a layer receives may be 2-D, 4-D boolean or 4-D additive
(eager, sdpa); :func:`greenadapt.modeling.gmap.layer.own_key_mask` reads all of them.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from greenadapt.errors import ModelError
from greenadapt.modeling.gmap.layer import own_key_mask
from greenadapt.modeling.pals.config import PalsConfig

_ADOPTED = ("dense", "dropout", "LayerNorm")


def _init_linear(linear: nn.Linear, std: float) -> nn.Linear:
    nn.init.normal_(linear.weight, mean=0.0, std=std)
    nn.init.zeros_(linear.bias)
    return linear


class SmallAttention(nn.Module):
    """Multi-head self-attention in the s-dimensional PAL space; no output projection."""

    def __init__(self, size: int, heads: int, std: float) -> None:
        super().__init__()
        self.heads, self.head_size = heads, size // heads
        self.query = _init_linear(nn.Linear(size, size), std)
        self.key = _init_linear(nn.Linear(size, size), std)
        self.value = _init_linear(nn.Linear(size, size), std)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        batch, length, size = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, length, self.heads, self.head_size).transpose(1, 2)

        context = nn.functional.scaled_dot_product_attention(
            split(self.query(x)), split(self.key(x)), split(self.value(x)), attn_mask=allowed, scale=1 / math.sqrt(self.head_size)
        )
        return context.transpose(1, 2).reshape(batch, length, size)


class PalAdapter(nn.Module):
    """One task's PALs: V_E and V_D shared across layers, a small attention per layer."""

    def __init__(self, config: PalsConfig, hidden: int, layers: int, std: float = 0.02) -> None:
        super().__init__()
        self.encoder = _init_linear(nn.Linear(hidden, config.size), std)  # V_E
        self.decoder = _init_linear(nn.Linear(config.size, hidden), std)  # V_D
        self.attention = nn.ModuleList(SmallAttention(config.size, config.heads, std) for _ in range(layers))

    def delta(self, layer: int, hidden_states: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        small = self.attention[layer](self.encoder(hidden_states), allowed)
        return nn.functional.gelu(self.decoder(small))


class LowRankAdapter(nn.Module):
    """The paper's low-rank layers: V_D · GELU(V_E · h), their own V_E and V_D in every layer."""

    def __init__(self, config: PalsConfig, hidden: int, layers: int, std: float = 0.02) -> None:
        super().__init__()
        self.encoder = nn.ModuleList(_init_linear(nn.Linear(hidden, config.size), std) for _ in range(layers))
        self.decoder = nn.ModuleList(_init_linear(nn.Linear(config.size, hidden), std) for _ in range(layers))

    def delta(self, layer: int, hidden_states: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        return self.decoder[layer](nn.functional.gelu(self.encoder[layer](hidden_states)))


def build_adapter(config: PalsConfig, hidden: int, layers: int, std: float = 0.02) -> nn.Module | None:
    if config.adapter == "pals":
        return PalAdapter(config, hidden, layers, std)
    if config.adapter == "low-rank":
        return LowRankAdapter(config, hidden, layers, std)
    return None


def zero_decoder(adapter: Any) -> None:
    """Set V_D (weights and biases) to zero: the adapter then adds nothing."""
    decoders: list[Any] = list(adapter.decoder) if isinstance(adapter.decoder, nn.ModuleList) else [adapter.decoder]
    with torch.no_grad():
        for decoder in decoders:
            decoder.weight.zero_()
            decoder.bias.zero_()


class _TaskTerm(nn.Module):
    """What both wrappers share: the wrapped block (unregistered: its parameters are adopted ones), the active
    task's adapter, and the layer input and mask the pre-hook leaves for one forward."""

    # Set with object.__setattr__ (unregistered), so typed here: a transformers block and an adapter.
    original: Any
    adapter: Any
    _hook: Any

    def _start(self, original: Any, index: int, name: str) -> None:
        object.__setattr__(self, "original", original)
        self.index = index
        self.name = name
        object.__setattr__(self, "adapter", None)  # the active task's adapter (owned by MultiTaskModel)
        self.layer_input: torch.Tensor | None = None
        self.layer_mask: Any = None

    def train(self, mode: bool = True) -> _TaskTerm:
        super().train(mode)
        self.original.train(mode)
        return self

    def set_adapter(self, adapter: nn.Module | None) -> None:
        object.__setattr__(self, "adapter", adapter)

    def task_term(self) -> torch.Tensor | None:
        """TS(h) of the active task for this forward (None when no task is active); consumes the captured input."""
        h, mask = self.layer_input, self.layer_mask
        self.layer_input, self.layer_mask = None, None
        if self.adapter is None or h is None:
            return None
        batch, length = h.shape[:2]
        return self.adapter.delta(self.index, h, own_key_mask(mask, batch, length, device=h.device))


class PalOutput(_TaskTerm):
    """Drop-in replacement of a BERT-style layer's output block that adds the active task's TS(h)."""

    def __init__(self, original: Any, index: int, *, name: str = "") -> None:
        super().__init__()
        _check_adoptable(original, name)
        self.dense: nn.Module = original.dense
        self.dropout: nn.Module = original.dropout
        self.LayerNorm: nn.Module = original.LayerNorm
        self._start(original, index, name)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        term = self.task_term()
        if term is not None:
            input_tensor = input_tensor + term.to(input_tensor.dtype)
        return self.original(hidden_states, input_tensor)


def _capture(output: PalOutput | PalMlp) -> Any:
    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        output.layer_input = args[0] if args else kwargs.get("hidden_states")
        output.layer_mask = kwargs["attention_mask"] if "attention_mask" in kwargs else (args[1] if len(args) > 1 else None)

    return hook


class PalMlp(_TaskTerm):
    """The same task term for a pre-norm layer (ModernBERT: ``h + MLP(LN(a))``): the layer's ``mlp`` block, whose
    output gets ``TS(h)`` added, so the layer returns ``a + MLP(LN(a)) + TS(h)``. The block's submodules are adopted
    under their names (state-dict keys unchanged)."""

    def __init__(self, original: nn.Module, index: int, *, name: str = "") -> None:
        super().__init__()
        if any(True for _ in original.named_parameters(recurse=False)):
            raise ModelError(f"{name or type(original).__name__} holds parameters of its own; PALs cannot adopt it",
                             hint="PALs support BERT-style and ModernBERT-style encoders")
        for child_name, child in original.named_children():
            self.add_module(child_name, child)
        self._start(original, index, name)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        out = self.original(hidden_states)
        term = self.task_term()
        return out if term is None else out + term.to(out.dtype)


def wrap_layer(layer: Any, index: int, *, name: str = "") -> PalOutput | PalMlp:
    """Give ``layer`` the task term and feed it the layer's input (idempotent): a BERT-style layer's ``output``
    block becomes a :class:`PalOutput`, a pre-norm (ModernBERT) layer's ``mlp`` a :class:`PalMlp`."""
    for attribute, kind in (("output", PalOutput), ("mlp", PalMlp)):
        current = getattr(layer, attribute, None)
        if isinstance(current, (PalOutput, PalMlp)):
            return current
        if current is not None and (attribute == "output" or hasattr(layer, "mlp_norm")):
            wrapper = kind(current, index, name=name)
            setattr(layer, attribute, wrapper)
            wrapper._hook = layer.register_forward_pre_hook(_capture(wrapper), with_kwargs=True)
            return wrapper
    raise ModelError(f"{name or type(layer).__name__} has no output block", hint="PALs support BERT-style and ModernBERT-style encoders")


def unwrap_layer(layer: Any) -> None:
    for attribute in ("output", "mlp"):
        current = getattr(layer, attribute, None)
        if isinstance(current, (PalOutput, PalMlp)):
            current._hook.remove()
            setattr(layer, attribute, current.original)


def encoder_layers(base: Any) -> Any:
    """The encoder's list of layers: ``encoder.layer`` (BERT, RoBERTa, DeBERTa) or ``layers`` (ModernBERT)."""
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    return layers if layers is not None else getattr(base, "layers", None)


def _check_adoptable(module: nn.Module, name: str) -> None:
    where = name or type(module).__name__
    for attr in _ADOPTED:
        if not isinstance(getattr(module, attr, None), nn.Module):
            raise ModelError(
                f"{where} ({type(module).__name__}) is not a BERT-style output block: it has no {attr!r}",
                hint="PALs support BERT-style encoders (BERT, RoBERTa, ELECTRA)",
            )
    others = sorted(n for n, _ in module.named_parameters() if n.split(".")[0] not in _ADOPTED)
    if others:
        raise ModelError(f"{where} has parameters PALs do not handle: {', '.join(others[:4])}", hint="use a BERT-style encoder")


__all__ = ["LowRankAdapter", "PalAdapter", "PalMlp", "PalOutput", "SmallAttention", "build_adapter", "encoder_layers", "unwrap_layer",
           "wrap_layer", "zero_decoder"]
