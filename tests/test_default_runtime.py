"""``--runtime auto`` (issue 94, item 4): the documented table by CPU kind, each kind faked; explicit choices kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from greenadapt.compute.distributed import CPU_AUTO_PRECISION_ENV
from greenadapt.inference.default_runtime import BY_CPU, chosen_runtime
from greenadapt.machine.devices import cpu_bf16_unit


@pytest.mark.parametrize(("flags", "unit", "runtime"), [
    ("fpu sse2 avx2 avx512f avx512bw amx_bf16 amx_tile amx_int8 avx512_bf16", "amx_bf16", "torch"),  # Xeon with AMX
    ("fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni", "avx512_bf16", "torch"),  # EPYC (Zen 4)
    ("fpu sse2 avx2 avx512f avx512_vnni", None, "onnx"),  # AVX-512 without bf16 (Ice Lake, Zen 3 has no AVX-512 at all)
    ("fpu sse2 avx2 fma", None, "onnx"),
])
def test_each_cpu_kind_gets_its_documented_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: str, unit: str | None,
                                                  runtime: str) -> None:
    monkeypatch.setenv(CPU_AUTO_PRECISION_ENV, "bf16")  # a user's default (the suite keeps CPUs in fp32)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert cpu_bf16_unit(str(cpuinfo)) == unit
    assert chosen_runtime("auto", "none", "cpu", bf16_unit=lambda: unit, onnx_installed=lambda: True) == runtime == BY_CPU[unit].runtime
    # ONNX Runtime not installed, or a folder it cannot run (G-MAP): torch, never a refusal
    assert chosen_runtime("auto", "none", "cpu", bf16_unit=lambda: unit, onnx_installed=lambda: False) == "torch"
    assert chosen_runtime("auto", "none", "cpu", bf16_unit=lambda: unit, onnx_installed=lambda: True, exportable=False) == "torch"


def test_an_explicit_runtime_a_quantization_or_a_gpu_decide_before_the_table() -> None:
    for unit in BY_CPU:
        assert chosen_runtime("torch", "none", "cpu", bf16_unit=lambda: unit, onnx_installed=lambda: True) == "torch"
        assert chosen_runtime("onnx", "none", "cpu", bf16_unit=lambda: unit, onnx_installed=lambda: True) == "onnx"
        assert chosen_runtime("auto", "int8", "cpu", bf16_unit=lambda: unit, onnx_installed=lambda: True) == "onnx"
        assert chosen_runtime("auto", "none", "cuda:1", bf16_unit=lambda: unit, onnx_installed=lambda: True) == "torch"


@pytest.mark.parametrize("unit", [unit for unit in BY_CPU if unit is not None])
def test_the_precision_torch_would_run_at_decides_on_a_cpu_with_bf16(monkeypatch: pytest.MonkeyPatch, unit: str) -> None:
    """Where torch would run fp32 (asked, or auto kept in fp32), the candidates are fp32 runtimes, and ONNX Runtime fp32
    served 2.25x torch fp32's sentences on a Zen 5 EPYC (docs/benchmarks.md): the table's fp32 row. A product asked in
    bf16 or fp16 is torch's on every CPU (ONNX Runtime runs the fp32 graph; torch refuses bf16 where it is emulated)."""
    def chosen(precision: str, cpu: str | None = unit) -> str:
        return chosen_runtime("auto", "none", "cpu", precision=precision, bf16_unit=lambda: cpu, onnx_installed=lambda: True)

    monkeypatch.setenv(CPU_AUTO_PRECISION_ENV, "bf16")
    assert chosen("auto") == BY_CPU[unit].runtime == "torch"  # bf16 in torch: the unit's row
    assert chosen("fp32") == BY_CPU[None].runtime == "onnx"
    assert chosen("bf16") == chosen("fp16") == chosen("bf16", None) == "torch"
    monkeypatch.setenv(CPU_AUTO_PRECISION_ENV, "fp32")  # auto kept in fp32 on this machine
    assert chosen("auto") == "onnx" and chosen("bf16") == "torch"


def test_auto_finds_no_gpu_without_importing_torch_where_no_gpu_driver_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold predict from a cached ONNX export imports no torch (2 CPU-s) to learn that a Linux machine without a GPU
    driver has no GPU; where a driver is, torch is asked."""
    import sys

    from greenadapt.machine import devices

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(devices, "GPU_DRIVER_PATHS", (str(tmp_path / "nvidiactl"),))
    monkeypatch.setitem(sys.modules, "torch", None)  # an import of torch now fails
    assert chosen_runtime("auto", "none", "auto", bf16_unit=lambda: None, onnx_installed=lambda: True) == "onnx"
    (tmp_path / "nvidiactl").touch()
    with pytest.raises(ImportError):  # a driver: only torch can tell whether it has a GPU
        chosen_runtime("auto", "none", "auto", bf16_unit=lambda: None, onnx_installed=lambda: True)


def test_the_table_is_documented_with_its_measurements() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    section = doc.split("## The default runtime by CPU", 1)[1].split("\n## ", 1)[0]
    for unit, choice in BY_CPU.items():
        assert f"| {unit or 'none'} |" in section and choice.runtime in section


def test_quantize_without_a_runtime_is_onnx_and_with_torch_is_refused() -> None:
    from greenadapt.errors import UsageError
    from greenadapt.inference.settings import LoadSettings

    assert LoadSettings().runtime == "auto"
    with pytest.raises(UsageError, match="quantize='int8' is for runtime='onnx'"):
        LoadSettings(runtime="torch", quantize="int8")
