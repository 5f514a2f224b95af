"""The grown model's weights, streamed: new embedding rows (and output-bias entries) appended chunk by chunk and written to safetensors without holding the model twice."""

from __future__ import annotations

import json
import logging
import struct
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.adaptation.vectors import EMBEDDING_SUFFIXES
from greenadapt.adaptation.methods import InitMethod, RowContext
from greenadapt.adaptation.methods.norms import rescale_rows, whole_word_norm
from greenadapt.errors import ModelError
from greenadapt.progress import NULL_PROGRESS, Progress

if TYPE_CHECKING:
    import numpy as np
    import torch

log = logging.getLogger(__name__)

_ROW_CHUNK = 32768


def vocabulary_tensors(
    state: Mapping[str, torch.Tensor], embedding_key: str, model_path: Path
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


def grown_rows(
    tensor: torch.Tensor, new_rows: Callable[[], Iterator[np.ndarray]], cached: list[torch.Tensor] | None
) -> Callable[[], Iterator[torch.Tensor]]:
    import torch

    def chunks() -> Iterator[torch.Tensor]:
        yield tensor
        if cached:
            # A second vocabulary matrix reuses the first one's rows, so tied copies stay bit-identical.
            yield from (c.to(tensor.dtype) for c in cached)
            return
        for chunk in new_rows():
            rows = torch.from_numpy(chunk).to(tensor.dtype)
            if cached is not None:
                cached.append(rows)
            yield rows

    return chunks


def grown_bias(tensor: torch.Tensor, fill: torch.Tensor, n_new: int) -> Callable[[], Iterator[torch.Tensor]]:
    import torch

    def chunks() -> Iterator[torch.Tensor]:
        yield tensor
        yield torch.full((n_new,), fill.item(), dtype=tensor.dtype)

    return chunks


def _safetensors_dtypes() -> dict[Any, str]:
    import torch

    names = {
        torch.float64: "F64",
        torch.float32: "F32",
        torch.float16: "F16",
        torch.bfloat16: "BF16",
        torch.int64: "I64",
        torch.int32: "I32",
        torch.int16: "I16",
        torch.int8: "I8",
        torch.uint8: "U8",
        torch.bool: "BOOL",
    }
    for attr, code in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
        if hasattr(torch, attr):
            names[getattr(torch, attr)] = code
    return names


def grown_tensor_specs(
    state: Mapping[str, torch.Tensor], row_keys: list[str], bias_keys: list[str], n_new: int, new_rows: Callable[[], Iterator[np.ndarray]]
) -> list[tuple[str, torch.dtype, tuple[int, ...], Callable[[], Iterable[torch.Tensor]]]]:
    """What :func:`write_safetensors` writes of the grown model: vocabulary-indexed tensors grown by ``n_new``, the rest as they are.

    Row matrices are written first, bias vectors next, so that several row matrices (tied or not) draw the new rows once."""
    import functools

    cached: list[torch.Tensor] | None = [] if len(row_keys) > 1 else None
    specs: list[tuple[str, torch.dtype, tuple[int, ...], Callable[[], Iterable[torch.Tensor]]]] = []
    for name in row_keys + bias_keys + sorted(set(state) - set(row_keys) - set(bias_keys)):
        tensor = state[name]
        if name in row_keys:
            specs.append((name, tensor.dtype, (tensor.shape[0] + n_new, *tensor.shape[1:]), grown_rows(tensor, new_rows, cached)))
        elif name in bias_keys:
            fill = tensor.double().mean().to(tensor.dtype)
            specs.append((name, tensor.dtype, (tensor.shape[0] + n_new,), grown_bias(tensor, fill, n_new)))
        else:
            specs.append((name, tensor.dtype, tuple(tensor.shape), functools.partial(list, [tensor])))
    return specs


def write_safetensors(
    path: Path,
    specs: Sequence[tuple[str, torch.dtype, tuple[int, ...], Callable[[], Iterable[torch.Tensor]]]],
    *,
    metadata: Mapping[str, str],
    progress: Progress = NULL_PROGRESS,
) -> None:
    """Write a safetensors file whose tensors arrive in chunks (name, dtype, shape, chunk source).

    The layout is the format's: an 8-byte little-endian header length, a
    JSON header padded with spaces to a multiple of 8, then the tensors'
    bytes back to back in the header's order.
    """
    import torch

    if sys.byteorder != "little":
        raise RuntimeError("writing safetensors needs a little-endian machine")
    codes = _safetensors_dtypes()
    header: dict[str, Any] = {}
    offset = 0
    for name, dtype, shape, _ in specs:
        if dtype not in codes:
            raise ModelError(f"tensor {name} has dtype {dtype}, which greenadapt cannot write to safetensors")
        numel = 1
        for size in shape:
            numel *= size
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        header[name] = {"dtype": codes[dtype], "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = dict(metadata)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    from greenadapt.artifacts.files import HashedWriter

    with HashedWriter(path) as handle:
        handle.write(struct.pack("<Q", len(encoded)))
        handle.write(encoded)
        for done, (name, dtype, _, source) in enumerate(specs, start=1):
            written = 0
            for chunk in source():
                if chunk.dtype != dtype:
                    raise RuntimeError(f"{name}: chunk of dtype {chunk.dtype}, expected {dtype}")
                data = chunk.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
                handle.write(data)
                written += data.nbytes
            start, end = header[name]["data_offsets"]
            if written != end - start:
                raise RuntimeError(f"{name}: wrote {written} bytes, the header promises {end - start}")
            progress.update(done)
