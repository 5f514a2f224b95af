"""The benches' peaks are read from the CPU's own flags (issues 83 and 85): an AMX machine and an AVX-512 one are
each read right, and a precision the CPU does not run natively is skipped with a note, not timed as if it did."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
ZEN4 = {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"}
SAPPHIRE_RAPIDS = ZEN4 | {"amx_bf16", "amx_int8", "amx_tile"}
HASWELL = {"avx2", "fma"}


@pytest.fixture(scope="module")
def peaks():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("cpu_peaks", BENCH / "cpu_peaks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["cpu_peaks"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("flags", "fp32", "bf16", "int8", "unit"), [
    (ZEN4, 32, 64, 64, "AVX-512 VNNI"),
    (SAPPHIRE_RAPIDS, 32, 1024, 1024, "AMX-INT8"),
    (HASWELL, 32, 32, 16, "AVX2"),
])
def test_each_precisions_peak_comes_from_the_widest_unit_the_flags_show(peaks, flags: set[str], fp32: int, bf16: int,  # type: ignore[no-untyped-def]
                                                                        int8: int, unit: str) -> None:
    flops, words = peaks.cpu_peaks(flags, 2, 2000.0)
    assert flops == {"fp32": 2 * 2.0 * fp32, "bf16": 2 * 2.0 * bf16}  # fp32 never on AMX: it multiplies bf16 and int8 only
    macs, said = peaks.int8_peak(flags, 2, 2.0)
    assert macs == 2 * 2.0 * int8 and unit in said and "2 cores × 2.00 GHz" in words["assumption"]


def test_bf16_is_skipped_with_a_note_where_the_cpu_does_not_run_it(peaks) -> None:  # type: ignore[no-untyped-def]
    assert peaks.runnable_precisions(["fp32", "bf16"], ZEN4) == (["fp32", "bf16"], [])
    assert peaks.runnable_precisions(["fp32", "bf16"], SAPPHIRE_RAPIDS) == (["fp32", "bf16"], [])
    runs, notes = peaks.runnable_precisions(["fp32", "bf16"], HASWELL)
    assert runs == ["fp32"] and len(notes) == 1 and "no native bf16" in notes[0]
