"""This CPU's peak per precision: read from its own flags (with the assumption in words), and measured (issue 94): a
large matrix product per dtype, timed in CPU-seconds as well as wall seconds, so a share is per CPU-second and holds
on a shared machine; and the instruction set oneDNN really runs (its own verbose line, not the flags: with AMX turned
off by ONEDNN_MAX_CPU_ISA the flags still say AMX). What the benches' "share of peak" columns divide by
(bench/profile_training.py for training, bench/bench_serving.py for serving).

    python bench/cpu_peaks.py --threads 1,2          # flags' peaks beside measured ones, per CPU-second and per wall second

fp32: 32 FLOP (16 FMA) a cycle a core with AVX2 or AVX-512, else 16 (64 on a core with two 512-bit FMA pipes, a
Zen 5 EPYC's: measured there, below). fp32 is measured in torch and in ONNX Runtime, each as greenadapt runs it: on
a Zen 5 EPYC torch's fp32 products (MKL) reach half of what ONNX Runtime's reach (93-97 GFLOP per CPU-second a core
against 181-192), and the machine's peak is the higher (`machine_peak`). bf16: AMX tiles 1,024 FLOP a cycle a core,
AVX-512 BF16 64, else fp32's rate. int8: AMX-INT8 1,024 MAC a cycle a core; AVX-512 VNNI 64 (one 512-bit VNNI
product a cycle, as Zen 4 runs them; 128 on a core with two 512-bit FMA ports); AVX-VNNI 32; else 32 (AVX2: two
256-bit ``vpmaddubsw`` a cycle, 32 byte products each. The 16 this said before was passed on a Zen 3 EPYC: 83 GMAC
per CPU-second a core, which 16 a cycle reaches only at 5.2 GHz, past any Zen 3 EPYC's boost of 4.1 GHz). The clock is
/proc/cpuinfo's unless a bench is given the all-core clock (a core that boosts above it makes every share lower).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from pathlib import Path


def cpu_facts(cpuinfo: str = "/proc/cpuinfo") -> tuple[set[str], float, str]:
    """The CPU's flags, clock (MHz) and name, from /proc/cpuinfo: the name with its family and model, which tell the
    generation where a virtual machine names only the vendor's line ("AMD EPYC": family 25 model 1 is Zen 3, 26 is
    Zen 5)."""
    flags: set[str] = set()
    mhz, model = 0.0, "unknown"
    numbers: dict[str, str] = {}
    for line in Path(cpuinfo).read_text().splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "flags" and not flags:
            flags = set(value.split())
        elif key == "cpu MHz" and not mhz:
            mhz = float(value)
        elif key == "model name":
            model = value.strip()
        elif key in ("cpu family", "model") and key not in numbers:
            numbers[key] = value.strip()
    if numbers:
        model += " (" + ", ".join(f"{'family' if key == 'cpu family' else key} {value}" for key, value in numbers.items()) + ")"
    return flags, mhz, model


def native_bf16(flags: set[str]) -> bool:
    """Whether the CPU multiplies bf16 itself (AVX-512 BF16 or AMX): where greenadapt's ``--precision auto`` picks bf16,
    and where a bf16 measurement means anything (elsewhere torch converts to fp32 and back around every product)."""
    return "avx512_bf16" in flags or "amx_bf16" in flags


def runnable_precisions(requested: list[str], flags: set[str]) -> tuple[list[str], list[str]]:
    """The precisions of ``requested`` this CPU runs natively, and a note for each skipped."""
    skipped = [p for p in requested if p == "bf16" and not native_bf16(flags)]
    notes = [f"{p}: skipped, this CPU has no native bf16 (no avx512_bf16 or amx_bf16 flag)" for p in skipped]
    return [p for p in requested if p not in skipped], notes


def cpu_peaks(flags: set[str], cores: int, mhz: float) -> tuple[dict[str, float], dict[str, str]]:
    """Peak GFLOP/s per precision from the CPU's own flags, and what each peak assumes, in words (``"assumption"``: the
    whole sentence, cores and clock included)."""
    ghz = mhz / 1000
    fp32 = 32 if "avx512f" in flags or "avx2" in flags else 16
    if "amx_bf16" in flags:  # fp32 stays on AVX-512: AMX multiplies bf16 and int8 only
        bf16, unit = 1024, "AMX tiles (1,024 bf16 FLOP/cycle/core)"
    elif "avx512_bf16" in flags:
        bf16, unit = 64, "AVX-512 BF16 (64 bf16 FLOP/cycle/core)"
    else:
        bf16, unit = fp32, "no native bf16 (bf16 runs at fp32's rate)"
    units = {"fp32": f"{fp32} FLOP/cycle/core (FMA)", "bf16": unit}
    units["assumption"] = f"{cores} cores × {ghz:.2f} GHz; fp32 {units['fp32']}, bf16 by {unit}"
    return {"fp32": cores * ghz * fp32, "bf16": cores * ghz * bf16}, units


def int8_peak(flags: set[str], cores: int, ghz: float) -> tuple[float, str]:
    """Peak int8 GMAC/s of this CPU, and the assumption in words."""
    if "amx_int8" in flags:
        per_cycle, unit = 1024, "AMX-INT8 tiles (1,024 int8 MAC/cycle/core)"
    elif "avx512_vnni" in flags:
        per_cycle, unit = 64, "AVX-512 VNNI (64 int8 MAC/cycle/core: one 512-bit product a cycle)"
    elif "avx_vnni" in flags:
        per_cycle, unit = 32, "AVX-VNNI (32 int8 MAC/cycle/core)"
    else:
        per_cycle, unit = 32, "AVX2 (32 int8 MAC/cycle/core: two 256-bit vpmaddubsw a cycle)"
    return cores * ghz * per_cycle, f"{cores} cores × {ghz:.2f} GHz × {unit}"


# --- measured: what this machine reaches, per CPU-second ---


# Who multiplies each dtype in greenadapt: torch (training, --runtime torch) and ONNX Runtime (--runtime onnx).
LIBRARIES = {"fp32": ("torch", "onnxruntime"), "bf16": ("torch",), "int8": ("onnxruntime",)}


def measured_peak(dtype: str, threads: int, *, library: str | None = None, size: int = 2048, repeats: int = 5,
                  clocks: tuple[Callable[[], float], Callable[[], float]] | None = None) -> dict[str, float]:
    """GFLOP per CPU-second and per wall second of ``size``×``size`` matrix products in ``dtype`` on ``threads``
    threads, by ``library`` (default: the first of :data:`LIBRARIES`; int8 is ONNX Runtime's MatMulInteger, in GMAC):
    the best of ``repeats`` timed products after one warm-up. CPU-seconds are the process's own (user + system), so
    other work on the machine does not lower the figure; wall time is shown beside it."""
    import time

    cpu_clock, wall_clock = clocks or (time.process_time, time.perf_counter)
    library = library or LIBRARIES[dtype][0]
    if library not in LIBRARIES[dtype]:
        raise ValueError(f"{dtype} is not multiplied by {library} in greenadapt (by {', '.join(LIBRARIES[dtype])})")
    product = _product(dtype, size, threads, library)
    product()
    best_cpu = best_wall = float("inf")
    for _ in range(repeats):
        cpu, wall = cpu_clock(), wall_clock()
        product()
        best_cpu, best_wall = min(best_cpu, cpu_clock() - cpu), min(best_wall, wall_clock() - wall)
    work = size**3 * (1 if dtype == "int8" else 2) / 1e9  # int8 in MACs, as int8_peak counts them
    return {"per_cpu_second": work / max(best_cpu, 1e-9), "per_wall_second": work / max(best_wall, 1e-9),
            "cpu_seconds": best_cpu, "wall_seconds": best_wall}


def machine_peak(dtype: str, threads: int) -> dict[str, Any]:
    """:func:`measured_peak` of ``dtype`` by each library that multiplies it in greenadapt (those installed), the
    highest: what this machine reaches, and (``"library"``) who reaches it. A Zen 5 EPYC's fp32 is ONNX Runtime's,
    twice torch's."""
    reached = []
    for library in LIBRARIES[dtype]:
        try:
            reached.append({**measured_peak(dtype, threads, library=library), "library": library})
        except ImportError:
            continue
    if not reached:
        raise ImportError(f"none of {', '.join(LIBRARIES[dtype])} is installed to measure {dtype}")
    return max(reached, key=lambda got: got["per_cpu_second"])


def _product(dtype: str, size: int, threads: int, library: str) -> Callable[[], object]:
    if library == "onnxruntime":
        import numpy as np
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper

        rng = np.random.default_rng(0)
        if dtype == "int8":
            node, types, out = "MatMulInteger", (TensorProto.UINT8, TensorProto.INT8), TensorProto.INT32
            feed = {"a": rng.integers(0, 255, (size, size), dtype=np.uint8), "b": rng.integers(-127, 127, (size, size), dtype=np.int8)}
        else:
            node, types, out = "MatMul", (TensorProto.FLOAT, TensorProto.FLOAT), TensorProto.FLOAT
            feed = {name: rng.standard_normal((size, size), dtype=np.float32) for name in "ab"}
        graph = helper.make_graph([helper.make_node(node, ["a", "b"], ["c"])], dtype,
                                  [helper.make_tensor_value_info(name, kind, [size, size]) for name, kind in zip("ab", types, strict=True)],
                                  [helper.make_tensor_value_info("c", out, [size, size])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(onnx._serialize(model) if hasattr(onnx, "_serialize") else model.SerializeToString(),
                                       options, providers=["CPUExecutionProvider"])
        return lambda: session.run(None, feed)
    import torch

    torch.set_num_threads(threads)
    kind = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    a, b = torch.randn(size, size).to(kind), torch.randn(size, size).to(kind)
    return lambda: torch.mm(a, b)


def onednn_isa(verbose_output: str) -> str | None:
    """The instruction set oneDNN dispatches to, from its verbose lines (``ONEDNN_VERBOSE=1``): the ISA a primitive
    ran with (``brg_matmul:avx10_1_512_amx``), else the ``isa:`` info line; None when oneDNN said nothing."""
    import re

    ran = re.findall(r"(?:brg|gemm|jit)[\w]*:([a-z0-9_]+)", verbose_output)
    if ran:
        return max(set(ran), key=ran.count)
    said = re.search(r"onednn_verbose,[^\n]*info,cpu,isa:([^\n]+)", verbose_output)
    return said.group(1).strip() if said else None


def onednn_isa_of_bf16() -> str | None:
    """Run one bf16 linear layer in a fresh process with ONEDNN_VERBOSE=1 and read which ISA oneDNN used."""
    import os
    import subprocess
    import sys

    code = ("import torch; x = torch.randn(64, 256, dtype=torch.bfloat16); w = torch.nn.Linear(256, 256).to(torch.bfloat16)\n"
            "with torch.no_grad(): w(x); w(x)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "ONEDNN_VERBOSE": "1"},
                          timeout=120, check=False)
    return onednn_isa(done.stdout + done.stderr)


def table(threads: list[int], dtypes: list[str]) -> list[str]:
    import os

    flags, mhz, model = cpu_facts()
    cores = os.cpu_count() or 1
    flops, words = cpu_peaks(flags, cores, mhz)
    int8, int8_words = int8_peak(flags, cores, mhz / 1000)
    per_core = {**{k: v / cores for k, v in flops.items()}, "int8": int8 / cores}
    rows = [f"CPU: {model}, {cores} cores, {mhz:.0f} MHz; oneDNN runs bf16 on: {onednn_isa_of_bf16() or 'unknown (no verbose line)'}",
            f"flags' peaks: {words['assumption']}; int8 {int8_words}", "",
            "| dtype | library | threads | measured per CPU-second | per wall second | flags' peak a core | measured / flags' (a core) |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for dtype in dtypes:
        for library in LIBRARIES[dtype]:
            for count in threads:
                try:
                    got = measured_peak(dtype, count, library=library)
                except ImportError as missing:
                    rows.append(f"| {dtype} | {library} | {count} | skipped: {missing.name} is not installed | | | |")
                    continue
                unit = "GMAC" if dtype == "int8" else "GFLOP"
                rows.append(f"| {dtype} | {library} | {count} | {got['per_cpu_second']:.0f} {unit} | {got['per_wall_second']:.0f} {unit} | "
                            f"{per_core[dtype]:.0f} {unit} | {got['per_cpu_second'] / per_core[dtype]:.0%} |")
    return rows


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", default="1,2", help="thread counts to measure at, comma-separated")
    parser.add_argument("--dtypes", default="fp32,bf16,int8")
    args = parser.parse_args()
    flags = cpu_facts()[0]
    dtypes, notes = runnable_precisions(args.dtypes.split(","), flags)
    print("\n".join([*table([int(t) for t in args.threads.split(",")], dtypes), *notes]))


if __name__ == "__main__":
    main()
