"""The elementwise half of a CPU training step, made cheaper (issue 94, item 1).

A bf16 fine-tuning step of MiniLM on the 2-core EPYC spent more than a third of its time outside the matrix products
(docs/benchmarks.md, "The elementwise half of a CPU step"). Two of those costs are made small here; both apply to a
model trained on the CPU, installed by :func:`use_cpu_kernels` before the optimizers are built:

- **Dropout's masks** (``--dropout-masks fast``, the default on a CPU): torch draws one Mersenne-Twister number and
  one float per element, on one thread whatever the thread count (``bernoulli_``: 15% of a two-thread step). Here
  one 32-bit draw gives the masks of two elements (16 bits each; the rate rounded to 1/32768, the kept values scaled
  by the rounded rate, so the layer still keeps the expected value), and the compare and the scaling run on every
  thread. The masks come from torch's default generator, so a seed fixes them and a checkpoint's saved generator
  state resumes them. Other masks than torch's: a different draw of the same distribution, checked for F1 over
  paired seeds; ``--dropout-masks torch`` keeps torch's own. The attention probabilities' dropout too, through a
  registered transformers attention function (with dropout, torch's fused attention fell back to its math path).
- **The word embeddings' gradient**: autograd builds it dense every step, zero-filling the whole table (30,522 ×
  384 for a BERT vocabulary: 7-10% of a step) to add the few hundred rows the batch used. Here the rows are added
  into one gradient kept across steps, and only the rows the last step wrote are zeroed before the next: the same
  sums in the same order (bit for bit the dense gradient; a test holds it), so the optimizer sees what it saw.
  Used in a single process when the table is not tied to an output layer (a masked-LM head's decoder shares it,
  and DDP reduces gradients through autograd's own accumulation).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from greenadapt.training.config import DROPOUT_MASKS

log = logging.getLogger(__name__)

_LEVELS = 32768  # a 16-bit draw, compared as a signed number: the rate in steps of 1/32768


_BITS_OF = {2: torch.int16, 4: torch.int32, 8: torch.int64}  # an element's bytes: the integer type of its bits (-1 sign-extends)


def _keep_bits(shape: torch.Size, dropped_levels: int) -> torch.Tensor:
    """An int8 tensor of ``shape`` (what a bool mask would take of memory; the backward keeps it): all ones (-1) where an
    element is kept, 0 where it is dropped.

    Each 31-bit draw, doubled so both of its 16-bit halves are uniform over the signed range (the low half over its
    even values), gives two elements. A half ``v`` is kept when ``v >= 2k - 32768`` (``k``: the dropped levels), that
    is when ``v >> 1 >= k - 16384``; the sign of ``(k - 16385) - (v >> 1)``, which cannot overflow 16 bits, says so.
    Only integer passes: torch's comparisons that give a bool tensor, and anything that reads one, ran several times
    slower than these on the CPU."""
    count = shape.numel()
    halves = torch.empty((count + 1) // 2, dtype=torch.int32).random_().mul_(2).view(torch.int16)[:count]
    signs = halves.bitwise_right_shift(1).neg_().add_(dropped_levels - _LEVELS // 2 - 1).bitwise_right_shift_(15)
    return signs.to(torch.int8).view(shape)


def _masked(values: torch.Tensor, keep_bits: torch.Tensor, scale: float) -> torch.Tensor:
    """``values`` where kept (their bits ANDed with all ones), +0 where dropped, times ``scale``."""
    bits = _BITS_OF[values.element_size()]
    return (values.view(bits) & keep_bits.to(bits)).view(values.dtype).mul_(scale)


class _MaskedScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, values: torch.Tensor, keep_bits: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(keep_bits)
        ctx.scale = scale
        return _masked(values, keep_bits, scale)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (keep_bits,) = ctx.saved_tensors
        return _masked(grad, keep_bits, ctx.scale), None, None


def _packable(values: torch.Tensor, p: float) -> int | None:
    """The dropped levels of rate ``p`` where packed masks apply to ``values``; None where they do not (not a CPU tensor,
    a rate that rounds to 0 or 1 in steps of 1/32768, an element size without an integer twin): torch's dropout then."""
    dropped = round(p * _LEVELS)
    usable = values.device.type == "cpu" and 0 < dropped < _LEVELS and values.element_size() in _BITS_OF
    return dropped if usable else None


