"""Units into batches, for training and inference alike: which tokenizer each example uses, the batch order, and the
padded tensors of a batch (:func:`collate`, with G-MAP's memory inputs).

Mixing: in epoch e, example i is fed through the domain tokenizer iff
``uniform(seed, e)[i] < mix``: a fresh draw per example and epoch that does not
depend on the order of the data or the number of processes. Batches are
random but of similar length (less padding): shuffle, sort within windows of
:data:`GROUP_BATCHES` batches, shuffle the batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from greenadapt.machine.devices import to_device
from greenadapt.modeling.units import Unit

_MIX_STREAM = 0x6D6978  # separate random streams for the tokenizer draw and the batch order
_ORDER_STREAM = 0x6F7264
GROUP_BATCHES = 50  # length grouping sorts windows of 50 batches, so batch order stays random


def choose_views(n_units: int, mix: float, seed: int, epoch: int) -> np.ndarray:
    """The view (0 = general, 1 = domain) of each unit in ``epoch``."""
    if mix <= 0:
        return np.zeros(n_units, dtype=np.int64)
    if mix >= 1:
        return np.ones(n_units, dtype=np.int64)
    draws = np.random.default_rng([seed, epoch, _MIX_STREAM]).random(n_units)
    return (draws < mix).astype(np.int64)


def length_grouped_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Random batches of similar-length units: shuffle, sort within windows of 50 batches, shuffle the batches."""
    rng = np.random.default_rng([seed, epoch, _ORDER_STREAM])
    order = rng.permutation(len(lengths))
    batches: list[np.ndarray] = []
    window = batch_size * GROUP_BATCHES
    for start in range(0, len(order), window):
        part = order[start : start + window]
        part = part[np.argsort(-lengths[part], kind="stable")]
        batches.extend(part[i : i + batch_size] for i in range(0, len(part), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def padded_width(longest: int, multiple: int = 1, widest: int | None = None) -> int:
    """A batch's width: ``longest`` rounded up to a multiple of ``multiple``, but never past ``widest`` (the run's
    longest sequence, so a multiple never asks for more positions than the model has)."""
    width = -(-longest // multiple) * multiple
    return max(longest, min(width, widest)) if widest is not None else width


def pad_rows(rows: Sequence[tuple[np.ndarray, np.ndarray | None]], pad_id: int,
             width: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ids, token types)`` sequences as right-padded ``int64`` (ids, token types, attention mask) arrays,
    ``width`` wide (default: the longest's length).

    Token types of None stay 0; padding is ``pad_id`` in the ids and 0 elsewhere.
    """
    width = max(width or 0, max(len(ids) for ids, _ in rows))
    ids_out = np.full((len(rows), width), pad_id, dtype=np.int64)
    types_out = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for row, (ids, types) in enumerate(rows):
        n = len(ids)
        ids_out[row, :n] = ids
        mask[row, :n] = 1
        if types is not None:
            types_out[row, :n] = types
    return ids_out, types_out, mask


@dataclass
class Batch:
    input_ids: Any
    attention_mask: Any
    token_type_ids: Any
    rows: Any  # flat positions (b * T + t) of the output rows
    targets: Any
    memory: dict[str, Any] | None = None  # G-MAP: general_input_ids / general_attention_mask / general_token_type_ids

    def model_inputs(self) -> dict[str, Any]:
        inputs = {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "token_type_ids": self.token_type_ids}
        return inputs if self.memory is None else {**inputs, **self.memory}


def collate(units: Sequence[Unit], indices: Sequence[int] | np.ndarray, views: Sequence[int] | np.ndarray, pad_id: int, device: Any,
            width: int | None = None) -> Batch:
    """The batch of ``units[indices]``, each in its view, padded to ``width`` (default: the longest's length)."""
    chosen = list(zip(indices, views, strict=True))
    input_ids, type_ids, attention = pad_rows([(units[i].ids[v], units[i].type_ids[v]) for i, v in chosen], pad_id, width)
    width = input_ids.shape[1]
    rows = [units[i].rows[v] + b * width for b, (i, v) in enumerate(chosen)]
    targets = [units[i].targets for i, _ in chosen]

    def to(array: np.ndarray) -> Any:
        return to_device(array, device)

    memory = None
    if units[indices[0]].memory_ids is not None:
        memory = {k: to(v) for k, v in memory_arrays([units[i] for i in indices], pad_id).items()}
    return Batch(to(input_ids), to(attention), to(type_ids), to(np.concatenate(rows)), to(np.concatenate(targets)), memory)


def memory_arrays(units: Sequence[Unit], pad_id: int) -> dict[str, np.ndarray]:
    """G-MAP: the general model's padded inputs (its own length, independent of the domain view's)."""
    rows = []
    for unit in units:
        if unit.memory_ids is None:
            raise ValueError("some units of a batch have a G-MAP memory input and some do not")
        rows.append((unit.memory_ids, unit.memory_type_ids))
    ids, types, mask = pad_rows(rows, pad_id)
    return {"general_input_ids": ids, "general_attention_mask": mask, "general_token_type_ids": types}


def output_rows(model: Any, batch: Batch) -> Any:
    """Logits of the output rows: word-initial pieces (token models) or sequences ([B, L] heads)."""
    logits = model(**batch.model_inputs()).logits
    if logits.ndim == 2:  # sequence classification: one row per sequence, at position 0
        return logits
    if isinstance(logits, np.ndarray):  # a model that takes and gives numpy arrays (ONNX Runtime's)
        return logits.reshape(-1, logits.shape[-1])[batch.rows]
    return logits.reshape(-1, logits.shape[-1]).index_select(0, batch.rows)
