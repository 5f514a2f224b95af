"""The grown model's weights, streamed: new embedding rows (and output-bias entries) appended chunk by chunk and
written to safetensors without holding the model twice.

Tensors are :class:`~greenadapt.artifacts.raw_tensors.RawTensor` (numpy, memory-mapped from the base
model's safetensors): writing a grown model needs no torch."""

from __future__ import annotations

import json
import logging
import struct
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.artifacts.model_weights import EMBEDDING_SUFFIXES
from greenadapt.adaptation.methods import InitMethod, RowContext
from greenadapt.adaptation.methods.norms import rescale_rows, whole_word_norm
from greenadapt.errors import ModelError
from greenadapt.progress import NULL_PROGRESS, Progress

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.artifacts.raw_tensors import RawTensor

log = logging.getLogger(__name__)

_ROW_CHUNK = 32768


def vocabulary_tensors(
    state: Mapping[str, RawTensor], embedding_key: str, model_path: Path
) -> tuple[list[str], list[str]]:
    """The tensors indexed by token id: (V, d) matrices to grow by rows, (V,) biases to grow by a fill value."""
    n_rows, dim = state[embedding_key].shape
    rows, biases = [embedding_key], []
    for name in sorted(state):
        tensor = state[name]
        if name == embedding_key or "position_embeddings" in name or "token_type_embeddings" in name:
            continue
        if tuple(tensor.shape) == (n_rows, dim):
            rows.append(name)
        elif tensor.ndim == 1 and tensor.shape[0] == n_rows:
            biases.append(name)
        elif n_rows in tuple(tensor.shape):
            if name.endswith(EMBEDDING_SUFFIXES):
                raise ModelError(
                    f"{name} has shape {tuple(tensor.shape)}, unlike the input embeddings {(n_rows, dim)}",
                    path=model_path,
                    hint="models with differently sized word-embedding tables are not supported",
                )
            log.warning("%s %s has a vocabulary-sized dimension and is left unchanged", name, tuple(tensor.shape))
    return rows, biases


def new_row_source(method: InitMethod, context: RowContext) -> Callable[[], Iterator[np.ndarray]]:
    """A function yielding the new rows (float32) in chunks, from the method (rescaled under --match-norm).

    A method that reads the corpus fits its rows (with its own progress and checkpoint) here, before the
    weights are written, and the function yields what it fitted."""
    if method.reads_corpus:
        fitted = list(method.rows(context))
        rows: Callable[[], Iterator[np.ndarray]] = lambda: iter(fitted)  # noqa: E731
    else:
        rows = lambda: method.rows(context)  # noqa: E731
    if not context.options.match_norm:
        return rows
    target = whole_word_norm(context.embeddings, context.general)
    context.match_norm_target = target
    return lambda: (rescale_rows(chunk, target) for chunk in rows())


def average_draws(sources: Sequence[Callable[[], Iterator[np.ndarray]]]) -> Iterator[np.ndarray]:
    """Each word's row as the mean of its rows from several word2vec draws, rescaled to their mean norm (the mean
    of vectors that disagree is shorter than any of them, and the norm of a row is part of what the model reads)."""
    import numpy as np

    for chunks in zip(*(source() for source in sources), strict=True):
        stacked = np.stack([np.asarray(c, dtype=np.float64) for c in chunks])
        mean = stacked.mean(axis=0)
        target = np.linalg.norm(stacked, axis=2).mean(axis=0)
        length = np.linalg.norm(mean, axis=1)
        scale = np.divide(target, length, out=np.ones_like(target), where=length > 0)
        yield (mean * scale[:, None]).astype(np.float32)