def _packed_dropout(values: torch.Tensor, dropped: int) -> torch.Tensor:
    return _MaskedScale.apply(values, _keep_bits(values.shape, dropped), _LEVELS / (_LEVELS - dropped))


class CpuDropout(nn.Dropout):
    """``nn.Dropout`` with masks drawn two elements to a 32-bit number (see the module docstring); the same module
    otherwise (``p``, eval mode), so code that looks for dropout layers still finds it."""

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return values
        dropped = None if self.inplace else _packable(values, self.p)
        return super().forward(values) if dropped is None else _packed_dropout(values, dropped)


ATTENTION = "greenadapt_cpu_dropout"  # the attention function below, registered with transformers under this name


def _attention_with_packed_dropout(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                   attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                                   **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention with the attention probabilities' dropout drawn as :class:`CpuDropout` draws it: in
    training, torch's scaled-dot-product attention with dropout leaves its fused kernel for the same product, softmax,
    dropout and product, but with a float per element for its masks. Elsewhere (evaluation, no dropout) it is torch's."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    dropped = _packable(query, dropout) if module.training else None
    if dropped is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    weights = torch.matmul(query, key.transpose(2, 3)) * (scaling if scaling is not None else query.size(-1) ** -0.5)
    if attention_mask is not None:
        weights = weights + attention_mask  # transformers' additive mask (0, or the dtype's lowest)
    weights = _packed_dropout(torch.softmax(weights, dim=-1), dropped)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), None


def _use_packed_attention_dropout(model: nn.Module) -> bool:
    """Run the model's attention through :func:`_attention_with_packed_dropout` when it is torch's scaled-dot-product
    attention with a dropout (a transformers model that can switch: BERT-style encoders)."""
    config: Any = getattr(model, "config", None)
    dropout = getattr(config, "attention_probs_dropout_prob", getattr(config, "attention_dropout", 0.0))
    switch: Any = getattr(model, "set_attn_implementation", None)
    if getattr(config, "_attn_implementation", None) != "sdpa" or not dropout or switch is None:
        return False
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION, _attention_with_packed_dropout)
    AttentionMaskInterface.register(ATTENTION, eager_mask)  # the additive float mask it adds
    try:
        switch(ATTENTION)
    except (ValueError, TypeError, AttributeError) as error:  # a model whose attention cannot switch: torch's masks there
        log.debug("attention keeps torch's dropout masks: %s", error)
        return False
    return True


class _RowGradientLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, ids: torch.Tensor, weight: torch.Tensor, embedding: RowGradientEmbedding) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.embedding = embedding
        return nn.functional.embedding(ids, weight, embedding.padding_idx)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None]:
        (ids,) = ctx.saved_tensors
        ctx.embedding.add_rows(ids, grad)
        return None, None, None


