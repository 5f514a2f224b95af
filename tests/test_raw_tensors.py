"""Checkpoint tensors without torch: read as safetensors stores them, rounded as torch rounds, and an expand of a half-precision model."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from conftest import heavy_modules_after
from w2v_fixtures import linear_w2v

from greenadapt.adaptation.align import align_stage
from greenadapt.adaptation.expand import expand_stage
from greenadapt.artifacts.raw_tensors import float32_to, read_safetensors
from greenadapt.errors import ModelError
from greenadapt.options import Run

EMBEDDING = "bert.embeddings.word_embeddings.weight"
BIAS = "cls.predictions.bias"
DECODER = "cls.predictions.decoder.weight"
V = 161


def _awkward_floats() -> np.ndarray:
    """Random values of every scale, bfloat16 and float16 ties (both parities), subnormals, extremes, infinities, NaN."""
    rng = np.random.default_rng(0)
    values = (rng.standard_normal(4000) * 10.0 ** rng.integers(-44, 38, 4000)).astype(np.float32)
    upper = rng.integers(0, 1 << 16, 2000, dtype=np.uint32) << 16
    ties = np.concatenate([(upper | 0x8000).view(np.float32), (upper | 0x7FFF).view(np.float32), (upper | 0x8001).view(np.float32)])
    f16_ties = (rng.integers(-2048, 2048, 500) * 2.0 ** -11 + 2.0 ** -12).astype(np.float32)
    extremes = np.array([0.0, -0.0, 1e-45, -1e-45, 6e-8, 65504.0, 65520.0, 3.4028235e38, -3.4028235e38, np.inf, -np.inf, np.nan],
                        dtype=np.float32)
    return np.concatenate([values, ties[np.isfinite(ties)], f16_ties, extremes])


@pytest.mark.parametrize("code, dtype", [("BF16", torch.bfloat16), ("F16", torch.float16), ("F32", torch.float32)])
def test_float32_to_rounds_exactly_as_torch(code: str, dtype: torch.dtype) -> None:
    values = _awkward_floats()
    for source in (values, values.astype(np.float64) * (1 + 2.0 ** -30)):  # float64 means (the bias fill) too
        ours = float32_to(source, code)
        theirs = torch.from_numpy(source).to(dtype)
        bits = theirs.view(torch.int16).numpy().view(np.uint16) if dtype == torch.bfloat16 else theirs.numpy()
        assert ours.dtype == bits.dtype
        same = (ours.view(np.uint8).reshape(len(source), -1) == bits.view(np.uint8).reshape(len(source), -1)).all(axis=1)
        nan = np.isnan(source)
        assert same[~nan].all(), source[~nan][~same[~nan]][:5]
        widened = (ours[nan].astype(np.uint32) << 16).view(np.float32) if code == "BF16" else ours[nan].astype(np.float32)
        assert nan.any() and np.isnan(widened).all()  # NaN stays NaN (its bits may differ from torch's)


def test_every_tensor_reads_as_safetensors_stores_it(tmp_path: Path) -> None:
    state = {
        "f32": torch.randn(3, 5), "bf16": torch.randn(4, 2).to(torch.bfloat16), "f16": torch.randn(7).half(),
        "i64": torch.arange(6).reshape(2, 3), "bool": torch.tensor([True, False, True]), "empty": torch.zeros(0, 4),
        "f8": torch.randn(5).to(torch.float8_e4m3fn),
    }
    save_file(state, tmp_path / "m.safetensors")
    read = dict(read_safetensors(tmp_path / "m.safetensors"))
    assert set(read) == set(state)
    for name, tensor in state.items():
        raw = read[name]
        assert raw.shape == tuple(tensor.shape), name
        assert raw.data.tobytes() == tensor.contiguous().view(torch.uint8).numpy().tobytes(), name
    assert np.array_equal(read["bf16"].to_float32(), state["bf16"].float().numpy())
    assert np.array_equal(read["f16"].to_float32(), state["f16"].float().numpy())


def test_a_damaged_file_is_one_model_error_naming_it(tmp_path: Path) -> None:
    save_file({"w": torch.randn(64, 64)}, tmp_path / "whole.safetensors")
    data = (tmp_path / "whole.safetensors").read_bytes()
    cases = {"truncated": data[:-100], "header-length": struct.pack("<Q", 1 << 40) + data[8:], "not-json": data[:8] + b"{" * 10 + data[18:]}
    for name, damaged in cases.items():
        (tmp_path / f"{name}.safetensors").write_bytes(damaged)
        with pytest.raises(ModelError) as caught:
            dict(read_safetensors(tmp_path / f"{name}.safetensors"))
        assert f"{name}.safetensors" in caught.value.one_line(), name


def _as_dtype(source: Path, folder: Path, dtype: torch.dtype) -> Path:
    """A copy in ``dtype`` that stores the output embeddings as a second matrix (untied on disk: two row matrices to grow)."""
    shutil.copytree(source, folder)
    state = {name: tensor.to(dtype) for name, tensor in load_file(source / "model.safetensors").items()}
    state.setdefault(DECODER, state[EMBEDDING].clone())
    save_file(state, folder / "model.safetensors")
    return folder


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as reader:
        return {name: reader.get_tensor(name) for name in reader.keys()}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_model_grows_as_torch_would_round_its_float32_twin(tiny_bert: Path, tmp_path: Path, dtype: torch.dtype) -> None:
    """The same weights in half precision and widened to float32 give the same map; the half model's new rows and bias
    entries are the float32 twin's rounded by torch, and its old tensors are its own, bit for bit."""
    half = _as_dtype(tiny_bert, tmp_path / "half", dtype)
    twin = _as_dtype(half, tmp_path / "twin", torch.float32)
    grown = {}
    for name, model in (("half", half), ("twin", twin)):
        w2v, _ = linear_w2v(tmp_path / f"w2v-{name}", model, noise=0.01)
        grown[name] = _tensors(expand_stage(
            align=align_stage(w2v=w2v, run=Run(out=tmp_path / f"align-{name}")).path,
            run=Run(out=tmp_path / f"expand-{name}"),
        ).path)
    before = _tensors(half)
    assert grown["half"][EMBEDDING].dtype == dtype and grown["half"][EMBEDDING].shape[0] > V
    for name, tensor in before.items():
        assert torch.equal(grown["half"][name][: tensor.shape[0]].view(torch.int16 if tensor.dtype == torch.bfloat16 else tensor.dtype),
                           tensor.view(torch.int16 if tensor.dtype == torch.bfloat16 else tensor.dtype)), name
    rounded = grown["twin"][EMBEDDING][V:].to(dtype)
    assert torch.equal(grown["half"][EMBEDDING][V:].view(torch.int16), rounded.view(torch.int16))
    assert torch.equal(grown["half"][DECODER].view(torch.int16), grown["half"][EMBEDDING].view(torch.int16))
    fill = before[BIAS].double().mean().to(dtype)
    assert torch.equal(grown["half"][BIAS][V:].view(torch.int16), fill.expand(grown["half"][BIAS].shape[0] - V).view(torch.int16))


def test_expand_info_and_report_run_without_torch_or_transformers(tiny_bert: Path, tmp_path: Path) -> None:
    """expand reads and writes weights with numpy and safetensors' layout, and info and report read folders: none of them
    imports torch or transformers (2-3 s to import), which only commands that run a model need."""
    w2v, _ = linear_w2v(tmp_path / "w2v", tiny_bert, noise=0.01)
    aligned = align_stage(w2v=w2v)
    expanded = str(tmp_path / "expanded")
    assert heavy_modules_after(
        ["expand", "--align", str(aligned.path), "--out", expanded, "--quiet"], ["info", expanded, "--quiet"],
        ["report", expanded, "--html", str(tmp_path / "report.html"), "--quiet"],
    ) == []
    assert (tmp_path / "expanded" / "model.safetensors").is_file()
