"""Where a training process runs: rank, world size, device, mixed precision.

:func:`init_distributed` joins the process group ``torchrun`` (or ``accelerate
launch``) describes, or runs alone; every training loop uses its
:class:`DistContext` for the device and the collectives (no-ops alone).

Every collective goes through :class:`DistContext`, which keeps the tensors it
handed to the backend alive until the backend has let go of them. Gloo's worker
threads drop a finished collective's tensors a moment *after* the caller's wait
returns; if the caller's reference was the last Python one, the worker must
take the GIL to free the tensor's Python object, and once the interpreter is
finalizing, that thread is ended inside a C++ destructor: ``terminate called
without an active exception`` and SIGABRT, after a run that had finished and
written everything (issue 33). DDP keeps the backend (and its threads) alive
past ``destroy_process_group``, so joining them is not an option.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from greenadapt.errors import UsageError
from greenadapt.machine.devices import pick_device

log = logging.getLogger(__name__)


@dataclass
class DistContext:
    """Where this process runs: rank, world size, device; all-reduce helpers that are no-ops alone."""

    rank: int = 0
    world: int = 1
    device: Any = "cpu"
    # (tensor, its use count before the collective): held until the backend's count on it is gone
    _handed_over: list[tuple[Any, int]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.device, str):
            import torch

            self.device = torch.device(self.device)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_reduce_sum(self, tensor: Any) -> Any:
        if self.world > 1:
            import torch.distributed as dist

            self._collective(lambda: dist.all_reduce(tensor, op=dist.ReduceOp.SUM), tensor)
        return tensor

    def broadcast_int(self, value: int) -> int:
        if self.world == 1:
            return value
        import torch
        import torch.distributed as dist

        tensor = torch.tensor([value], dtype=torch.long, device=self.device)
        self._collective(lambda: dist.broadcast(tensor, src=0), tensor)
        return int(tensor.item())

    def all_gather_json(self, value: Any) -> list[Any]:
        """Every process's JSON-able ``value``, in rank order (no pickle: only JSON crosses between processes)."""
        if self.world == 1:
            return [value]
        import torch
        import torch.distributed as dist

        data = json.dumps(value).encode("utf-8")
        size = torch.tensor([len(data)], dtype=torch.long, device=self.device)
        sizes = [torch.zeros_like(size) for _ in range(self.world)]
        self._collective(lambda: dist.all_gather(sizes, size), size, *sizes)
        lengths = [int(s.item()) for s in sizes]
        mine = torch.zeros(max(lengths), dtype=torch.uint8)
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        mine = mine.to(self.device)
        gathered = [torch.empty_like(mine) for _ in range(self.world)]
        self._collective(lambda: dist.all_gather(gathered, mine), mine, *gathered)
        return [json.loads(bytes(t[:n].cpu().numpy()).decode("utf-8")) for t, n in zip(gathered, lengths)]

    def _collective(self, run: Callable[[], Any], *tensors: Any) -> None:
        """Run one collective over ``tensors`` and hold them until the backend has released them."""
        counts = [t._use_count() for t in tensors]
        run()
        self._handed_over.extend(zip(tensors, counts))
        self._handed_over = [(t, n) for t, n in self._handed_over if t._use_count() > n]

    def _release_handed_over(self, wait_s: float = 5.0) -> None:
        """Let go of the tensors the backend held, once it no longer does; any it still holds are never freed."""
        deadline = time.monotonic() + wait_s
        while self._handed_over:
            self._handed_over = [(t, n) for t, n in self._handed_over if t._use_count() > n]
            if not self._handed_over or time.monotonic() > deadline:
                break
            time.sleep(0.001)
        for tensor, _ in self._handed_over:
            # A backend thread freeing a Python object at interpreter exit aborts the process (module docstring);
            # a few bytes kept for the process's lifetime do not.
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(tensor))
        if self._handed_over:
            log.debug("%d tensor(s) still held by the process group's threads; kept for the process's lifetime", len(self._handed_over))
        self._handed_over = []

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        """Leave the process able to exit cleanly: let go of every tensor a collective handed to the backend only once
        the backend has (on success, error and stop alike). The group itself is left at the process's exit."""
        self._release_handed_over()


