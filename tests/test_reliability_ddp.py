"""Checkpoints under data parallelism: every rank's random generators are saved and restored.

Two CPU processes (gloo) fine-tune (or continue masked-LM pretraining) with
dropout on; each draws its own dropout masks. A run that crashes after a checkpoint and is resumed must end
with the weights of a run never interrupted, which holds only if rank 1's
generators come back as well as rank 0's. A negative control resumes from a
checkpoint with the per-rank states removed (what greenadapt saved before)
and must differ, so this test can tell the two apart.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import run_ranks
import torch
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.training.checkpoint import latest_checkpoint
from greenadapt.training.job import checkpoint_folder

# Kills the process (os._exit: no handler, no cleanup) at the N-th training step of the run it is installed for: only
# checkpoints on disk survive.
CRASH_AT_STEP = """
def crash_at(step_number):
    calls, original_step = [0], train_module.Trainer.step

    def step(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == step_number:
            os._exit(17)
        return original_step(self, *args, **kwargs)

    train_module.Trainer.step = step
"""

WORKER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from greenadapt.runners.finetune import run as run_module
    from greenadapt.training import runtime as train_module
    import greenadapt

    model, train, *jobs = sys.argv[1:]
    {crash}
    for out, mode in zip(jobs[::2], jobs[1::2]):  # one launch runs its jobs in order, as a user's script may
        if mode.startswith("crash:"):
            crash_at(int(mode.split(":")[1]))
        greenadapt.finetune(**dict(
            task="ner", train=Path(train), model=model, out=Path(out), device="cpu", seeds=[5],
            **dict(batch_size=8, lr=3e-3, epochs=2, max_steps=8), save_every=3, resume=mode == "resume",
        ))
    """
).replace("{crash}", CRASH_AT_STEP)


PRETRAIN_WORKER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from greenadapt.training import runtime as train_module
    from greenadapt import pretrain

    model, corpus, *jobs = sys.argv[1:]
    {crash}
    for out, mode in zip(jobs[::2], jobs[1::2]):
        if mode.startswith("crash:"):
            crash_at(int(mode.split(":")[1]))
        pretrain(**dict(
            corpus=[corpus], model=model, out=Path(out), workdir=Path(out).parent / "work", max_length=24, heldout=4,
            workers=1, device="cpu", **dict(batch_size=8, max_steps=8, lr=3e-3, seed=5), save_every=3,
            resume=mode == "resume",
        ))
    """
).replace("{crash}", CRASH_AT_STEP)


def _launch(args: list[str], tmp_path: Path, *, expect: int = 0, worker: str = WORKER) -> None:
    script = tmp_path / "worker.py"
    script.write_text(worker)
    for proc in run_ranks(script, *args):
        assert proc.returncode == expect, proc.stderr[-3000:]


def _weights(out: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(out / "model.safetensors"))


def _max_difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    assert a.keys() == b.keys()
    return max(float(np.abs(a[k].astype(np.float64) - b[k]).max()) for k in a)


def _crash_resume_and_control(tmp_path: Path, inputs: list[str], worker: str, seed_folder: str) -> None:
    """Run uninterrupted; crash at step 5 and resume from the step-3 checkpoint; resume a copy without per-rank states.

    Two launches of two processes (each start costs more than the 8 steps): the first runs the reference and then the
    run that crashes, the second resumes it and then the control. ``seed_folder``: where the run keeps its checkpoints
    inside ``<out>.checkpoint/`` (finetune: one folder per seed; pretrain: none).
    """
    import shutil

    def launch(jobs: list[tuple[Path, str]], expect: int = 0) -> None:
        _launch([*inputs, *(str(part) for job in jobs for part in job)], tmp_path, expect=expect, worker=worker)

    reference, out, control = tmp_path / "reference", tmp_path / "resumed", tmp_path / "control"
    launch([(reference, "full"), (out, "crash:5")], expect=17)
    found = latest_checkpoint(checkpoint_folder(out) / seed_folder)
    assert found is not None and found[1]["step"] == 3
    tensors = torch.load(found[0] / "optimizer.pt", weights_only=True)
    assert len(tensors["rank_rng"]) == 2
    assert not torch.equal(tensors["rank_rng"][0]["torch"], tensors["rank_rng"][1]["torch"])  # two different streams

    # The negative control: the same checkpoint without the per-rank states (what greenadapt saved before).
    shutil.copytree(checkpoint_folder(out), checkpoint_folder(control))
    _strip_rank_states(latest_checkpoint(checkpoint_folder(control) / seed_folder)[0])  # type: ignore[index]
    launch([(out, "resume"), (control, "resume")])

    assert _max_difference(_weights(out), _weights(reference)) <= 1e-6
    assert _max_difference(_weights(control), _weights(reference)) > 1e-5, "the test cannot see rank 1's random state"
    assert not checkpoint_folder(out).exists()


def _strip_rank_states(ckpt: Path) -> None:
    import hashlib
    import json

    tensors = torch.load(ckpt / "optimizer.pt", weights_only=True)
    del tensors["rank_rng"]
    torch.save(tensors, ckpt / "optimizer.pt")
    state = json.loads((ckpt / "state.json").read_text())
    del state["rank_rng"]
    (ckpt / "state.json").write_text(json.dumps(state))
    manifest = json.loads((ckpt / "checkpoint.json").read_text())
    for name in ("optimizer.pt", "state.json"):
        data = (ckpt / name).read_bytes()
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (ckpt / "checkpoint.json").write_text(json.dumps(manifest))


@pytest.mark.integration  # two launches of two processes, four runs: a minute on a loaded 2-core machine
def test_two_rank_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    model = build_tiny_expanded(tmp_path / "model", dropout=0.3)
    train = write_ner_file(tmp_path / "train.tsv", 40, seed=1)
    _crash_resume_and_control(tmp_path, [str(model), str(train)], WORKER, "seed-5")


@pytest.mark.integration  # two launches of two processes, four runs
def test_two_rank_pretrain_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    from conftest import build_tiny_bert
    from finetune_helpers import set_dropout

    model = build_tiny_bert(tmp_path / "model")
    set_dropout(model, 0.3)
    corpus = tmp_path / "corpus.txt"
    words = "the patients were treated with the protein and the gene expression of cancer cells was increased".split()
    corpus.write_text("\n".join(" ".join(words[i % 9 :] + words[: i % 9]) for i in range(120)) + "\n")
    _crash_resume_and_control(tmp_path, [str(model), str(corpus)], PRETRAIN_WORKER, ".")
