"""Checkpoint tensors as numpy arrays, read from safetensors without torch: what align and expand need of a model's weights.

A :class:`RawTensor` is a tensor's safetensors dtype code and its bytes as a
numpy array of the same width. numpy has no bfloat16 or float8, so those
keep their raw bits (``uint16``, ``uint8``) and are widened or rounded only
where rows are read or made (:meth:`RawTensor.to_float32`,
:func:`float32_to`), with torch's rounding (to nearest, ties to even). A
safetensors file is memory-mapped, so a tensor costs no memory until it is
read, and its header is checked against the file's size before any tensor
is touched. Only pickled ``pytorch_model.bin`` checkpoints need torch
(loaded with ``weights_only=True``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from greenadapt.errors import ModelError

# safetensors dtype code -> the numpy type holding its bytes
STORAGE: dict[str, Any] = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
    "F8_E4M3": np.uint8, "F8_E5M2": np.uint8,
}
# the same codes by the name torch gives the dtype (recorded in manifests)
TORCH_NAMES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}
FLOATS = ("F64", "F32", "F16", "BF16")
_MAX_HEADER = 100 << 20


@dataclass(frozen=True)
class RawTensor:
    code: str  # the safetensors dtype code
    data: np.ndarray  # the tensor's shape, in STORAGE[code]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def torch_name(self) -> str:
        """The dtype as torch names it (``bfloat16``), as manifests record it."""
        return TORCH_NAMES[self.code]

    def to_float32(self) -> np.ndarray:
        """The values as float32 (bfloat16 widened exactly)."""
        if self.code == "BF16":
            return (self.data.astype(np.uint32) << 16).view(np.float32)
        if self.code not in FLOATS:
            raise ModelError(f"a {self.code} tensor has no float values to read")
        return self.data.astype(np.float32)


def float32_to(values: np.ndarray, code: str) -> np.ndarray:
    """float32 (or float64) values in the storage of ``code``, rounded as torch's ``.to(dtype)`` rounds."""
    if code == "BF16":
        with np.errstate(over="ignore"):
            bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
        rounded = ((bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16).astype(np.uint16)
        return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)
    if code not in FLOATS:
        raise ModelError(f"cannot write float rows into a {code} tensor")
    with np.errstate(over="ignore"):  # out of range becomes infinity, as in torch
        if code == "F16":  # through float32, as torch's Half is made from a float
            return np.asarray(values, dtype=np.float32).astype(np.float16)
        return np.asarray(values).astype(STORAGE[code])


def read_safetensors(file: Path) -> Iterator[tuple[str, RawTensor]]:
    """Every tensor of one safetensors file, memory-mapped, in the file's order."""
    try:
        size = file.stat().st_size
        with open(file, "rb") as handle:
            head = handle.read(8)
            (length,) = struct.unpack("<Q", head) if len(head) == 8 else (None,)
            if length is None or length > min(size - 8, _MAX_HEADER):
                raise ModelError("unreadable safetensors file: truncated header", path=file, hint="copy or download it again")
            header = json.loads(handle.read(length))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"unreadable safetensors file: {exc}", path=file, hint="copy or download it again") from None
    if not isinstance(header, dict):
        raise ModelError("unreadable safetensors file: its header is not a JSON object", path=file)
    start = 8 + length
    mapped = np.memmap(file, dtype=np.uint8, mode="r") if size > start else np.zeros(0, np.uint8)
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        yield name, _tensor(name, entry, mapped, start, size, file)


def _tensor(name: str, entry: Any, mapped: np.ndarray, start: int, size: int, file: Path) -> RawTensor:
    try:
        code, shape, (first, last) = entry["dtype"], tuple(int(n) for n in entry["shape"]), entry["data_offsets"]
        storage = np.dtype(STORAGE[code])
    except (KeyError, TypeError, ValueError):
        raise ModelError(f"unreadable safetensors file: the header's entry for {name} is damaged", path=file) from None
    count = int(np.prod(shape, dtype=np.int64))
    if not 0 <= first <= last or start + last > size or last - first != count * storage.itemsize:
        raise ModelError(f"unreadable safetensors file: {name} lies outside the file or has the wrong size",
                         path=file, hint="a truncated download or copy: fetch it again")
    return RawTensor(code, mapped[start + first:start + last].view(storage).reshape(shape))


def read_pickled(file: Path) -> Iterator[tuple[str, RawTensor]]:
    """Every tensor of a ``pytorch_model.bin``, loaded with ``weights_only=True`` (no pickled code runs)."""
    import torch

    try:
        state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch raises many types for a bad or unsafe pickle
        raise ModelError(f"cannot load PyTorch weights safely ({type(exc).__name__})", path=file,
                         hint="convert the checkpoint to safetensors") from None
    codes = {getattr(torch, torch_name): code for code, torch_name in TORCH_NAMES.items() if hasattr(torch, torch_name)}
    for name, tensor in state.items():
        if tensor.dtype not in codes:
            raise ModelError(f"tensor {name} has dtype {tensor.dtype}, which greenadapt cannot read", path=file)
        code = codes[tensor.dtype]
        plain = tensor.detach().contiguous()
        if code == "BF16":
            plain = plain.view(torch.int16)
        elif code.startswith("F8"):
            plain = plain.view(torch.uint8)
        yield name, RawTensor(code, plain.numpy().view(STORAGE[code]))


__all__ = ["FLOATS", "STORAGE", "TORCH_NAMES", "RawTensor", "float32_to", "read_pickled", "read_safetensors"]
