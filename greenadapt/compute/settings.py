"""The options of computing that training and inference share: where and in which precision, and which views are pooled."""

from __future__ import annotations

from dataclasses import dataclass

from greenadapt.compute.distributed import PRECISIONS
from greenadapt.options import PERFORMANCE, Settings, option

POOL_MODES = ("mean", "general", "domain")  # --pool: the mean of both tokenizers' logits, or one tokenizer's


@dataclass(frozen=True, kw_only=True)
class DeviceSettings(Settings):
    """Where a command computes, and in which precision."""

    device: str = option("auto", "--device", panel=PERFORMANCE, help="auto, cpu, cuda, cuda:N or mps.")
    precision: str = option(
        "auto", "--precision", panel=PERFORMANCE, choices=PRECISIONS, fingerprint="always",
        help="auto (CUDA: bf16, else fp16; CPU: bf16 where the CPU has it natively (avx512_bf16, AMX), else fp32), fp32, bf16, fp16.")
