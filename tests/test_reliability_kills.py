"""Kill `w2v`, `expand` and `finetune` at seeded random moments; nothing half-written survives.

Each stage first runs once uninterrupted (the reference, and a complete
output that later kills must not damage). Then it is started again and
again — with ``--force`` when an output exists, sometimes after deleting the
output (and, for w2v, the pre-tokenized cache) so fresh runs are killed too —
and sent SIGKILL, SIGTERM or SIGINT (each stage gets all three, in a seeded
order) at a random moment: either anywhere in the run or at a random point
after its temporary output folder appeared (so kills land inside the stage,
not only in Python's start-up). After every attempt each folder with a
manifest must load with ``load_stage`` (checksums verified) and the output
must be complete or absent. A last, undisturbed run must then finish and
match the reference: the same fingerprint, and the same bytes (w2v with one
worker and a seed; expand) or the same weights (finetune, resumed from its
newest checkpoint with ``--resume``).

The moments are seeded fractions of measured durations (the reference run's,
then those of the latest attempt that finished before its signal), so the
schedule adapts to the machine's speed. Each stage is a test of its own, so
the three sequences run side by side on pytest-xdist's workers.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_S
from finetune_helpers import build_tiny_expanded, write_ner_file
from w2v_fixtures import linear_w2v

from greenadapt.adaptation.align import align_stage
from greenadapt.artifacts.manifest import load_stage, read_manifest, verify_files
from greenadapt.errors import EXIT_PREEMPTED, EXIT_TERMINATED
from greenadapt.training.checkpoint import CHECKPOINT_MANIFEST
from greenadapt.training.job import checkpoint_folder
from greenadapt.options import Run

SEED = 20240607
KILLS = {"w2v": 7, "expand": 7, "finetune": 6}  # signals delivered to a running process; 20 in all
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)
# What a process may end with: done, killed by a signal (SIGTERM and SIGINT only before the CLI's handlers are
# in place), interrupted (130), terminated (143), pre-empted (finetune, 99).
ENDINGS = {0, -signal.SIGKILL, -signal.SIGTERM, -signal.SIGINT, 130, EXIT_TERMINATED, EXIT_PREEMPTED}
# Tiny models gain nothing from threads, and on a busy machine spinning OpenMP threads slow them tenfold.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
POLL = 0.005


@dataclass
class Plan:
    """One stage's command, where its output goes and what counts as its folders."""

    kind: str
    args: list[str]
    out: Path
    root: Path  # every folder with a manifest under here is checked
    resume: bool = False  # finetune: continue from a checkpoint when there is one
    scratch: list[Path] = field(default_factory=list)  # caches a fresh attempt may delete


@dataclass
class Attempt:
    signal: str
    moment: str
    delay: float
    delivered: bool
    returncode: int
    in_stage: bool
    seconds: float
    stage_seconds: float


@dataclass
class KillLog:
    kind: str
    reference: dict
    attempts: list[Attempt] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    final: dict | None = None