def init_distributed(device: str = "auto") -> DistContext:
    """Join the process group torchrun describes (WORLD_SIZE > 1), else run alone; pick the device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch_device = pick_device(device, local_rank, allow_mps=world == 1)
    ctx = DistContext(rank=rank, world=world, device=torch_device)
    if world > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            _join_group(dist, torch_device)
            # Left at exit, not at the run's end: a second run in the process (a script under torchrun calling
            # finetune twice) joined again on the same MASTER_PORT, and a rank that did so before rank 0 had torn
            # down the first group's store reached the old store and waited forever. Later runs use this group.
            atexit.register(_leave_group)
        log.info("data parallel: rank %d of %d on %s", rank, world, torch_device)
    return ctx


def _leave_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():  # unless the caller's own code left it first
        dist.destroy_process_group()


def _join_group(dist: Any, device: Any) -> None:
    """``dist.init_process_group`` in a helper thread while the main thread waits for it.

    Joining blocks in C++ until every rank has joined, and Python runs a signal handler only in the main thread
    between bytecodes: a rank waiting for one that never came (refused before joining: torchrun gives rank 1 the GPU
    cuda:1 on a one-GPU machine) ignored torchrun's SIGTERM until its SIGKILL 30 s later. Waiting on an event, the
    main thread takes the signal and the run ends as a stopped one; the helper is a daemon and the exit deadline of
    :func:`greenadapt.cli._exits.entry_point` bounds the rest.
    """
    import threading

    joined = threading.Event()
    failed: list[BaseException] = []

    def join() -> None:
        try:
            if device.type == "cuda":  # the current CUDA device is per thread: the same as the main thread's
                import torch

                torch.cuda.set_device(device)
            dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        except BaseException as error:  # handed to the main thread, which raises it
            failed.append(error)
        finally:
            joined.set()

    threading.Thread(target=join, name="greenadapt-join-process-group", daemon=True).start()
    joined.wait()
    if failed:
        raise failed[0]


CPU_AUTO_PRECISION_ENV = "GREENADAPT_CPU_AUTO_PRECISION"


def cpu_auto_precision() -> str:
    """``$GREENADAPT_CPU_AUTO_PRECISION``: what ``--precision auto`` is on a CPU with native bf16 (``bf16``, the default,
    or ``fp32``); any other value is refused rather than ignored."""
    value = os.environ.get(CPU_AUTO_PRECISION_ENV, "").strip().lower()
    if value not in ("", "auto", "bf16", "fp32"):
        raise UsageError(f"${CPU_AUTO_PRECISION_ENV}={value!r} is not a CPU precision",
                         hint="set it to fp32 (keep a CPU in fp32) or bf16, or unset it; fp16 is for CUDA (--precision fp16)")
    return "fp32" if value == "fp32" else "bf16"


def cpu_precision(precision: str) -> str:
    """What ``--precision`` means on a CPU, ``fp32`` or ``bf16``, without torch: bf16 is refused where the CPU would
    emulate it, and fp16 (CUDA's) is fp32 with a warning."""
    from greenadapt.machine.devices import cpu_has_native_bf16

    check_precision_name(precision)
    if precision == "auto":
        # bf16 where the CPU multiplies it natively: 1.5x the steps/s of fp32 at the same F1 (NCBI-disease, 3 seeds,
        # docs/benchmarks.md "bf16 on the CPU"); elsewhere torch would emulate it, slower than fp32.
        # $GREENADAPT_CPU_AUTO_PRECISION=fp32 keeps fp32 (bit-for-bit comparisons with older runs, the test suite).
        return "bf16" if cpu_has_native_bf16() and cpu_auto_precision() != "fp32" else "fp32"
    if precision == "bf16":
        # autocast keeps the master weights and the optimizer state in fp32; only the products run in bf16
        if not cpu_has_native_bf16():
            raise UsageError("--precision bf16: this CPU has no native bfloat16 (avx512_bf16 or AMX), so torch would emulate "
                             "it, slower than fp32", hint="use --precision fp32 (or auto) on this machine")
        return "bf16"
    if precision == "fp16":
        log.warning("--precision fp16 needs a CUDA device; training in fp32 on cpu")
    return "fp32"


def check_precision_name(precision: str) -> None:
    if precision not in PRECISIONS:
        raise UsageError(f"unknown --precision {precision!r}", hint="auto, fp32, bf16 or fp16")


def autocast_dtype(precision: str, device: Any) -> Any:
    """The autocast dtype for ``--precision`` on ``device`` (None: full fp32)."""
    import torch

    if device.type == "cpu":
        return torch.bfloat16 if cpu_precision(precision) == "bf16" else None
    check_precision_name(precision)
    if device.type != "cuda" or precision == "fp32":
        if precision in ("bf16", "fp16"):
            log.warning("--precision %s needs a CUDA device; training in fp32 on %s", precision, device)
        return None
    if precision == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if precision == "bf16" else torch.float16


PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # --precision


def check_precision(precision: str, device_spec: str | None) -> None:
    """``--precision`` against ``--device`` before any data is read: the one refusal :func:`autocast_dtype` would
    give later, for a run that will be on the CPU (a GPU is only known once it is opened). No torch is imported
    where there is no GPU driver (:func:`~greenadapt.machine.devices.cuda_available`)."""
    from greenadapt.machine.devices import cuda_available

    cpu_auto_precision()
    if device_spec == "cpu" or (device_spec in (None, "auto") and not cuda_available()):
        cpu_precision(precision)
    else:
        check_precision_name(precision)


# A torch dtype's name, as --precision names it.
PRECISION_OF_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def precision_used(precision: str, device: Any) -> str:
    """What ``--precision`` means on ``device``, as a manifest records it: ``fp32``, ``bf16`` or ``fp16``."""
    dtype = autocast_dtype(precision, device)
    return "fp32" if dtype is None else PRECISION_OF_DTYPE[str(dtype).removeprefix("torch.")]


def autocast(device: Any, dtype: Any) -> Any:
    """Autocast to ``dtype`` on ``device`` (from :func:`autocast_dtype`); a plain context for full fp32 (None),
    which also runs on devices autocast does not know, such as ``meta``."""
    import contextlib

    import torch

    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def grad_scaler(dtype: Any, device: Any) -> Any:
    """A loss scaler for fp16 autocast on ``device`` (None for bf16 and fp32, which need none)."""
    import torch

    return torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
