"""Inference under both tokenizers and mean pooling.

For every unit and view the model's logits at the unit's output rows are
collected: one row per word (its word-initial wordpiece) for NER, one per
example for classification. Rows are laid out in unit order, which is
example order and, within an NER sentence, word order, so the row arrays of
the two views line up word for word and pooling is an element-wise mean.
Under data parallelism each process scores every W-th unit and an
all-reduce (sum over disjoint rows) assembles the full arrays everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from greenadapt.artifacts.model_folder import position_limit
from greenadapt.compute.batches import collate, output_rows, padded_width
from greenadapt.compute.distributed import DistContext, autocast, autocast_dtype
from greenadapt.compute.settings import POOL_MODES
from greenadapt.errors import UsageError
from greenadapt.machine.devices import to_device
from greenadapt.modeling.units import VIEW_DOMAIN, VIEW_GENERAL, Unit


def view_logits(
    model: Any,
    units: Sequence[Unit],
    view: int,
    ctx: DistContext,
    *,
    pad_id: int,
    batch_size: int = 64,
    precision: str = "auto",
) -> np.ndarray:
    """``[total rows, labels]`` float32 logits of every unit's output rows under ``view``."""
    if ctx.device is None:
        return _numpy_view_logits(model, units, view, pad_id=pad_id, batch_size=batch_size)
    import torch

    n_rows = np.array([u.n_rows for u in units], dtype=np.int64)
    offsets = _row_offsets(units)
    mine = np.arange(ctx.rank, len(units), ctx.world)
    mine = mine[np.argsort([-len(units[int(i)].ids[view]) for i in mine], kind="stable")]
    dtype = autocast_dtype(precision, ctx.device)
    # ONNX Runtime compiles nothing per shape: its batches are run unpadded (1.03x at int8, bench/onnx_batching.py)
    widest = None if getattr(model, "runs_any_shape", False) else _widest(model, units, view)
    was_training = model.training
    model.eval()
    out: Any = None
    try:
        with torch.inference_mode():
            for chunk in inference_chunks(units, mine, view, widest, batch_size):
                shaped, width = inference_shape(units, chunk, view, widest, batch_size)
                batch = collate(units, shaped, [view] * len(shaped), pad_id, ctx.device, width)
                with autocast(ctx.device, dtype):
                    rows = output_rows(model, batch).float()[: int(n_rows[chunk].sum())]  # the real units' rows come first
                if out is None:
                    out = torch.zeros(int(offsets[-1]), rows.shape[-1], device=ctx.device)
                where = _rows_of(offsets, chunk)
                out[to_device(where, ctx.device)] = rows  # a pageable copy would wait for this batch's forward
            if out is None:  # this process had no units (more processes than units)
                out = torch.zeros(int(offsets[-1]), model.config.num_labels, device=ctx.device)
            ctx.all_reduce_sum(out)
    finally:
        model.train(was_training)
    return out.cpu().numpy()


def _numpy_view_logits(model: Any, units: Sequence[Unit], view: int, *, pad_id: int, batch_size: int) -> np.ndarray:
    """:func:`view_logits` of a model that takes and gives numpy arrays (ONNX Runtime's, one process): each batch
    unpadded, as it runs any shape; no torch."""
    offsets = _row_offsets(units)
    order = np.argsort([-len(u.ids[view]) for u in units], kind="stable")
    out = np.zeros((int(offsets[-1]), model.num_labels), dtype=np.float32)
    for chunk in inference_chunks(units, order, view, None, batch_size):
        batch = collate(units, chunk, [view] * len(chunk), pad_id, None)
        out[_rows_of(offsets, chunk)] = output_rows(model, batch)
    return out


# Inference batches take a handful of shapes: widths rounded up to a multiple of this (never past the model's
# positions), batch sizes to a power of two or the full batch size (the last batch of a call padded with repeats of
# its last unit, whose rows are dropped). oneDNN compiles and keeps a kernel per shape: with any width and size a long
# predict grew by 460 MiB over 60,000 sentences (docs/benchmarks.md, "predict on a long input"); padding is masked, so
# scores change only by rounding.
INFERENCE_WIDTH_MULTIPLE = 8


def inference_chunks(units: Sequence[Unit], order: np.ndarray, view: int, widest: int | None, batch_size: int) -> list[np.ndarray]:
    """``order`` (longest first) cut into inference batches. A padded model's batch holds units of one padded width, a
    unit's own length rounded up: a unit is then computed at the same width whatever batch it falls in, and its logits
    do not depend on the other units (torch's CPU products give a row the same result in a batch of any size; padding
    to a neighbour's width moved logits by up to 6e-3 in bf16 and 6e-7 in fp32)."""
    if widest is None:  # a model that takes any shape runs each batch unpadded
        return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    lengths = [len(units[int(i)].ids[view]) for i in order]
    widths = np.array([padded_width(n, INFERENCE_WIDTH_MULTIPLE, max(widest, n)) for n in lengths], dtype=np.int64)
    chunks = []
    for group in np.split(order, np.flatnonzero(np.diff(widths)) + 1) if len(order) else []:
        chunks += [group[start : start + batch_size] for start in range(0, len(group), batch_size)]
    return chunks


