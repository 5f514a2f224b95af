"""Options every training command shares (``finetune``, ``multitask``, ``pretrain``, ``compare``), each declared once."""

from __future__ import annotations

from dataclasses import dataclass

from greenadapt.defaults import check_seed
from greenadapt.errors import UsageError
from greenadapt.options import PERFORMANCE, RUN_CONTROL, TRAINING, Settings, option
from greenadapt.training.distributed import PRECISIONS

POOL_MODES = ("mean", "general", "domain")  # --pool: the mean of both tokenizers' logits, or one tokenizer's


def parse_seeds(text: str | None) -> tuple[int, ...] | None:
    """``--seeds 1,2,3`` as integers (None: not given)."""
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--seeds {text!r} is not a comma-separated list of integers", hint="e.g. --seeds 1,2,3") from None


def check_seeds(seeds: tuple[int, ...]) -> tuple[int, ...]:
    """Distinct seeds in range."""
    if not seeds:
        raise UsageError("--seeds is empty", hint="e.g. --seeds 1,2,3")
    if len(set(seeds)) != len(seeds):
        text = ",".join(map(str, seeds))
        raise UsageError(f"--seeds {text!r} repeats a seed: it needs distinct integers", hint="each seed once, e.g. --seeds 1,2,3")
    return tuple(check_seed(s, option="--seeds") for s in seeds)


@dataclass(frozen=True, kw_only=True)
class ScheduleSettings(Settings):
    """AdamW's schedule beyond the learning rate."""

    warmup: float = option(0.1, "--warmup", panel=TRAINING, help="Fraction of the steps spent warming up.")
    weight_decay: float = option(0.01, "--weight-decay", panel=TRAINING, help="AdamW weight decay.")


@dataclass(frozen=True, kw_only=True)
class DeviceSettings(Settings):
    """Where a command computes, and in which precision."""

    device: str = option("auto", "--device", panel=PERFORMANCE, help="auto, cpu, cuda, cuda:N or mps.")
    precision: str = option(
        "auto", "--precision", panel=PERFORMANCE, choices=PRECISIONS,
        help="auto (CUDA: bf16, else fp16; CPU: bf16 where the CPU has it natively (avx512_bf16, AMX), else fp32), fp32, bf16, fp16.")


@dataclass(frozen=True, kw_only=True)
class CompileSettings(Settings):
    compile: bool = option(False, "--compile", panel=PERFORMANCE,
                           help="Compile the training forward and backward with torch.compile (the first steps pay the compilation; "
                                "docs/benchmarks.md says where it pays).")


@dataclass(frozen=True, kw_only=True)
class ShapeSettings(Settings):
    """Fewer batch shapes, for a compiled model (speed only: no stage records them)."""

    pad_to_multiple: int = option(
        1, "--pad-to-multiple", panel=PERFORMANCE, metavar="N", minimum=1,
        help="Round each training batch's width up to a multiple of N wordpieces (e.g. 32): a handful of shapes, so a "
             "compiled model (--compile, --cuda-graphs) compiles a handful of times. Padding is masked: results change only by rounding.")
    cuda_graphs: bool = option(
        False, "--cuda-graphs", panel=PERFORMANCE,
        help="GPU: compile with CUDA graphs (torch.compile's reduce-overhead mode), for small batches whose steps are bound "
             "by kernel launches; use with --pad-to-multiple.")


@dataclass(frozen=True, kw_only=True)
class TrackerSettings(Settings):
    report_to: tuple[str, ...] = option(
        (), "--report-to", panel=RUN_CONTROL, metavar="TRACKER",
        help="Experiment trackers: tensorboard, mlflow (repeat, or comma-separated): every step's loss, lr and gradient norm, "
             "dev and test scores, the run's options (the trackers extra: pip install tensorboard mlflow-skinny; docs/trackers.md).")