class RowGradientEmbedding(nn.Embedding):
    """An ``nn.Embedding`` whose gradient is one table kept across steps, of which only the used rows are written and
    zeroed (see the module docstring). Saved and loaded as the plain embedding it replaces."""

    _gradient: torch.Tensor | None = None
    _written: list[torch.Tensor]

    @classmethod
    def replacing(cls, embedding: nn.Embedding) -> RowGradientEmbedding:
        """The same module, the same weight parameter (optimizers built later see it), with this forward."""
        embedding.__class__ = cls
        assert isinstance(embedding, RowGradientEmbedding)
        embedding._written = []
        return embedding

    def plain(self) -> None:
        """Back to the ``nn.Embedding`` it was, the kept gradient let go of."""
        self._gradient, self._written = None, []
        self.__class__ = nn.Embedding  # type: ignore[assignment]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        plain = self.max_norm is not None or self.scale_grad_by_freq or self.sparse
        if not self.training or not self.weight.requires_grad or plain or not torch.is_grad_enabled():
            return super().forward(ids)
        return _RowGradientLookup.apply(ids, self.weight, self)

    def add_rows(self, ids: torch.Tensor, grad: torch.Tensor) -> None:
        """Add a backward pass's rows into the weight's gradient as autograd would: each row the sum of its positions in
        order, the padding row left out."""
        rows = ids.reshape(-1)
        values = grad.reshape(-1, self.embedding_dim).to(self.weight.dtype)
        if self.padding_idx is not None:
            used = rows != self.padding_idx
            rows, values = rows[used], values[used]
        target = self.weight.grad
        if target is None:  # a new step: the optimizer took the last one's gradient and let go of it
            if self._gradient is None:
                self._gradient = torch.zeros_like(self.weight)
            elif self._written:
                self._gradient.index_fill_(0, torch.cat(self._written), 0)
            self._written = []
            self.weight.grad = target = self._gradient
        # This pass's sum for each row first, then added to what earlier micro-batches left: autograd's order of
        # additions (each pass's dense gradient, then the accumulation), so the sums round alike.
        used_rows, position_row = torch.unique(rows, return_inverse=True)
        sums = values.new_zeros(used_rows.numel(), self.embedding_dim).index_add_(0, position_row, values)
        if target is self._gradient:
            self._written.append(used_rows)
        target.index_add_(0, used_rows, sums)


def _word_embedding_table(model: nn.Module) -> nn.Embedding | None:
    """The dense table of the word embeddings this process trains, or None: not trained, tied to another layer
    (a masked-LM decoder), or not a plain embedding."""
    get_input_embeddings: Any = getattr(model, "get_input_embeddings", None)
    embedding = get_input_embeddings() if callable(get_input_embeddings) else None
    table = getattr(embedding, "base", embedding)  # SplitWordEmbedding keeps its original rows in .base
    if type(table) is not nn.Embedding or not table.weight.requires_grad:
        return None
    uses = sum(1 for _, parameter in model.named_parameters(remove_duplicate=False) if parameter is table.weight)
    return table if uses == 1 else None


def use_cpu_kernels(model: nn.Module, *, dropout_masks: str, world: int) -> None:
    """Install the CPU's cheaper dropout (``dropout_masks == "fast"``) and, in a single process, the word embeddings'
    kept gradient. Call before the optimizers are built, on a model that trains on the CPU."""
    if dropout_masks not in DROPOUT_MASKS:
        raise ValueError(dropout_masks)
    swapped, attention = 0, False
    if dropout_masks == "fast":
        for module in model.modules():
            if type(module) is nn.Dropout:
                module.__class__ = CpuDropout  # the same module and settings, this forward
                swapped += 1
        attention = _use_packed_attention_dropout(model)
    table = _word_embedding_table(model) if world == 1 else None
    if table is not None:
        RowGradientEmbedding.replacing(table)
    log.debug("CPU kernels: %d dropout layers with packed masks%s; word embeddings' gradient %s", swapped,
              ", attention's too" if attention else "", "kept across steps" if table is not None else "dense (autograd's)")


def plain_modules(model: nn.Module) -> None:
    """Undo :func:`use_cpu_kernels`: plain ``nn.Dropout`` and ``nn.Embedding`` again (after training), the kept
    gradient freed."""
    config: Any = getattr(model, "config", None)
    switch: Any = getattr(model, "set_attn_implementation", None)
    if getattr(config, "_attn_implementation", None) == ATTENTION and switch is not None:
        switch("sdpa")
    for module in model.modules():
        if type(module) is CpuDropout:
            module.__class__ = nn.Dropout  # type: ignore[assignment]
        elif isinstance(module, RowGradientEmbedding):
            module.plain()
