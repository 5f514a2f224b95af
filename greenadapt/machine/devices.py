"""Where tensors live: the one reading of ``--device``, the one way batches reach it, and torch's CPU threads."""

from __future__ import annotations

import logging
from typing import Any

from greenadapt.errors import UsageError

log = logging.getLogger(__name__)


def pick_device(spec: str | None = "auto", local_rank: int = 0, *, allow_mps: bool = True) -> Any:
    """``--device``: auto (CUDA, then Apple MPS, then CPU), cpu, cuda, cuda:N, mps. Sets torch's CPU threads where a
    command deferred that (:func:`defer_cpu_threads`)."""
    import torch

    _set_deferred_threads()

    spec = spec or "auto"
    if spec == "auto":
        if torch.cuda.is_available():
            spec = f"cuda:{local_rank}"
        elif allow_mps and getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            spec = "mps"
        else:
            spec = "cpu"
    elif spec == "cuda":
        spec = f"cuda:{local_rank}"
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise UsageError(f"unknown --device {spec!r}", hint="auto, cpu, cuda, cuda:N or mps") from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise UsageError(f"unsupported --device {spec!r}", hint="auto, cpu, cuda, cuda:N or mps")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
        raise UsageError("--device mps but Apple's MPS backend is not available", hint="use --device cpu or auto")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError("--device cuda but no CUDA GPU is available", hint="use --device cpu or auto")
        visible = torch.cuda.device_count()
        if device.index is not None and device.index >= visible:
            # torchrun gives process N the GPU N: more processes than GPUs would fail deep in CUDA, and NCCL
            # refuses two ranks on one GPU anyway.
            raise UsageError(
                f"this process would run on {device}, but only {visible} CUDA GPU(s) are visible",
                hint="start at most one process per GPU (torchrun --nproc_per_node), or pick --device cuda:N with N below that",
            )
        torch.cuda.set_device(device)
    return device


# Where one of these exists, torch may find a GPU: NVIDIA's driver, AMD's ROCm (torch.cuda there too), WSL's GPU.
GPU_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def may_have_a_gpu() -> bool:
    """False where torch cannot find a GPU (a Linux machine with no GPU driver), found without importing torch (most of
    a cold predict from a cached ONNX export; compare's own process, whose runs train in its workers, needs no torch
    either); True where only torch can tell."""
    import os
    import sys

    return not sys.platform.startswith("linux") or any(os.path.exists(path) for path in GPU_DRIVER_PATHS)


def cuda_available() -> bool:
    """``torch.cuda.is_available()``, asked only where :func:`may_have_a_gpu`."""
    if not may_have_a_gpu():
        return False
    import torch

    return bool(torch.cuda.is_available())


def cuda_device_count() -> int:
    """``torch.cuda.device_count()`` (which makes no CUDA context), asked only where :func:`may_have_a_gpu`."""
    if not may_have_a_gpu():
        return 0
    import torch

    return int(torch.cuda.device_count())


# CPU features that run bfloat16 matrix products natively (x86: AMX, AVX-512 BF16; Arm: the BF16 extension), fastest first.
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")


def cpu_bf16_unit(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """What multiplies bfloat16 natively on this CPU: ``amx_bf16`` (AMX tiles), ``avx512_bf16``, ``bf16`` (Arm), or None
    (torch would emulate bf16, slower than fp32)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    flags = set(value.split())
                    return next((unit for unit in NATIVE_BF16_FLAGS if unit in flags), None)
    except OSError:
        return None
    return None


def cpu_has_native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU multiplies bfloat16 natively; without it torch emulates bf16, slower than fp32."""
    return cpu_bf16_unit(cpuinfo) is not None


def to_device(array: Any, device: Any) -> Any:
    """A NumPy array (or a CPU tensor) as a tensor on ``device``, without a host sync on CUDA.

    A copy from pageable memory to the GPU waits for the stream to drain, so a
    loop that copies its batch that way cannot queue the next step's kernels
    while the GPU runs this one; a copy from pinned memory is queued like a
    kernel (the caching host allocator keeps the buffer alive until it ends).
    """
    if device is None:  # a model that takes numpy arrays (ONNX Runtime's): no tensor, no torch
        return array
    import torch

    tensor = array if isinstance(array, torch.Tensor) else torch.from_numpy(array)
    if torch.device(device).type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def use_cpu_threads(requested: int = 0) -> int:
    """Set torch's CPU threads: ``requested``, or (0) the lower of torch's current count and the cores this process
    may use. torch counts the machine's cores (or its affinity mask) and not a cgroup's CPU quota, so in a container
    limited to 2 CPUs of a 64-core host it starts 64 threads that share 2 cores; OMP_NUM_THREADS and a compare
    worker's share (set lower before) are kept. Returns the count in effect; a deferred setting is then void."""
    import torch

    from greenadapt.machine.cores import usable_cores

    global _deferred_threads
    _deferred_threads = None

    threads = requested or min(torch.get_num_threads(), usable_cores())
    if threads != torch.get_num_threads():
        log.info("torch CPU threads: %d (was %d)", threads, torch.get_num_threads())
        torch.set_num_threads(threads)
    return threads


# A command that may never import torch (predict from a cached ONNX export) sets torch's threads when torch is first
# asked for a device, not at its start: importing torch only to set them was most of such a predict's start.
_deferred_threads: int | None = None


def defer_cpu_threads(requested: int = 0) -> None:
    """:func:`use_cpu_threads` (``requested``), run by the first :func:`pick_device`, if one comes."""
    global _deferred_threads
    _deferred_threads = requested


def _set_deferred_threads() -> None:
    global _deferred_threads
    if _deferred_threads is not None:
        requested, _deferred_threads = _deferred_threads, None
        use_cpu_threads(requested)


def inference_threads() -> int:
    """The CPU threads a model outside torch (ONNX Runtime's) runs on: torch's own count where torch was set up, else
    the count :func:`use_cpu_threads` would set, found without importing torch (OMP_NUM_THREADS, which torch follows,
    where it is set; never more than the usable cores)."""
    import os
    import sys

    from greenadapt.machine.cores import usable_cores

    if _deferred_threads is None and "torch" in sys.modules:
        import torch

        return int(torch.get_num_threads())
    if _deferred_threads:
        return _deferred_threads
    usable, omp = usable_cores(), os.environ.get("OMP_NUM_THREADS", "")
    return min(int(omp), usable) if omp.isdigit() and int(omp) > 0 else usable
