"""The fifth reliability round (issue 63, item 1): a compare that is interrupted in any way resumes on a rerun.

Each test starts a real ``greenadapt compare --parallel 2`` process on tiny models, interrupts it once a run has saved
a checkpoint (kill -9 of one worker, kill -9 of compare itself, Ctrl-C to the process group), reruns the same command
and checks it ends 0 with the verdict of an uninterrupted comparison. No verdict depends on the machine's speed: the
moment of the interruption is an event (a checkpoint on disk), and a run that finished before it is still a valid case.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HANG_S, REPO, build_tiny_bert, processes
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.errors import EXIT_LOCKED

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process parents from /proc (Linux)")

# Enough steps that a kill lands inside a run (the first checkpoint is at step 3; at 40, 9 of 9 interruptions in three
# loops found the compare running with one checkpoint saved), and no more: 120 cost ~15 CPU-s a test for the same checks.
# The checks hold either way.
STEPS = "40"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import greenadapt

    root = tmp_path_factory.mktemp("round5-compare")
    made = {
        "root": root,
        "base": build_tiny_bert(root / "base", head="base"),
        "green": build_tiny_expanded(root / "green"),
        "train": write_ner_file(root / "train.tsv", 24, seed=1),
        "test": write_ner_file(root / "test.tsv", 24, seed=2),
    }
    # The uninterrupted comparison every interrupted one must end as.
    greenadapt.compare("ner", made["train"], made["test"], {"base": str(made["base"]), "green": str(made["green"])},
                       out=root / "reference", **_RECIPE, progress=False)  # type: ignore[arg-type]
    made["reference"] = root / "reference"
    return made


_RECIPE = {"seeds": [1, 2], "max_steps": int(STEPS), "batch_size": 4, "device": "cpu", "bootstrap": 200, "save_every": 3,
           "keep_going": True}


def _args(setup: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "greenadapt", "compare", "--task", "ner", "--train", str(setup["train"]), "--test", str(setup["test"]),
            "--model", f"base={setup['base']}", "--model", f"green={setup['green']}", "--seeds", "1,2", "--max-steps", STEPS,
            "--batch-size", "4", "--device", "cpu", "--bootstrap", "200", "--save-every", "3", "--parallel", "2", "--out", str(out),
            "--keep-going", "--json", *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "GREENADAPT_HEARTBEAT": "0"}


def _start(setup: dict[str, Path], out: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as stderr:
        return subprocess.Popen(_args(setup, out), stdout=subprocess.DEVNULL, stderr=stderr, env=_env(), start_new_session=True)


def _children(pid: int) -> list[int]:
    return [process.pid for process in processes() if process.parent == pid]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its parent has not read its status yet


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # ended meanwhile
        return b""


def _workers(pid: int) -> list[int]:
    """compare's worker processes: the children of its fork server (not multiprocessing's resource tracker)."""
    servers = [child for child in _children(pid) if b"forkserver" in _cmdline(child)]
    return [worker for server in servers for worker in _children(server)]


def _descendants(pid: int) -> list[int]:
    children = _children(pid)
    return children + [pid for child in children for pid in _descendants(child)]


def _wait_for(condition: object, what: str, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + HANG_S
    while not condition():  # type: ignore[operator]
        if process is not None and process.poll() is not None:
            return  # it finished first: the interruption then lands on a finished comparison, still a valid case
        if time.monotonic() > deadline:
            raise AssertionError(f"hung: still waiting for {what} after {HANG_S:.0f} s")
        time.sleep(0.05)


def _a_checkpoint(out: Path) -> bool:
    return any(out.glob("*/seed-*.checkpoint/**/ckpt-*"))


def _rerun(setup: dict[str, Path], out: Path) -> dict[str, object]:
    done = subprocess.run(_args(setup, out), capture_output=True, env=_env(), timeout=HANG_S, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout)


def _same_verdict(result: dict[str, object], setup: dict[str, Path]) -> None:
    reference = json.loads((setup["reference"] / "compare.json").read_text())
    assert [v["scores"] for v in result["variants"]] == [v["scores"] for v in reference["variants"]]  # type: ignore[index]
    assert [(p["differences"], p["verdict"]) for p in result["pairs"]] == [(p["differences"], p["verdict"])
                                                                           for p in reference["pairs"]]  # type: ignore[index]


def test_a_rerun_after_kill_9_of_a_worker_resumes_and_gives_the_same_verdict(setup: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    process = _start(setup, out, tmp_path / "first.log")
    _wait_for(lambda: _a_checkpoint(out) and _workers(process.pid), "a checkpoint", process)
    if process.poll() is None:
        os.kill(_workers(process.pid)[0], signal.SIGKILL)
    process.wait(timeout=HANG_S)
    _same_verdict(_rerun(setup, out), setup)


def test_a_rerun_after_kill_9_of_compare_itself_resumes_and_its_workers_died_with_it(setup: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    process = _start(setup, out, tmp_path / "first.log")
    _wait_for(lambda: _a_checkpoint(out) and len(_workers(process.pid)) == 2, "two workers and a checkpoint", process)
    orphans = _descendants(process.pid)  # the fork server, its workers and the resource tracker
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=HANG_S)
    _wait_for(lambda: not any(_alive(pid) for pid in orphans), "the workers of a killed compare to end")
    _same_verdict(_rerun(setup, out), setup)


def test_a_rerun_after_ctrl_c_to_the_process_group_resumes(setup: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    process = _start(setup, out, tmp_path / "first.log")
    _wait_for(lambda: _a_checkpoint(out), "a checkpoint", process)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=HANG_S) == 130, (tmp_path / "first.log").read_text()[-3000:]
    _same_verdict(_rerun(setup, out), setup)


def test_a_second_compare_on_the_same_folder_ends_75_and_with_wait_queues_behind_the_first(setup: dict[str, Path],
                                                                                           tmp_path: Path) -> None:
    """While the first holds the folder: a second compare ends 75 in one line naming --wait; a third with --wait
    queues behind it and ends 0 with the uninterrupted verdict; the first still finishes; the same command after it is
    up to date. (One first compare serves both: its runs are the test's cost.)"""
    out = tmp_path / "cmp"
    first = _start(setup, out, tmp_path / "first.log")
    lock = tmp_path / ".cmp.lock"
    _wait_for(lambda: lock.is_file() and "greenadapt pid" in lock.read_text(), "the first compare's lock", first)
    if first.poll() is None:
        os.killpg(first.pid, signal.SIGSTOP)  # the first holds the folder while the second tries, however fast either is
        try:
            second = subprocess.run(_args(setup, out), capture_output=True, env=_env(), timeout=HANG_S, check=False)
        finally:
            os.killpg(first.pid, signal.SIGCONT)
        err = second.stderr.decode().strip()
        assert second.returncode == EXIT_LOCKED and len(err.splitlines()) == 1 and "--wait" in err, err
    third = subprocess.run([*_args(setup, out), "--wait"], capture_output=True, env=_env(), timeout=HANG_S, check=False)
    assert third.returncode == 0, third.stderr.decode()[-3000:]
    _same_verdict(json.loads(third.stdout), setup)
    assert first.wait(timeout=HANG_S) == 0, (tmp_path / "first.log").read_text()[-3000:]
    # the same command again, after it: up to date
    _same_verdict(_rerun(setup, out), setup)


def test_compare_with_tensorboard_reruns_and_takes_another_seed(setup: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    out = tmp_path / "cmp"
    args = [a for a in _args(setup, out, "--report-to", "tensorboard") if a not in ("--parallel", "2")]
    args[args.index("--max-steps") + 1] = "4"
    for seeds in ("1,2", "1,2", "1,2,3"):  # the first, the identical rerun, a seed added
        args[args.index("--seeds") + 1] = seeds
        done = subprocess.run(args, capture_output=True, env=_env(), timeout=HANG_S, check=False)
        assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert len(list(out.glob("green/tensorboard/seed-*/seed-*/events.out.tfevents.*"))) >= 3


HUNG_WORKER = """
import sys
from greenadapt.comparison import workers
from interrupt_helpers import hang_in_exit_then_wait

workers.INTERRUPT_GRACE_S = 2.0
job = workers.Job("hung", {"marker": sys.argv[1]}, workers.Path(sys.argv[2]))
try:
    workers.run_jobs(hang_in_exit_then_wait, [job], workers=1, threads=1)
except KeyboardInterrupt:
    sys.exit(130)
"""


def test_ctrl_c_ends_compare_even_when_a_worker_hangs_in_its_own_exit(tmp_path: Path) -> None:
    """A worker that never ends after Ctrl-C (a thread left running in its exit, as a library's thread pool can be
    when the interrupt lands while it starts: seen once in the test above) is killed after the grace period, and
    compare's interrupt still ends it (130) instead of waiting for that worker forever."""
    marker = tmp_path / "running"
    process = subprocess.Popen([sys.executable, "-c", HUNG_WORKER, str(marker), str(tmp_path / "run.log")], env=_env(),
                               cwd=REPO / "tests", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + HANG_S
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), process.communicate(timeout=5)[0].decode()[-2000:]
        process.send_signal(signal.SIGINT)
        output = process.communicate(timeout=60)[0].decode()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, output[-2000:]
    assert "did not end within 2 s of the interrupt: killed" in output


SERVED_WORKER = """
import sys
from greenadapt.comparison import fork_workers_from_a_server, workers
from interrupt_helpers import record_where_it_runs_then_wait

fork_workers_from_a_server()  # as the greenadapt program does before its command
job = workers.Job("served", {"marker": sys.argv[1]}, workers.Path(sys.argv[2]))
workers.run_jobs(record_where_it_runs_then_wait, [job], workers=1, threads=1)
"""


def test_the_programs_workers_fork_from_a_server_that_imported_the_libraries_and_end_with_compare(tmp_path: Path) -> None:
    """The greenadapt program's workers are forked from a server that imported torch, transformers and the fine-tuning
    code once; after kill -9 of compare the worker still ends, though the server (which its workers keep alive) does not
    end first and so does not orphan it."""
    from greenadapt.comparison.workers import FORKSERVER_PRELOAD

    marker = tmp_path / "where.json"
    process = subprocess.Popen([sys.executable, "-c", SERVED_WORKER, str(marker), str(tmp_path / "run.log")], env=_env(),
                               cwd=REPO / "tests", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for(marker.is_file, "the worker", process)
        assert marker.is_file(), process.communicate(timeout=5)[0].decode()[-2000:]
        where = json.loads(marker.read_text())
        assert "forkserver" in where["parent"] and all(repr(name) in where["parent"] for name in FORKSERVER_PRELOAD), where
        process.kill()
        process.wait(timeout=HANG_S)
        _wait_for(lambda: not _alive(where["pid"]), "the worker of a killed compare to end")
    finally:
        if process.poll() is None:
            process.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the server, whatever the test found
