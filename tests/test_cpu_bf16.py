"""bf16 on CPU servers (issue 58, item 1): autocast where the CPU multiplies bfloat16 natively, a refusal where not.

The master weights and the optimizer state stay fp32 under autocast; only the products run in bf16, so a step's
loss stays close to fp32's. The manifest says which precision a run actually used.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_cli
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.errors import EXIT_USAGE
from greenadapt.machine.devices import cpu_has_native_bf16

NATIVE = cpu_has_native_bf16()


@pytest.mark.parametrize("flags,native", [("fpu sse2 avx512f avx512_bf16 avx512_vnni", True), ("fpu sse2 avx2 avx512f", False),
                                          ("fpu sse2 amx_bf16 amx_tile", True)])
def test_native_bf16_is_read_from_the_cpu_flags(flags: str, native: bool, tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert cpu_has_native_bf16(str(cpuinfo)) is native
    assert cpu_has_native_bf16(str(tmp_path / "missing")) is False


def _losses(folder: Path) -> list[float]:
    records = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines() if line.strip()]
    return [float(r["loss"]) for r in records if "loss" in r]


@pytest.mark.skipif(not NATIVE, reason="this CPU has no native bf16 (avx512_bf16 or AMX)")
def test_a_bf16_cpu_step_trains_close_to_fp32_and_the_manifest_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from greenadapt.api import finetune

    monkeypatch.delenv("GREENADAPT_CPU_AUTO_PRECISION")  # auto's own choice on this CPU (the suite pins fp32)
    model = build_tiny_expanded(tmp_path / "model")
    train = write_ner_file(tmp_path / "train.tsv", 24, seed=1)
    runs = {}
    for precision in ("fp32", "bf16", "auto"):
        runs[precision] = finetune(task="ner", train=train, model=model, out=tmp_path / precision, max_steps=4, batch_size=8,
                                   device="cpu", precision=precision).path
    used = {p: json.loads((f / "manifest.json").read_text())["stats"]["training"]["42"]["precision_used"] for p, f in runs.items()}
    assert used == {"fp32": "fp32", "bf16": "bf16", "auto": "bf16"}  # auto: bf16 where native (the F1 study: within noise)
    fp32, bf16 = _losses(runs["fp32"]), _losses(runs["bf16"])
    assert len(fp32) == len(bf16) >= 1
    assert fp32 != bf16  # bf16 did run: its products are rounded
    for a, b in zip(fp32, bf16, strict=True):
        assert b == pytest.approx(a, rel=0.05), (fp32, bf16)
    weights = __import__("safetensors.torch", fromlist=["load_file"]).load_file(str(runs["bf16"] / "model.safetensors"))
    assert {str(t.dtype) for t in weights.values()} == {"torch.float32"}  # master weights stay fp32


def test_a_cpu_without_native_bf16_gets_a_one_line_refusal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import greenadapt.machine.devices

    monkeypatch.setattr(greenadapt.machine.devices, "cpu_has_native_bf16", lambda *args: False)
    model = build_tiny_expanded(tmp_path / "model")
    train = write_ner_file(tmp_path / "train.tsv", 24, seed=1)
    capsys.readouterr()
    code, err = run_cli(["finetune", "--task", "ner", "--train", str(train), "--model", str(model), "--max-steps", "1",
                         "--device", "cpu", "--precision", "bf16", "--out", str(tmp_path / "out")], monkeypatch, capsys)
    assert code == EXIT_USAGE and "no native bfloat16" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_auto_is_bf16_on_a_cpu_only_where_it_is_native_and_not_pinned_to_fp32(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--precision auto` on a CPU follows the F1 study (docs/benchmarks.md): bf16 where the CPU multiplies it
    natively, fp32 elsewhere, and fp32 wherever $GREENADAPT_CPU_AUTO_PRECISION=fp32 asks for it."""
    import torch

    import greenadapt.machine.devices
    from greenadapt.compute.distributed import autocast_dtype, precision_used

    cpu = torch.device("cpu")
    monkeypatch.delenv("GREENADAPT_CPU_AUTO_PRECISION")
    for native, expected in ((True, torch.bfloat16), (False, None)):
        monkeypatch.setattr(greenadapt.machine.devices, "cpu_has_native_bf16", lambda *args, native=native: native)
        assert autocast_dtype("auto", cpu) == expected
        assert autocast_dtype("fp32", cpu) is None
    monkeypatch.setattr(greenadapt.machine.devices, "cpu_has_native_bf16", lambda *args: True)
    assert precision_used("auto", cpu) == "bf16"
    monkeypatch.setenv("GREENADAPT_CPU_AUTO_PRECISION", "fp32")
    assert autocast_dtype("auto", cpu) is None and precision_used("auto", cpu) == "fp32"
    assert autocast_dtype("bf16", cpu) == torch.bfloat16  # asked for by name: still bf16