def _start(plan: Plan, extra: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as handle:
        return subprocess.Popen([sys.executable, "-m", "greenadapt", *plan.args, *extra], stdout=handle, stderr=subprocess.STDOUT, env=ENV)


def _in_stage(plan: Plan, pid: int) -> bool:
    # StageRun names its temporary folder after the process: a dead run's leftover does not count.
    return any(plan.out.parent.glob(f".{plan.out.name}.tmp-{pid}-*"))


class _Watch:
    """When the stage's temporary output folder appeared and went (its rename into place, or its removal)."""

    def __init__(self, plan: Plan, pid: int) -> None:
        self.plan, self.pid = plan, pid
        self.started = time.monotonic()
        self.appeared: float | None = None
        self.went: float | None = None

    def look(self) -> bool:
        now, present = time.monotonic(), _in_stage(self.plan, self.pid)
        if present and self.appeared is None:
            self.appeared = now
        elif not present and self.appeared is not None and self.went is None:
            self.went = now
        return present

    def window(self, ended: float) -> float:
        return 0.0 if self.appeared is None else (self.went or ended) - self.appeared


def _timed_run(plan: Plan, extra: list[str], log: Path) -> tuple[int, float, float]:
    """Run to the end: return code, seconds in all, seconds its temporary output existed."""
    process = _start(plan, extra, log)
    watch = _Watch(plan, process.pid)
    while process.poll() is None:
        watch.look()
        time.sleep(POLL)
    ended = time.monotonic()
    return process.returncode, ended - watch.started, watch.window(ended)


def _kill(plan: Plan, extra: list[str], log: Path, sig: signal.Signals, delay: float, *, after_stage_start: bool) -> Attempt:
    process = _start(plan, extra, log)
    watch = _Watch(plan, process.pid)
    kill_at = None if after_stage_start else watch.started + delay
    delivered = in_stage = False
    while process.poll() is None:
        present = watch.look()
        if kill_at is None and watch.appeared is not None:
            kill_at = watch.appeared + delay
        if kill_at is not None and time.monotonic() >= kill_at:
            in_stage = present
            process.send_signal(sig)
            delivered = True
            break
        time.sleep(POLL)
    try:
        returncode = process.wait(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        process.kill()  # not left running after the test
        process.wait()
        said = log.read_text(errors="replace")[-1500:]
        raise AssertionError(f"{plan.kind} {' '.join(extra)} still ran 300 s after {sig.name}: {said}") from None
    ended = time.monotonic()
    moment = "in stage" if after_stage_start else "anytime"
    return Attempt(sig.name, moment, round(delay, 3), delivered, returncode, in_stage, ended - watch.started, watch.window(ended))


def _folder_problems(plan: Plan) -> list[str]:
    """Every visible folder with a manifest must verify; the output must be complete or absent."""
    problems = []
    if plan.out.exists():
        try:
            load_stage(plan.out, plan.kind)
        except Exception as exc:  # noqa: BLE001 - reported, not raised, so the sequence goes on
            problems.append(f"output {plan.out}: {exc}")
    for manifest_path in plan.root.rglob("manifest.json"):
        folder = manifest_path.parent
        if any(part.startswith(".") for part in folder.relative_to(plan.root).parts):
            continue  # a dead run's temporary: hidden, never accepted, removed by the next run
        manifest = read_manifest(folder)
        try:
            load_stage(folder, (manifest or {}).get("kind", "?"))
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{folder}: {exc}")
    if plan.resume:
        for checkpoint in checkpoint_folder(plan.out).glob("seed-*/ckpt-*"):
            manifest = _read_json(checkpoint / CHECKPOINT_MANIFEST)
            problem = "no manifest" if manifest is None else verify_files(checkpoint, manifest)
            if problem:
                problems.append(f"checkpoint {checkpoint}: {problem}")
    return problems


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _identity(plan: Plan) -> dict:
    manifest = load_stage(plan.out, plan.kind)
    return {"fingerprint": manifest["fingerprint"], "files": manifest["files"]}


def _sequence(plan: Plan, logs: Path) -> KillLog:
    rng = random.Random(f"{SEED}-{plan.kind}")
    resume = ["--resume"] if plan.resume else []
    code, total, in_stage = _timed_run(plan, resume, logs / "reference.log")
    if code != 0:
        raise AssertionError(f"{plan.kind} reference run failed: {(logs / 'reference.log').read_text()[-2000:]}")
    result = KillLog(plan.kind, _identity(plan))
    reference_weights = _weights(plan) if plan.kind == "finetune" else None
    number = 0
    signals: list[signal.Signals] = []
    while number < 4 * KILLS[plan.kind]:
        delivered = [a for a in result.attempts if a.delivered]
        every_signal = {a.signal for a in delivered} == {s.name for s in SIGNALS}
        if len(delivered) >= KILLS[plan.kind] and every_signal and any(a.in_stage for a in delivered):
            break
        number += 1
        if plan.out.exists() and rng.random() < 0.3:
            shutil.rmtree(plan.out)
            for cache in plan.scratch:
                shutil.rmtree(cache, ignore_errors=True)
        extra = (["--force"] if plan.out.exists() else []) + resume
        if not signals:  # each stage gets every signal, in a seeded order
            signals = rng.sample(SIGNALS, len(SIGNALS))
        sig = signals.pop()
        after_stage_start = rng.random() < 2 / 3
        delay = rng.random() * (in_stage if after_stage_start else total)
        log = logs / f"attempt-{number}.log"
        attempt = _kill(plan, extra, log, sig, delay, after_stage_start=after_stage_start)
        result.attempts.append(attempt)
        if not attempt.delivered:
            # Finished first: reruns (cached pre-tokenization, warm disk) are shorter than the reference, so aim by them.
            total, in_stage = attempt.seconds, attempt.stage_seconds
        text = log.read_text(errors="replace")
        if attempt.returncode not in ENDINGS or "internal error" in text:
            result.problems.append(f"attempt {number} ({attempt}) ended badly: {text[-1500:]}")
        if attempt.returncode == EXIT_TERMINATED and "terminated by SIGTERM" not in text:
            result.problems.append(f"attempt {number}: exit {EXIT_TERMINATED} without saying why: {text[-500:]}")
        if attempt.returncode == EXIT_PREEMPTED and "stopped by SIGTERM" not in text:
            result.problems.append(f"attempt {number}: exit {EXIT_PREEMPTED} without saying why: {text[-500:]}")
        # Exit 0 promises an output.
        if attempt.returncode == 0 and not plan.out.is_dir():
            result.problems.append(f"attempt {number} ({attempt}) exited 0 without an output")
        result.problems += [f"after attempt {number} ({attempt}): {p}" for p in _folder_problems(plan)]
    extra = (["--force"] if plan.out.exists() else []) + resume
    code = subprocess.run([sys.executable, "-m", "greenadapt", *plan.args, *extra], capture_output=True, text=True, env=ENV,
                          timeout=HANG_S)
    if code.returncode != 0:
        result.problems.append(f"final run failed ({code.returncode}): {code.stderr[-2000:]}")
        return result
    result.final = _identity(plan)
    if reference_weights is not None:
        for key, value in _weights(plan).items():
            if not np.allclose(value, reference_weights[key], rtol=0, atol=1e-6):
                result.problems.append(f"final finetune weights differ from the reference in {key}")
    if plan.resume and checkpoint_folder(plan.out).exists():
        result.problems.append("the finished finetune run left its checkpoints behind")
    return result


def _weights(plan: Plan) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(plan.out / "model.safetensors"))


# --------------------------------------------------------------------------
# The three stages on tiny inputs


def _corpus(path: Path, lines: int = 1500) -> Path:
    words = ("the of and in to a with Patients Cells tumor Blood heart-rate sleep café naïve Tachycardia "
             "infection virus COVID-19 protein gene expression β-blocker").split()
    rng = random.Random(0)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(lines):
            handle.write(" ".join(rng.choice(words) for _ in range(rng.randint(1, 25))) + ".\n")
    return path


def _plan(kind: str, root: Path, tiny_bert: Path) -> Plan:
    work = root / f"{kind}-work"
    if kind == "w2v":
        corpus = _corpus(root / "corpus.txt")
        return Plan("w2v", ["w2v", "-c", str(corpus), "-m", str(tiny_bert), "--workers", "1", "--w2v-min-count", "2", "--seed", "3",
                            "--epochs", "3", "--workdir", str(work), "--out", str(work / "w2v"), "--quiet"],
                    work / "w2v", work, scratch=[work / "cache"])
    if kind == "expand":
        aligned = align_stage(w2v=linear_w2v(work / "w2v", tiny_bert, noise=0.01)[0], run=Run(out=work / "align"))
        return Plan("expand", ["expand", "--align", str(aligned.path), "--out", str(work / "expanded"), "--quiet"],
                    work / "expanded", work)
    model = build_tiny_expanded(work / "inputs" / "model")
    train = write_ner_file(work / "inputs" / "train.tsv", 40, seed=1)
    return Plan("finetune", ["finetune", "--task", "ner", "--train", str(train), "--model", str(model), "--out",
                             str(work / "run"), "--batch-size", "8", "--max-steps", "10", "--lr", "3e-3",
                             "--save-every", "2", "--device", "cpu", "--quiet"],
                work / "run", work, resume=True)


# One test a stage, each making only its own sequence: under pytest-xdist the three run on whichever workers are free,
# where one fixture of all three ran again on every worker that drew one of its tests.
@pytest.mark.parametrize("kind", list(KILLS))
def test_killed_runs_leave_complete_output_or_none_and_a_rerun_matches(tmp_path: Path, tiny_bert: Path, kind: str) -> None:
    plan = _plan(kind, tmp_path, tiny_bert)
    (tmp_path / "logs").mkdir()
    result = _sequence(plan, tmp_path / "logs")
    assert not result.problems, "\n".join(result.problems)
    delivered = [a for a in result.attempts if a.delivered]
    assert len(delivered) >= KILLS[kind], result.attempts
    assert any(a.in_stage for a in delivered), "no kill landed while the stage was writing"
    assert {a.signal for a in delivered} == {"SIGKILL", "SIGTERM", "SIGINT"}
    assert result.final is not None
    assert result.final["fingerprint"] == result.reference["fingerprint"]
    if kind in ("w2v", "expand"):
        # Byte for byte: with one worker and a seed, w2v's vectors.bin too.
        assert result.final["files"] == result.reference["files"]
    else:
        assert set(result.final["files"]) == set(result.reference["files"])


def test_at_least_twenty_kills_with_every_signal() -> None:
    """Each stage's test (one per entry of KILLS) delivers at least its KILLS, with every signal among them: twenty in all,
    over the three stages ``_plan`` makes."""
    assert sum(KILLS.values()) >= 20 and set(KILLS) == {"w2v", "expand", "finetune"}


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import greenadapt.adaptation.w2v as w2v_module
    from greenadapt.cli import main

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(w2v_module, "w2v_stage", interrupted)
    monkeypatch.setattr(sys, "argv", ["greenadapt", "w2v", "-c", "corpus.txt", "--quiet"])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 130
    assert "interrupted" in capsys.readouterr().err
