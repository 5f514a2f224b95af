"""finetune checkpoints: --save-every, --resume and SIGTERM pre-emption.

The invariant: a run interrupted at any step and resumed ends with the same
weights, metrics and log as one never interrupted (CPU, fixed seed; the tiny
model keeps its dropout, so the random states must be restored too).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HANG_S
import torch
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.artifacts.manifest import load_stage
from greenadapt.artifacts.files import sha256_file
from greenadapt.artifacts.info import render
from greenadapt.errors import EXIT_PREEMPTED, StageError
from greenadapt.modeling import embeddings
import greenadapt
from greenadapt import finetune
from greenadapt.training.checkpoint import CHECKPOINT_MANIFEST, Preempted, latest_checkpoint
from greenadapt.training.job import checkpoint_folder

STEPS_PER_EPOCH = 5  # 40 training sentences, batches of 8
# Tiny models gain nothing from threads, and on a busy machine spinning OpenMP threads slow them tenfold.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_expanded(tmp_path_factory.mktemp("ckpt-model") / "model")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ckpt-data")
    return {"train": write_ner_file(root / "train.tsv", 40, seed=1), "dev": write_ner_file(root / "dev.tsv", 12, seed=2)}


def _options(model: Path, data: dict[str, Path], out: Path, **kw: Any) -> dict[str, Any]:
    """greenadapt.finetune's keywords: the tests' recipe, ``kw`` overriding it."""
    return {"batch_size": 8, "lr": 3e-3, "epochs": 3, "task": "ner", "train": data["train"], "dev": data["dev"], "test": data["dev"],
            "model": str(model), "out": out, "device": "cpu", "seeds": [7], **kw}


@pytest.fixture(scope="module")
def reference(model: Path, data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Never interrupted: 3 epochs, dev selection after each, mix 0.5 (row-wise trained added rows)."""
    return finetune(**_options(model, data, tmp_path_factory.mktemp("ckpt-ref") / "run")).path


