"""``--gmap-cache``: the frozen general model's hidden states per example, on disk.

A frozen general model in eval mode is a deterministic function of its
input, so its hidden states can be computed once and read back in later
epochs (and at evaluation), trading disk for a forward pass. Each example is
one safetensors file holding the states the fused layers read, at the
example's real (unpadded) positions: (states, positions, hidden). The file
name is a hash of everything the states depend on: the general model's
weights fingerprint, which states are kept and in which dtype, and the
example's token ids, token types and real positions. A changed general
model or strategy therefore never reads stale states.

Size: ``len(state_indices) × tokens × hidden × bytes``; chunk on a 12-layer,
768-wide model keeps 12 states, about 37 kB per token in float32 (half in
float16), so 4.7 MB for a 128-token example.

Cached states equal freshly computed ones up to float rounding (padding an
example to a different batch width changes the summation order, not the
masked result).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import torch

from greenadapt.artifacts.stage import resource_errors
from greenadapt.modeling.gmap.layer import GeneralMemory

log = logging.getLogger(__name__)

_KEY_VERSION = b"gmap-cache-1"


class MemoryCache:
    """General hidden states per example under ``folder``, keyed by content."""

    def __init__(
        self,
        folder: Path,
        *,
        fingerprint: str,
        state_indices: tuple[int, ...],
        hidden_size: int,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.folder = folder
        self.fingerprint = fingerprint
        self.state_indices = tuple(state_indices)
        self.hidden_size = hidden_size
        self.dtype = dtype
        self.hits = 0
        self.misses = 0
        with resource_errors(folder):
            folder.mkdir(parents=True, exist_ok=True)

    def key(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None) -> str:
        """The cache key of one example (1-D tensors of its padded row)."""
        positions = attention_mask.nonzero().reshape(-1).to("cpu", torch.int64)
        ids = input_ids.to("cpu", torch.int64)[positions]
        types = (
            token_type_ids.to("cpu", torch.int64)[positions] if token_type_ids is not None else torch.zeros_like(ids)
        )
        digest = hashlib.sha256(_KEY_VERSION)
        digest.update(f"|{self.fingerprint}|{self.state_indices}|{self.dtype}|".encode())
        for part in (positions, ids, types):
            digest.update(part.contiguous().numpy().tobytes())
            digest.update(b"|")
        return digest.hexdigest()

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.safetensors"

    def memory(
        self,
        model: Any,  # a GmapModel: its run_general computes the rows not cached
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> GeneralMemory:
        """The batch's general memory: cached rows read from disk, the others computed once and stored."""
        batch, width = input_ids.shape
        device = input_ids.device
        real = attention_mask.bool()
        states = torch.zeros(len(self.state_indices), batch, width, self.hidden_size, dtype=torch.float32, device=device)
        keys = [
            self.key(input_ids[row], attention_mask[row], None if token_type_ids is None else token_type_ids[row])
            for row in range(batch)
        ]
        missing: list[int] = []
        for row, key in enumerate(keys):
            stored = self._read(key)
            if stored is None or stored.shape[1] != int(real[row].sum()):
                missing.append(row)
                continue
            states[:, row, real[row]] = stored.to(device, torch.float32)
        self.hits += batch - len(missing)
        self.misses += len(missing)
        if missing:
            rows = torch.tensor(missing, device=device)
            types = None if token_type_ids is None else token_type_ids[rows]
            fresh = model.run_general(input_ids[rows], attention_mask[rows], types).states
            for j, row in enumerate(missing):
                values = fresh[:, j, real[row]].to(self.dtype)
                self._write(keys[row], values)
                states[:, row, real[row]] = values.to(torch.float32)
        return GeneralMemory(states, real, self.state_indices)

    def _read(self, key: str) -> torch.Tensor | None:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        path = self.path(key)
        if not path.is_file():
            return None
        try:
            return load_file(str(path))["states"]
        except (SafetensorError, OSError, KeyError) as exc:
            log.warning("%s: unreadable G-MAP cache entry, recomputing it (%s)", path, exc)
            return None

    def _write(self, key: str, values: torch.Tensor) -> None:
        from safetensors.torch import save_file

        path = self.path(key)
        # Written under a temporary name and renamed, so a concurrent reader
        # (another data-parallel process) never sees half a file.
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        with resource_errors(self.folder):
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                save_file({"states": values.detach().to("cpu").contiguous()}, str(tmp))
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()

    def stats(self) -> dict[str, Any]:
        return {"hits": self.hits, "misses": self.misses, "folder": str(self.folder)}


__all__ = ["MemoryCache"]
