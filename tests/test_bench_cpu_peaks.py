"""The benches' peaks are read from the CPU's own flags (issues 83 and 85): an AMX machine and an AVX-512 one are
each read right, and a precision the CPU does not run natively is skipped with a note, not timed as if it did."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_helpers import bench_module

BENCH = Path(__file__).resolve().parent.parent / "bench"
ZEN4 = {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni"}
SAPPHIRE_RAPIDS = ZEN4 | {"amx_bf16", "amx_int8", "amx_tile"}
HASWELL = {"avx2", "fma"}


@pytest.fixture(scope="module")
def peaks():  # type: ignore[no-untyped-def]
    return bench_module("cpu_peaks")


@pytest.mark.parametrize(("flags", "fp32", "bf16", "int8", "unit"), [
    (ZEN4, 32, 64, 64, "AVX-512 VNNI"),
    (SAPPHIRE_RAPIDS, 32, 1024, 1024, "AMX-INT8"),
    (HASWELL, 32, 32, 32, "AVX2"),
])
def test_each_precisions_peak_comes_from_the_widest_unit_the_flags_show(  # type: ignore[no-untyped-def]
        peaks, flags: set[str], fp32: int, bf16: int, int8: int, unit: str) -> None:
    flops, words = peaks.cpu_peaks(flags, 2, 2000.0)
    assert flops == {"fp32": 2 * 2.0 * fp32, "bf16": 2 * 2.0 * bf16}  # fp32 never on AMX: it multiplies bf16 and int8 only
    macs, said = peaks.int8_peak(flags, 2, 2.0)
    assert macs == 2 * 2.0 * int8 and unit in said and "2 cores × 2.00 GHz" in words["assumption"]


def test_bf16_is_skipped_with_a_note_where_the_cpu_does_not_run_it(peaks) -> None:  # type: ignore[no-untyped-def]
    assert peaks.runnable_precisions(["fp32", "bf16"], ZEN4) == (["fp32", "bf16"], [])
    assert peaks.runnable_precisions(["fp32", "bf16"], SAPPHIRE_RAPIDS) == (["fp32", "bf16"], [])
    runs, notes = peaks.runnable_precisions(["fp32", "bf16"], HASWELL)
    assert runs == ["fp32"] and len(notes) == 1 and "no native bf16" in notes[0]


def test_a_measured_peak_is_work_over_the_best_cpu_time_and_wall_beside_it(  # type: ignore[no-untyped-def]
        peaks, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 94, item 2: a share per CPU-second holds on a shared machine; wall time is shown beside it, not used."""
    ticks = {"cpu": 0.0, "wall": 0.0}
    spent = iter([(0.5, 2.0), (0.25, 1.0), (0.4, 0.5), (0.3, 3.0), (0.9, 0.9), (0.6, 0.6)])  # warm-up, then 5 timed

    def product() -> None:
        cpu, wall = next(spent)
        ticks["cpu"] += cpu
        ticks["wall"] += wall

    monkeypatch.setattr(peaks, "_product", lambda dtype, size, threads, library: product)
    got = peaks.measured_peak("fp32", 2, size=1000, repeats=5, clocks=(lambda: ticks["cpu"], lambda: ticks["wall"]))
    assert got["cpu_seconds"] == pytest.approx(0.25) and got["wall_seconds"] == pytest.approx(0.5)  # each the best
    assert got["per_cpu_second"] == pytest.approx(2 * 1000**3 / 1e9 / 0.25)  # 2 FLOP a multiply-add
    monkeypatch.setattr(peaks, "_product", lambda dtype, size, threads, library: product)
    spent = iter([(1.0, 1.0)] * 6)
    assert peaks.measured_peak("int8", 1, size=1000, repeats=5, clocks=(lambda: ticks["cpu"], lambda: ticks["wall"]))["per_cpu_second"] \
        == pytest.approx(1.0)  # int8 in MACs, as int8_peak counts them


def test_the_isa_is_what_onednn_ran_not_what_the_flags_say(peaks) -> None:  # type: ignore[no-untyped-def]
    amx = ("onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with float16, Intel DL Boost and bfloat16 support and Intel AMX\n"
           "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx10_1_512_amx,undef,src:bf16::blocked:ab::f0\n") * 3
    assert peaks.onednn_isa(amx) == "avx10_1_512_amx"
    capped = ("onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with Intel DL Boost and bfloat16 support\n"
              "onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_bf16,undef,src:bf16\n")
    assert peaks.onednn_isa(capped) == "avx512_core_bf16"  # ONEDNN_MAX_CPU_ISA took AMX away: the flags would still say it
    assert peaks.onednn_isa("onednn_verbose,v1,info,cpu,isa:Intel AVX2\n") == "Intel AVX2"
    assert peaks.onednn_isa("") is None


def test_the_bench_prints_measured_peaks_beside_the_flags(peaks, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(peaks, "onednn_isa_of_bf16", lambda: "avx512_core_bf16")
    by_library = {"torch": 50.0, "onnxruntime": 100.0}  # a Zen 5 EPYC's fp32: MKL's products reach half of ONNX Runtime's
    monkeypatch.setattr(peaks, "measured_peak", lambda dtype, threads, library:
                        {"per_cpu_second": by_library[library], "per_wall_second": by_library[library] / 2})
    rows = peaks.table([1], ["fp32", "int8"])
    assert "oneDNN runs bf16 on: avx512_core_bf16" in rows[0]
    fp32 = [r for r in rows if r.startswith("| fp32 |")]
    assert [r.split(" | ")[1:4] for r in fp32] == [["torch", "1", "50 GFLOP"], ["onnxruntime", "1", "100 GFLOP"]]  # fp32 by both
    assert all(r.endswith("% |") for r in fp32)
    assert [r.split(" | ")[1] for r in rows if r.startswith("| int8 |")] == ["onnxruntime"]  # int8 is ONNX Runtime's alone


def test_a_dtype_is_measured_only_in_a_library_that_multiplies_it_in_greenadapt(peaks) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="bf16 is not multiplied by onnxruntime"):
        peaks.measured_peak("bf16", 1, library="onnxruntime")


def test_the_machines_peak_is_the_highest_library_that_is_installed(peaks, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    reached = {"torch": 90.0, "onnxruntime": 180.0}

    def measured(dtype: str, threads: int, *, library: str) -> dict[str, float]:
        if library not in reached:
            raise ImportError(library)
        return {"per_cpu_second": reached[library], "per_wall_second": reached[library]}

    monkeypatch.setattr(peaks, "measured_peak", measured)
    assert peaks.machine_peak("fp32", 1) == {"per_cpu_second": 180.0, "per_wall_second": 180.0, "library": "onnxruntime"}
    del reached["onnxruntime"]  # not installed: torch's
    assert peaks.machine_peak("fp32", 1)["library"] == "torch"
    del reached["torch"]
    with pytest.raises(ImportError, match="none of torch, onnxruntime"):
        peaks.machine_peak("fp32", 1)


def test_the_cpu_is_named_with_its_family_and_model(peaks, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A virtual machine names the line ("AMD EPYC"), not the generation: Zen 3 and Zen 5 differ by family."""
    info = tmp_path / "cpuinfo"
    info.write_text("".join(f"processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
                            f"cpu MHz\t\t: 2596.120\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n" for n in range(2)))
    flags, mhz, name = peaks.cpu_facts(str(info))
    assert name == "AMD EPYC (family 26, model 2)" and mhz == pytest.approx(2596.12) and "avx512_bf16" in flags