@pytest.fixture(scope="module")
def reference_seeds(model: Path, data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finetune(**_options(model, data, tmp_path_factory.mktemp("ckpt-ref2") / "run", dev=None, max_steps=6, seeds=[1, 2])).path


class _Crash(Exception):
    """Stands in for SIGKILL: no handler runs, only checkpoints already on disk survive."""


class _AtStep:
    """A Progress that does ``action`` when training reports step ``step`` (of the ``nth`` seed)."""

    def __init__(self, step: int, action: Callable[[], None], nth: int = 1) -> None:
        self.step, self.action, self.nth, self.started = step, action, nth, 0

    def start(self, description: str, total: float | None = None, unit: str = "") -> None:
        self.started += 1

    def update(self, completed: float, **info: float | str) -> None:
        if completed == self.step and self.started == self.nth and info:
            self.action()

    def finish(self) -> None:
        pass


def _sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def _crash() -> None:
    raise _Crash


def _log_without_times(folder: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def assert_same_run(a: Path, b: Path) -> None:
    from safetensors.numpy import load_file

    ma, mb = load_stage(a, "finetune"), load_stage(b, "finetune")
    assert ma["fingerprint"] == mb["fingerprint"]
    # options.json: kept where the command line ran it, not where a test called the runner itself
    assert set(ma["files"]) - {"options.json"} == set(mb["files"]) - {"options.json"}
    for name in ma["files"]:
        if name.endswith("model.safetensors"):
            wa, wb = load_file(str(a / name)), load_file(str(b / name))
            assert wa.keys() == wb.keys()
            for key in wa:
                np.testing.assert_allclose(wa[key], wb[key], rtol=0, atol=1e-6, err_msg=f"{name}: {key}")
        elif name.endswith("train_log.jsonl"):
            assert _log_without_times((a / name).parent) == _log_without_times((b / name).parent), name
        elif name.endswith(("metrics.json", ".tsv", "config.json", "greenadapt_task.json")) and "tokenizer" not in name:
            # Not the tokenizer files: transformers writes the hub's offline setting into them.
            assert (a / name).read_bytes() == (b / name).read_bytes(), name


def _checkpoints(out: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
    folder = checkpoint_folder(out)
    found = {seed.name: latest_checkpoint(seed) for seed in sorted(folder.glob("seed-*"))}
    return {k: v for k, v in found.items() if v is not None}


# --------------------------------------------------------------------------
# Resumed = uninterrupted


@pytest.mark.parametrize("step", [2, STEPS_PER_EPOCH, 12])
def test_sigterm_saves_a_checkpoint_and_resume_matches(model: Path, data: dict[str, Path], reference: Path, tmp_path: Path,
                                                       step: int) -> None:
    out = tmp_path / "run"
    with pytest.raises(Preempted) as info:
        finetune(**_options(model, data, out), progress=_AtStep(step, _sigterm))
    assert info.value.exit_code == EXIT_PREEMPTED == 99
    assert f"at step {step} of 15" in info.value.one_line() and "--resume" in info.value.one_line()
    assert not out.exists() and not list(tmp_path.glob(".run.tmp-*"))  # no half-written output
    (path, manifest), = _checkpoints(out).values()
    assert manifest["step"] == step and not manifest["complete"]
    assert path.name == f"ckpt-{step:06d}"  # issue 36.12: the folder's name and its content agree
    state = json.loads((path / "state.json").read_text())
    # Stopped at an epoch's end: the dev evaluation ran before the save and is part of it.
    assert len(state["result"]["dev_history"]) == step // STEPS_PER_EPOCH

    spent = state["spent"]  # what the stopped process had cost, for the one that resumes
    assert spent["processes"] == 1 and spent["cpu_seconds"] > 0 and spent["wall_seconds"] > 0

    resumed = finetune(**_options(model, data, out, resume=True))
    assert not resumed.skipped
    assert_same_run(reference, resumed.path)
    assert not checkpoint_folder(out).exists()  # removed once the run is complete
    # The manifest's cost is the whole run's: the stopped process's up to its checkpoint, and the one that finished it.
    cost, last = resumed.manifest["cost"], resumed.manifest["cost"]["last_process"]
    assert cost["processes"] == 2
    for key in ("cpu_seconds", "wall_seconds"):
        assert cost[key] == pytest.approx(spent[key] + last[key], abs=2e-3) and last[key] > 0
    assert cost["energy_kwh"] > last["energy_kwh"] and cost["energy_parts"]["earlier_processes_kwh"]["kwh"] > 0
    info = greenadapt.info(resumed.path)
    assert info["cost"]["processes"] == 2 and "in 2 processes (resumed)" in render(info)


def test_crash_resumes_from_the_newest_periodic_checkpoint(model: Path, data: dict[str, Path], reference: Path,
                                                          tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(_Crash):
        finetune(**_options(model, data, out, save_every=4), progress=_AtStep(11, _crash))
    folder = checkpoint_folder(out) / "seed-7"
    assert [p.name for p in folder.iterdir()] == ["ckpt-000008"]  # named by its step; the one of step 4 was dropped
    assert _checkpoints(out)["seed-7"][1]["step"] == 8
    assert_same_run(reference, finetune(**_options(model, data, out, save_every=4, resume=True)).path)


def test_several_seeds_keep_finished_seeds(model: Path, data: dict[str, Path], reference_seeds: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from greenadapt.training import runtime as train_module

    out = tmp_path / "run"
    options = {"dev": None, "max_steps": 6, "seeds": [1, 2], "save_every": 2}
    with pytest.raises(_Crash):
        finetune(**_options(model, data, out, **options), progress=_AtStep(3, _crash, nth=2))
    found = _checkpoints(out)
    assert found["seed-1"][1]["complete"] and found["seed-1"][1]["step"] == 6
    assert found["seed-2"][1]["step"] == 2

    steps: list[int] = []
    real_step = train_module.Trainer.step
    monkeypatch.setattr(train_module.Trainer, "step", lambda self, *a, **k: steps.append(self.config.seed) or real_step(self, *a, **k))
    resumed = finetune(**_options(model, data, out, resume=True, **options))
    assert steps == [2] * 4  # seed 1 is not trained again, seed 2 goes on from step 2
    assert_same_run(reference_seeds, resumed.path)


class _AtFinish(_AtStep):
    """A Progress that sends SIGTERM when training reports it is done (after the last step)."""

    def finish(self) -> None:
        if self.started:
            _sigterm()


def test_sigterm_before_training_stops_at_once(model: Path, data: dict[str, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from greenadapt.training import job as job_module

    real = job_module._check_checkpoints

    def then_sigterm(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        _sigterm()

    monkeypatch.setattr(job_module, "_check_checkpoints", then_sigterm)
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Preempted, match="before training started; nothing to save yet") as info:
        finetune(**_options(model, data, tmp_path / "run"))
    assert info.value.exit_code == EXIT_PREEMPTED
    assert not (tmp_path / "run").exists() and not checkpoint_folder(tmp_path / "run").exists()
    assert not list(tmp_path.glob(".run.tmp-*"))
    assert signal.getsignal(signal.SIGTERM) == handler  # ours is removed again


def test_sigterm_after_the_last_step_lets_the_run_finish(model: Path, data: dict[str, Path], reference: Path, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="greenadapt"):
        outcome = finetune(**_options(model, data, tmp_path / "run"), progress=_AtFinish(-1, _sigterm))
    assert any("SIGTERM arrived after the last training step" in r.getMessage() for r in caplog.records)
    assert_same_run(reference, outcome.path)
    assert not checkpoint_folder(outcome.path).exists()


# --------------------------------------------------------------------------
# What --resume refuses, and what it ignores


def test_checkpoint_is_never_discarded_or_misused(model: Path, data: dict[str, Path], reference: Path, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "run"
    with pytest.raises(_Crash):
        finetune(**_options(model, data, out, save_every=3), progress=_AtStep(4, _crash))
    with pytest.raises(StageError, match="left checkpoints here") as info:
        finetune(**_options(model, data, out))
    assert "pass --resume" in info.value.one_line() and info.value.exit_code == 4
    with pytest.raises(StageError, match="other inputs or options"):
        finetune(**_options(model, data, out, lr=1e-3, resume=True))
    assert _checkpoints(out)["seed-7"][1]["step"] == 3  # both refusals left it alone

    # A damaged checkpoint (bytes changed after its checksums were taken) is ignored, not trusted.
    (path, _), = _checkpoints(out).values()
    weights = path / "model.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[-1] ^= 0xFF
    weights.write_bytes(bytes(blob))
    with caplog.at_level(logging.WARNING, logger="greenadapt"):
        resumed = finetune(**_options(model, data, out, resume=True))
    assert any("does not match its checksum" in r.getMessage() for r in caplog.records)
    assert_same_run(reference, resumed.path)  # trained from the start instead


def test_a_checkpoint_resumes_when_its_data_got_only_a_new_modification_time(model: Path, data: dict[str, Path], reference: Path,
                                                                            tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A copy, a checkout or a refreshed data folder gives a file a new time and the same bytes: the interrupted run is
    still the same run and resumes (the CPU study lost every unit in progress to this, session after session)."""
    out, train = tmp_path / "run", data["train"]
    now = train.stat()
    os.utime(train, ns=(now.st_atime_ns, now.st_mtime_ns - 86_400 * 10**9))  # the interrupted run saw yesterday's time
    try:
        with pytest.raises(_Crash):
            finetune(**_options(model, data, out, save_every=4), progress=_AtStep(5, _crash))
    finally:
        os.utime(train, ns=(now.st_atime_ns, now.st_mtime_ns))
    with caplog.at_level(logging.INFO, logger="greenadapt"):
        resumed = finetune(**_options(model, data, out, save_every=4, resume=True))
    assert any("have the SHA-256 they had when it was saved" in r.getMessage() and str(train) in r.getMessage() for r in caplog.records)
    assert_same_run(reference, resumed.path)


def test_a_checkpoint_tells_a_file_whose_time_alone_changed_from_an_edited_one(tmp_path: Path) -> None:
    from greenadapt.artifacts.files import file_identity
    from greenadapt.training.checkpoint import RunIdentity

    train = tmp_path / "train.tsv"
    train.write_text("a\tO\n")
    saved = RunIdentity("finetune", {"lr": 1e-3}, [file_identity(train)]).recorded(tmp_path)
    os.utime(train, ns=(0, 10**18))
    assert RunIdentity("finetune", {"lr": 1e-3}, [file_identity(train)]).difference(saved) == ("", [str(train.resolve())])
    assert RunIdentity("finetune", {"lr": 2e-3}, [file_identity(train)]).difference(saved)[0] == "changed: lr 0.001 -> 0.002"
    train.write_text("b\tO\n")  # the same size, other bytes
    assert "its content differs" in RunIdentity("finetune", {"lr": 1e-3}, [file_identity(train)]).difference(saved)[0]


def test_resume_without_a_checkpoint_trains_from_the_start(model: Path, data: dict[str, Path], reference: Path,
                                                           tmp_path: Path) -> None:
    outcome = finetune(**_options(model, data, tmp_path / "run", resume=True))
    assert_same_run(reference, outcome.path)
    assert finetune(**_options(model, data, tmp_path / "run", resume=True)).skipped


def test_a_checkpoint_is_never_unpickled(model: Path, data: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(_Crash):
        finetune(**_options(model, data, out, save_every=2), progress=_AtStep(3, _crash))
    (path, manifest), = _checkpoints(out).values()
    marker = tmp_path / "code-ran"
    torch.save({"optimizers": _Payload(str(marker))}, path / "optimizer.pt")
    # Re-vouch for the file, as an attacker who can write the folder could.
    manifest["files"]["optimizer.pt"] = {"size": (path / "optimizer.pt").stat().st_size, "sha256": sha256_file(path / "optimizer.pt")}
    (path / "checkpoint.json").write_text(json.dumps(manifest))
    with pytest.raises(StageError, match="unreadable checkpoint"):
        finetune(**_options(model, data, out, resume=True))
    assert not marker.exists()


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path(self.marker),))


def test_row_adamw_state_round_trips_through_weights_only_load(tmp_path: Path) -> None:
    def fresh() -> tuple[embeddings.SplitWordEmbedding, embeddings.RowAdamW]:
        torch.manual_seed(0)
        split = embeddings.SplitWordEmbedding(torch.randn(30, 4), 10, 0, train_base=False, capacity=8)
        return split, embeddings.RowAdamW(split, lr=0.1, weight_decay=0.01)

    def step(split: embeddings.SplitWordEmbedding, optimizer: embeddings.RowAdamW, ids: list[int]) -> None:
        split.load_rows(torch.tensor(ids))
        split.train()
        split(torch.tensor([ids])).pow(2).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    batches = [[10, 12, 3], [12, 15, 29], [11, 10], [29, 20, 21]]
    split_a, opt_a = fresh()
    for ids in batches:
        step(split_a, opt_a, ids)
    split_b, opt_b = fresh()
    for ids in batches[:2]:
        step(split_b, opt_b, ids)
    torch.save({"opt": opt_b.state_dict(), "added": split_b.added}, tmp_path / "state.pt")
    saved = torch.load(tmp_path / "state.pt", weights_only=True)
    split_c, opt_c = fresh()
    split_c.added.copy_(saved["added"])
    opt_c.load_state_dict(saved["opt"])
    assert opt_c.state_size_rows() == 4
    for ids in batches[2:]:
        step(split_c, opt_c, ids)
    assert torch.equal(split_a.added, split_c.added)
    other = embeddings.RowAdamW(embeddings.SplitWordEmbedding(torch.randn(31, 4), 10, 0, train_base=False, capacity=8), lr=0.1)
    with pytest.raises(ValueError, match="does not fit"):
        other.load_state_dict(saved["opt"])


# --------------------------------------------------------------------------
# The command: SIGTERM from outside, a clean exit, --resume


def _cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "greenadapt", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV)


def test_sigterm_to_the_command_exits_99_and_resume_finishes(model: Path, data: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["finetune", "--task", "ner", "--train", str(data["train"]), "--model", str(model), "--out", str(out),
            "--batch-size", "8", "--max-steps", "30", "--device", "cpu", "--quiet", "--save-every", "5"]
    process = _cli(*args)
    deadline = time.monotonic() + HANG_S
    while not list(checkpoint_folder(out).glob("seed-42/ckpt-*")):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=HANG_S)
    assert process.returncode == EXIT_PREEMPTED, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "stopped by SIGTERM at step" in errors[0] and "--resume" in errors[0], stderr
    assert "Traceback" not in stderr and stdout == ""
    assert not out.exists() and not list(tmp_path.glob(".run.tmp-*"))
    stopped_at = _checkpoints(out)["seed-42"][1]["step"]
    assert 5 <= stopped_at < 30
    checkpoint = _checkpoints(out)["seed-42"][0]
    spent = json.loads((checkpoint / "state.json").read_text())["spent"]

    again = subprocess.run([sys.executable, "-m", "greenadapt", *args, "--resume"], capture_output=True, text=True, timeout=HANG_S,
                           env=ENV)
    assert again.returncode == 0, again.stderr
    assert not checkpoint_folder(out).exists()
    # The stopped process's cost up to its checkpoint is part of the run's, beside the second's.
    cost = load_stage(out, "finetune")["cost"]
    assert cost["processes"] == 2 and spent["processes"] == 1 and spent["cpu_seconds"] > 0
    assert cost["cpu_seconds"] == pytest.approx(spent["cpu_seconds"] + cost["last_process"]["cpu_seconds"], abs=2e-3)
    reference = finetune(**_options(model, data, tmp_path / "ref", dev=None, test=None, seeds=[42], lr=5e-5, max_steps=30))
    assert_same_run(reference.path, out)


def test_checkpoint_folders_are_named_by_their_step_and_the_newest_wins(tmp_path: Path) -> None:
    """Issue 36.12: ``ckpt-000003`` held ``"step": 2``; names now say the step, in numeric order."""
    from greenadapt.training.checkpoint import Checkpointing, RunIdentity, latest_checkpoint, write_checkpoint

    checkpoint = Checkpointing(tmp_path / "seed-1", RunIdentity("finetune", {}, []))

    def save(step: int, marker: str) -> Path:
        return write_checkpoint(checkpoint, step, lambda tmp: (tmp / "x.txt").write_text(marker), complete=False)

    assert save(2, "periodic").name == "ckpt-000002"
    assert save(2, "sigterm").name == "ckpt-000002-2"  # the same step again: a second folder, newer
    found = latest_checkpoint(checkpoint.folder)
    assert found is not None and found[0].name == "ckpt-000002-2" and (found[0] / "x.txt").read_text() == "sigterm"
    assert save(999_999, "a").name == "ckpt-999999" and save(1_000_000, "b").name == "ckpt-1000000"
    found = latest_checkpoint(checkpoint.folder)
    assert found is not None and found[1]["step"] == 1_000_000 and [p.name for p in checkpoint.folder.iterdir()] == ["ckpt-1000000"]


class _Killed(BaseException):
    """What SIGKILL inside shutil.rmtree leaves: it stopped between two files."""


def _rmtree_killed_after_one_file(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    def killed(path: str | os.PathLike[str], ignore_errors: bool = False) -> None:
        # The worst first file to lose: a checkpoint's manifest (rmtree's order is the directory's).
        manifests = sorted(Path(path).rglob(CHECKPOINT_MANIFEST))
        if manifests:
            manifests[0].unlink()
        raise _Killed

    monkeypatch.setattr(shutil, "rmtree", killed)


def _each_visible_checkpoint_is_whole(folder: Path) -> list[str]:
    from greenadapt.artifacts.manifest import verify_files

    seen = []
    for checkpoint in [*folder.glob("ckpt-*"), *folder.glob("seed-*/ckpt-*")]:
        manifest = json.loads((checkpoint / CHECKPOINT_MANIFEST).read_text(encoding="utf-8"))
        assert verify_files(checkpoint, manifest) is None, checkpoint
        seen.append(str(checkpoint.relative_to(folder)))
    return sorted(seen)


def test_a_kill_while_checkpoints_are_removed_leaves_each_one_whole_or_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen in the kill test: a finetune killed while it removed its checkpoints left ``ckpt-000008`` without a manifest."""
    from greenadapt.training.checkpoint import Checkpointing, RunIdentity, discard_checkpoints, write_checkpoint

    folder = tmp_path / "run.checkpoint"

    def save(seed: int, step: int) -> Path:
        checkpoint = Checkpointing(folder / f"seed-{seed}", RunIdentity("finetune", {}, []))
        return write_checkpoint(checkpoint, step, lambda tmp: (tmp / "state.bin").write_bytes(os.urandom(4096)), complete=False)

    save(1, 2)
    save(2, 2)
    with monkeypatch.context() as patched:
        _rmtree_killed_after_one_file(patched)
        with pytest.raises(_Killed):
            save(1, 4)  # killed while it removes the step-2 checkpoint it supersedes
    assert _each_visible_checkpoint_is_whole(folder) == ["seed-1/ckpt-000004", "seed-2/ckpt-000002"]
    latest = latest_checkpoint(folder / "seed-1")
    assert latest is not None and latest[1]["step"] == 4
    assert save(1, 6).name == "ckpt-000006" and [p.name for p in (folder / "seed-1").iterdir()] == ["ckpt-000006"]

    with monkeypatch.context() as patched:
        _rmtree_killed_after_one_file(patched)
        with pytest.raises(_Killed):
            discard_checkpoints(folder)  # a finished run's clean-up, killed
    assert _each_visible_checkpoint_is_whole(folder) == []
    discard_checkpoints(folder)  # the next run's clean-up
    assert not folder.exists()


@pytest.mark.parametrize("library", ["wraps-every-exception", "turns-any-exception-into-its-own"])
def test_sigterm_before_training_inside_a_library_still_ends_as_preempted(library: str) -> None:
    """Seen in the kill test's loop: a SIGTERM during transformers' lazy import of the model class ended as
    "internal error: ModuleNotFoundError: Could not import module 'BertForTokenClassification'", exit 1."""
    from greenadapt.training.checkpoint import Preempted, StopSignal

    with pytest.raises(Preempted, match="before training started"), StopSignal():
        try:
            signal.raise_signal(signal.SIGTERM)
        except Exception as exc:  # transformers' _LazyModule: any Exception of an import becomes ModuleNotFoundError
            raise ModuleNotFoundError("Could not import module 'BertForTokenClassification'") from exc
        except BaseException as exc:
            if library == "turns-any-exception-into-its-own":  # torch's shape inference, seen with KeyboardInterrupt
                raise ValueError("could not determine the shape of object type") from exc
            raise
    # Without a signal an error stays itself.
    with pytest.raises(ValueError, match="a real error"), StopSignal():
        raise ValueError("a real error")


def test_force_starts_over_after_an_interrupted_run_and_says_so(model: Path, data: dict[str, Path], tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """Changed options after an interruption (issue 84): without --force the checkpoints are kept and the refusal names
    --force; with it the run starts over, removing only greenadapt's checkpoints, with one warning."""
    from greenadapt.errors import StageError

    out = tmp_path / "run"
    with pytest.raises(_Crash):
        finetune(**_options(model, data, out, save_every=4), progress=_AtStep(5, _crash))
    assert _checkpoints(out)["seed-7"][1]["step"] == 4
    with pytest.raises(StageError, match="--force to start over"):
        finetune(**_options(model, data, out, save_every=4, lr=1e-3, resume=True))
    assert _checkpoints(out)["seed-7"][1]["step"] == 4  # kept
    with caplog.at_level("WARNING"):
        done = finetune(**_options(model, data, out, save_every=4, lr=1e-3, force=True))
    assert any("--force: starting over" in r.getMessage() and "made with other inputs or options" in r.getMessage() for r in caplog.records)
    assert done.manifest["config"]["train"]["lr"] == 1e-3 and not checkpoint_folder(out).exists()
