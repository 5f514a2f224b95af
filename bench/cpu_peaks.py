"""This CPU's peak per precision, read from its own flags, with the assumption in words: what the benches' "share of
peak" columns divide by (bench/profile_training.py for training, bench/bench_serving.py for serving).

fp32: 32 FLOP (16 FMA) a cycle a core with AVX2 or AVX-512, else 16. bf16: AMX tiles 1,024 FLOP a cycle a core,
AVX-512 BF16 64, else fp32's rate. int8: AMX-INT8 1,024 MAC a cycle a core; AVX-512 VNNI 64 (one 512-bit VNNI
product a cycle, as Zen 4 runs them; 128 on a core with two 512-bit FMA ports); AVX-VNNI 32; else 16 (AVX2). The clock
is /proc/cpuinfo's unless a bench is given the all-core clock (a core that boosts above it makes every share lower).
"""

from __future__ import annotations

from pathlib import Path


def cpu_facts() -> tuple[set[str], float, str]:
    """The CPU's flags, clock (MHz) and model name, from /proc/cpuinfo."""
    flags: set[str] = set()
    mhz, model = 0.0, "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "flags" and not flags:
            flags = set(value.split())
        elif key == "cpu MHz" and not mhz:
            mhz = float(value)
        elif key == "model name":
            model = value.strip()
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
        per_cycle, unit = 16, "AVX2 (16 int8 MAC/cycle/core)"
    return cores * ghz * per_cycle, f"{cores} cores × {ghz:.2f} GHz × {unit}"