def inference_shape(units: Sequence[Unit], chunk: np.ndarray, view: int, widest: int | None, batch_size: int) -> tuple[np.ndarray, int]:
    """The units of one inference batch as it is run (``chunk`` then repeats of its last, to a power of two, never past
    ``batch_size``: a full batch is run as it is) and its width. ``widest`` None: a model that takes any shape, whose
    batch is ``chunk`` as it is, as wide as its longest unit."""
    if widest is None:
        return chunk, max(len(units[int(i)].ids[view]) for i in chunk)
    size = min(1 << (len(chunk) - 1).bit_length(), batch_size)  # chunks are at most batch_size long
    shaped = np.concatenate([chunk, np.repeat(chunk[-1:], size - len(chunk))])
    longest = max(len(units[int(i)].ids[view]) for i in chunk)
    return shaped, padded_width(longest, INFERENCE_WIDTH_MULTIPLE, max(widest, longest))


def _widest(model: Any, units: Sequence[Unit], view: int) -> int:
    """How wide an inference batch may be padded: the model's positions, where its config says (a transformers
    config); else the longest unit (which was made to fit the model)."""
    config: Any = getattr(model, "config", None)
    if callable(getattr(config, "to_dict", None)):
        return position_limit(config.to_dict())
    return max((len(u.ids[view]) for u in units), default=1)


def pooled_logits(
    model: Any,
    units: Sequence[Unit],
    ctx: DistContext,
    *,
    has_domain: bool,
    pad_id: int,
    batch_size: int = 64,
    precision: str = "auto",
    modes: Sequence[str] = POOL_MODES,
) -> dict[str, np.ndarray]:
    """Logits per pooling mode: ``general`` (T_LM), ``domain`` (T̂), ``mean`` (their average).

    Without a domain tokenizer only ``general`` exists; ``mean`` over the one
    view is that view, and is returned as such when asked for.
    """
    for mode in modes:
        check_pool(mode)
        if mode == "domain" and not has_domain:
            raise UsageError("--pool domain needs a model with a domain tokenizer", hint="use --pool general")
    kwargs: dict[str, Any] = {"pad_id": pad_id, "batch_size": batch_size, "precision": precision}
    general = view_logits(model, units, VIEW_GENERAL, ctx, **kwargs)
    if not has_domain:
        return {mode: general for mode in modes}
    result: dict[str, np.ndarray] = {}
    need_domain = any(m in ("domain", "mean") for m in modes)
    domain = domain_view_logits(model, units, general, ctx, **kwargs) if need_domain else None
    for mode in modes:
        if mode == "general" or domain is None:
            result[mode] = general
        elif mode == "domain":
            result[mode] = domain
        else:
            result[mode] = (general + domain) / 2
    return result


def domain_view_logits(model: Any, units: Sequence[Unit], general: np.ndarray, ctx: DistContext, **kwargs: Any) -> np.ndarray:
    """The domain view's logits, given the general view's: a unit the two tokenizers read alike (no domain word in
    it; a fifth of the sentences of the serving benchmark) is the same model input, so its rows are the general
    view's and only the others are run again."""
    differ = [i for i, unit in enumerate(units) if not same_in_both_views(unit)]
    domain = general.copy()
    if differ:
        domain[_rows_of(_row_offsets(units), differ)] = view_logits(model, [units[i] for i in differ], VIEW_DOMAIN, ctx, **kwargs)
    return domain


def _row_offsets(units: Sequence[Unit]) -> np.ndarray:
    """Where each unit's output rows start in the row arrays (and, last, their total)."""
    return np.concatenate([[0], np.cumsum([u.n_rows for u in units], dtype=np.int64)])


def _rows_of(offsets: np.ndarray, indices: Sequence[int] | np.ndarray) -> np.ndarray:
    """The positions of the output rows of the units ``indices`` in the row arrays, unit by unit."""
    return np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in indices])


def same_in_both_views(unit: Unit) -> bool:
    """Whether ``unit`` is the same model input, read out at the same rows, under both tokenizers."""
    general_types, domain_types = unit.type_ids[VIEW_GENERAL], unit.type_ids[VIEW_DOMAIN]
    if general_types is None or domain_types is None:
        types_alike = general_types is None and domain_types is None
    else:
        types_alike = np.array_equal(general_types, domain_types)
    return (types_alike and np.array_equal(unit.ids[VIEW_GENERAL], unit.ids[VIEW_DOMAIN])
            and np.array_equal(unit.rows[VIEW_GENERAL], unit.rows[VIEW_DOMAIN]))


def check_pool(pool: str) -> None:
    """Refuse a ``--pool`` that names no pooling mode."""
    if pool not in POOL_MODES:
        raise UsageError(f"unknown --pool {pool!r}", hint=f"choose from {', '.join(POOL_MODES)}")


def report_modes(has_domain: bool) -> tuple[str, ...]:
    """The pooling modes worth reporting: all three with a domain tokenizer, else just ``general``."""
    return POOL_MODES if has_domain else ("general",)