def grown_rows(
    tensor: RawTensor, new_rows: Callable[[], Iterator[np.ndarray]], cached: list[RawTensor] | None
) -> Callable[[], Iterator[np.ndarray]]:
    from greenadapt.artifacts.raw_tensors import RawTensor, float32_to

    def chunks() -> Iterator[np.ndarray]:
        yield tensor.data
        if cached:
            # A second vocabulary matrix reuses the first one's rows (held in its dtype), so tied copies stay bit-identical.
            yield from (c.data if c.code == tensor.code else float32_to(c.to_float32(), tensor.code) for c in cached)
            return
        for chunk in new_rows():
            rows = float32_to(chunk, tensor.code)
            if cached is not None:
                cached.append(RawTensor(tensor.code, rows))
            yield rows

    return chunks


def grown_bias(tensor: RawTensor, n_new: int) -> Callable[[], Iterator[np.ndarray]]:
    """The bias and ``n_new`` entries of its mean (as torch's double-precision mean, rounded to the bias's dtype)."""
    import numpy as np

    from greenadapt.artifacts.raw_tensors import float32_to

    def chunks() -> Iterator[np.ndarray]:
        yield tensor.data
        mean = tensor.to_float32().astype(np.float64).mean()
        yield float32_to(np.full((n_new,), mean, dtype=np.float64), tensor.code)

    return chunks


Spec = tuple[str, str, tuple[int, ...], Callable[[], Iterable["np.ndarray"]]]


def grown_tensor_specs(
    state: Mapping[str, RawTensor], row_keys: list[str], bias_keys: list[str], n_new: int, new_rows: Callable[[], Iterator[np.ndarray]]
) -> list[Spec]:
    """What :func:`write_safetensors` writes of the grown model: vocabulary-indexed tensors grown by ``n_new``, the rest as they are.

    Row matrices are written first, bias vectors next, so that several row matrices (tied or not) draw the new rows once."""
    import functools

    cached: list[RawTensor] | None = [] if len(row_keys) > 1 else None
    specs: list[Spec] = []
    for name in row_keys + bias_keys + sorted(set(state) - set(row_keys) - set(bias_keys)):
        tensor = state[name]
        if name in row_keys:
            specs.append((name, tensor.code, (tensor.shape[0] + n_new, *tensor.shape[1:]), grown_rows(tensor, new_rows, cached)))
        elif name in bias_keys:
            specs.append((name, tensor.code, (tensor.shape[0] + n_new,), grown_bias(tensor, n_new)))
        else:
            specs.append((name, tensor.code, tensor.shape, functools.partial(list, [tensor.data])))
    return specs


def write_safetensors(
    path: Path,
    specs: Sequence[Spec],
    *,
    metadata: Mapping[str, str],
    progress: Progress = NULL_PROGRESS,
) -> None:
    """Write a safetensors file whose tensors arrive in chunks (name, dtype code, shape, chunk source).

    The layout is the format's: an 8-byte little-endian header length, a
    JSON header padded with spaces to a multiple of 8, then the tensors'
    bytes back to back in the header's order.
    """
    import numpy as np

    from greenadapt.artifacts.raw_tensors import STORAGE

    if sys.byteorder != "little":
        raise RuntimeError("writing safetensors needs a little-endian machine")
    header: dict[str, Any] = {}
    offset = 0
    for name, code, shape, _ in specs:
        if code not in STORAGE:
            raise ModelError(f"tensor {name} has dtype {code}, which greenadapt cannot write to safetensors")
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(STORAGE[code]).itemsize
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = dict(metadata)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    from greenadapt.artifacts.files import HashedWriter

    with HashedWriter(path) as handle:
        handle.write(struct.pack("<Q", len(encoded)))
        handle.write(encoded)
        for done, (name, code, _, source) in enumerate(specs, start=1):
            written = 0
            for chunk in source():
                if chunk.dtype != STORAGE[code]:
                    raise RuntimeError(f"{name}: chunk of dtype {chunk.dtype}, expected {code}")
                data = np.ascontiguousarray(chunk).reshape(-1).view(np.uint8)
                handle.write(data)
                written += data.nbytes
            start, end = header[name]["data_offsets"]
            if written != end - start:
                raise RuntimeError(f"{name}: wrote {written} bytes, the header promises {end - start}")
            progress.update(done)
