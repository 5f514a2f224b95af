"""Data parallel fine-tuning: two CPU processes (gloo) agree with each other and with one process."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import run_ranks
from finetune_helpers import build_tiny_expanded, set_dropout, write_ner_file

WORKER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from greenadapt.runners.finetune import run as run_module
    import greenadapt

    model, train, dev, out, snapshots = sys.argv[1:6]
    original = run_module.train

    def keep_weights(net, *args, **kwargs):
        result = original(net, *args, **kwargs)
        from safetensors.torch import save_file
        state = {k: v.detach().contiguous().cpu() for k, v in net.state_dict().items()}
        save_file(state, f"{snapshots}/rank{os.environ.get('RANK', '0')}.safetensors")
        return result

    run_module.train = keep_weights
    greenadapt.finetune(**dict(
        task="ner", train=Path(train), dev=Path(dev), test=Path(dev), model=model, out=Path(out),
        **dict(batch_size=8, lr=3e-3, epochs=2, max_steps=6), device="cpu", seeds=[5],
    ))
    """
)


def _launch(world: int, args: list[str], tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    for proc in run_ranks(script, *args, world=world):
        assert proc.returncode == 0, proc.stderr[-3000:]


def _load(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def _run_in_process(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker without torchrun's variables, in this process (saves starting a third interpreter)."""
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "argv", ["worker", *args])
    from greenadapt.runners.finetune import run as run_module

    monkeypatch.setattr(run_module, "train", run_module.train)  # restored after the test
    exec(compile(WORKER, "worker", "exec"), {"__name__": "worker"})


def test_two_gloo_processes_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = build_tiny_expanded(tmp_path / "model")
    set_dropout(model, 0.0)  # so one process with the same global batches computes the same thing
    train = write_ner_file(tmp_path / "train.tsv", 40, seed=1)
    dev = write_ner_file(tmp_path / "dev.tsv", 9, seed=2)
    (tmp_path / "ddp").mkdir()
    (tmp_path / "single").mkdir()
    _launch(2, [str(model), str(train), str(dev), str(tmp_path / "run-ddp"), str(tmp_path / "ddp")], tmp_path)
    _run_in_process([str(model), str(train), str(dev), str(tmp_path / "run-single"), str(tmp_path / "single")], monkeypatch)

    rank0, rank1 = _load(tmp_path / "ddp" / "rank0.safetensors"), _load(tmp_path / "ddp" / "rank1.safetensors")
    assert rank0.keys() == rank1.keys()
    for key in rank0:
        assert np.array_equal(rank0[key], rank1[key]), key
    single = _load(tmp_path / "single" / "rank0.safetensors")
    for key in single:
        np.testing.assert_allclose(rank0[key], single[key], atol=5e-5, err_msg=key)

    # Only rank 0 wrote the run; evaluation was sharded and gathered, so it scores like one process.
    ddp_metrics = json.loads((tmp_path / "run-ddp" / "metrics.json").read_text())["per_seed"]["5"]
    single_metrics = json.loads((tmp_path / "run-single" / "metrics.json").read_text())["per_seed"]["5"]
    for pool in ("mean", "general", "domain"):
        assert ddp_metrics["test"][pool]["f1"] == pytest.approx(single_metrics["test"][pool]["f1"], abs=1e-6)
    assert not list(tmp_path.glob(".run-ddp.tmp-*"))
