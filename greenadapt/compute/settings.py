"""The options of computing that training and inference share: where, in which precision, on how many CPU threads, and
which views are pooled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from greenadapt.compute.distributed import PRECISIONS
from greenadapt.defaults import MAX_THREADS
from greenadapt.options import EVALUATION, PERFORMANCE, Settings, option

T = TypeVar("T", bound="ThreadSettings")

POOL_MODES = ("mean", "general", "domain")  # --pool: the mean of both tokenizers' logits, or one tokenizer's


@dataclass(frozen=True, kw_only=True)
class ThreadSettings(Settings):
    """How many CPU threads torch's kernels use, set in the process before the command runs (every command that runs a
    model: the device group's, and ``qa``'s, which declares its own ``--device``)."""

    threads: int = option(0, "--threads", panel=PERFORMANCE, minimum=0, maximum=MAX_THREADS, metavar="N",
                          help="CPU threads of torch's kernels. 0 (the default): at most the cores this process may use "
                               "(its CPU affinity and cgroup quota, which torch's own default ignores), and never more "
                               "than OMP_NUM_THREADS or a compare worker's share.")

    @classmethod
    def build(cls: type[T], config: Any = None, /, **values: Any) -> T:
        from greenadapt.machine.load import choose_wait_policy

        choose_wait_policy()  # before the checks import torch: threads that wait passively on a busy machine
        return super().build(config, **values)

    def configure_process(self) -> None:
        from greenadapt.machine.devices import use_cpu_threads
        from greenadapt.machine.load import choose_wait_policy

        choose_wait_policy()  # (settings made without build: still before torch, where it is not imported yet)
        use_cpu_threads(self.threads)


@dataclass(frozen=True, kw_only=True)
class DeviceSettings(ThreadSettings):
    """Where a command computes, in which precision, on how many CPU threads."""

    device: str = option("auto", "--device", panel=PERFORMANCE, help="auto, cpu, cuda, cuda:N or mps.")
    precision: str = option(
        "auto", "--precision", panel=PERFORMANCE, choices=PRECISIONS, fingerprint="always",
        help="auto (CUDA: bf16, else fp16; CPU: bf16 where the CPU has it natively (avx512_bf16, AMX), else fp32), fp32, bf16, fp16.")


@dataclass(frozen=True, kw_only=True)
class PoolSettings(Settings):
    """Which views' logits a model's answers are made of: one declaration for inference (``LoadSettings``) and for
    the scoring that ends training (finetune's and multitask's, through ``option_as_in`` with their own default)."""

    pool: str = option("mean", "--pool", panel=EVALUATION, choices=POOL_MODES,
                       help="Logits at test time: mean (of both tokenizers), general (T_LM) or domain (T̂).")
