"""``--runtime auto`` (the default): the runtime measured fastest on this kind of CPU among those whose answers are
fp32's and do not depend on the batch (issue 94, item 4), for the precision torch would run at.

The rule: the most sentences per second on the serving benchmark (docs/benchmarks.md, "The default runtime by CPU")
among the runtimes that give at least 99% of the sentences fp32's exact entities and give a sentence the same logits
alone and in any batch (torch: batches of one padded width, tests/test_padding_buckets.py; ONNX Runtime:
tests/test_onnx.py). ONNX int8 is the fastest everywhere it was measured, but gives fp32's entities on 93-97% of
the sentences: it is chosen only by ``--runtime onnx --quantize int8``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from greenadapt.machine.devices import cpu_bf16_unit, cuda_available


@dataclass(frozen=True)
class RuntimeChoice:
    runtime: str  # torch (at --precision auto: bf16 where the CPU has it) or onnx (fp32)
    measured: str  # the figures it rests on, for --help readers and docs/benchmarks.md


# Keyed by what multiplies torch's bf16 products on the CPU (greenadapt.machine.devices.cpu_bf16_unit); None: torch would
# run fp32, because nothing multiplies bf16 natively or because fp32 was asked (--precision fp32, or
# $GREENADAPT_CPU_AUTO_PRECISION=fp32 for auto). ONNX Runtime fp32 against torch fp32, paired by round: 2.25 ± 0.11 on a
# Zen 5 EPYC (torch's fp32 products run at half that CPU's rate), 1.29 ± 0.06 on an AVX-512 EPYC, 0.98 ± 0.07 (a tie)
# on a Zen 3 EPYC.
BY_CPU: dict[str | None, RuntimeChoice] = {
    "amx_bf16": RuntimeChoice("torch", "Xeon with AMX, one thread: torch bf16 ~170 sentences per CPU-s (99.70% fp32's), "
                                       "ONNX int8 136 (96.90%); ONNX fp32 runs no AMX kernel"),
    "avx512_bf16": RuntimeChoice("torch", "Zen 5 EPYC, 2 cores: torch bf16 244.6 sentences/s (99.80% fp32's), ONNX fp32 224.0 "
                                          "(100%; 0.94 ± 0.07x paired, but 1.9 s of cold start against 6.0), ONNX int8 330.1 (96.95%)"),
    "bf16": RuntimeChoice("torch", "Arm with BF16: not measured; torch bf16 as on the x86 CPUs with native bf16"),
    None: RuntimeChoice("onnx", "Zen 3 EPYC (AVX2), 2 cores: ONNX fp32 104.0 sentences/s (100% fp32's, 19 MiB less), torch "
                                "fp32 103.7: a tie, 0.98 ± 0.07x paired by round; the AVX-512 EPYC held in fp32: 1.29 ± 0.06x"),
}


def onnx_runtime_installed() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None


def chosen_runtime(runtime: str, quantize: str, device: str, *, precision: str = "auto", exportable: bool = True,
                   bf16_unit: Callable[[], str | None] = cpu_bf16_unit, onnx_installed: Callable[[], bool] = onnx_runtime_installed) -> str:
    """``torch`` or ``onnx`` for ``--runtime`` (``auto``: the table above) on ``device`` at ``--precision``.

    ``exportable``: whether this model folder can run in ONNX Runtime (a G-MAP model, or a multitask run over one: no).
    ``bf16_unit`` reads this CPU's unit, ``onnx_installed`` whether ONNX Runtime imports (tests give other machines').
    An ``auto`` that would pick ONNX Runtime where it is not installed, or for a folder it cannot run, is torch; so is
    one at ``--precision bf16`` or ``fp16`` (ONNX Runtime runs the fp32 graph: a product asked in bf16 is torch's).
    """
    if runtime != "auto":
        return runtime
    if quantize != "none":
        return "onnx"  # int8 is ONNX Runtime's
    if precision in ("bf16", "fp16"):
        return "torch"
    kind = device.split(":")[0]
    if kind not in ("auto", "cpu"):
        return "torch"
    if kind == "auto" and cuda_available():
        return "torch"
    from greenadapt.compute.distributed import cpu_auto_precision

    in_bf16 = precision == "auto" and cpu_auto_precision() == "bf16"
    choice = BY_CPU.get(bf16_unit() if in_bf16 else None, BY_CPU[None]).runtime
    if choice == "onnx" and not (exportable and onnx_installed()):
        return "torch"
    return choice
