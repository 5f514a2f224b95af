"""How a fine-tuned model is run at inference: the one owner of these settings and their defaults.

``greenadapt predict``, ``greenadapt.predict``, ``greenadapt.load`` and ``greenadapt.pipeline`` all take
them; the library functions below the API take this object rather than the loose values.
"""

from __future__ import annotations

from dataclasses import dataclass

from greenadapt.errors import UsageError
from greenadapt.training.pooling import check_pool


@dataclass(frozen=True)
class InferenceOptions:
    pool: str = "mean"  # mean: average of both tokenizers' word-level predictions (the paper's); general; domain
    batch_size: int = 64
    device: str = "auto"  # auto: CUDA when available
    precision: str = "auto"  # auto: bf16/fp16 autocast on CUDA, fp32 elsewhere
    general_model: str | None = None  # G-MAP: its general model, if not the recorded one
    runtime: str = "torch"  # torch, or onnx: ONNX Runtime on the CPU (greenadapt[onnx])
    quantize: str = "none"  # with onnx: int8 (dynamic quantization)

    def check(self) -> None:
        from greenadapt.inference.onnx_runtime import check_runtime

        check_pool(self.pool)
        if self.batch_size < 1:
            raise UsageError(f"--batch-size must be at least 1 (got {self.batch_size})")
        check_runtime(self.runtime, self.quantize, self.device)


DEFAULT_INFERENCE = InferenceOptions()
