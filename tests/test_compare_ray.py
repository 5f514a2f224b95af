"""``compare --ray`` on a real local Ray cluster (issue 66, item 2): started by these tests on 127.0.0.1, stopped after.

A user without Ray skips them (``pip install 'greenadapt[cluster]'``); CI installs the extra and runs them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import HANG_S, REPO, heavy_modules_after



@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    pytest.importorskip("ray", reason="compare --ray needs Ray: pip install 'greenadapt[cluster]'")
    from ray_helpers import local_ray_cluster

    with local_ray_cluster() as address:
        yield address


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from finetune_helpers import tiny_comparison

    return tiny_comparison(tmp_path_factory.mktemp("compare-ray"))


def _common(setup: dict[str, Path], **more: Any) -> dict[str, Any]:
    return {"task": "ner", "train": setup["train"], "test": setup["test"], "models": {"base": str(setup["base"]),
                                                                                      "green": str(setup["green"])},
            "seeds": [3, 4], "epochs": 1, "batch_size": 8, "device": "cpu", "bootstrap": 200, "keep_going": True, **more}


def _stamps(out: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in out.glob("*/seed-*/manifest.json")}


def _same_result(one: Any, other: Any) -> None:
    assert [v.scores for v in one.variants] == [v.scores for v in other.variants]
    assert [p.to_json() for p in one.pairs] == [p.to_json() for p in other.pairs]
    assert [p.verdict() for p in one.pairs] == [p.verdict() for p in other.pairs]
    assert [sorted(v.finetune_cost) for v in one.variants] == [sorted(v.finetune_cost) for v in other.variants]


@pytest.mark.ray
@pytest.mark.slow
def test_a_compare_on_the_cluster_scores_as_one_here_and_a_rerun_trains_nothing(cluster: str, setup: dict[str, Path],
                                                                                tmp_path: Path) -> None:
    import greenadapt

    here = greenadapt.compare(**_common(setup), out=tmp_path / "here")  # type: ignore[arg-type]
    shared = greenadapt.compare(**_common(setup), out=tmp_path / "shared", ray=cluster, run_cpus=1)  # type: ignore[arg-type]
    _same_result(here, shared)
    logs = sorted((tmp_path / "shared").glob("*/seed-*.log"))
    assert len(logs) == 4 and all("read 32 examples" in log.read_text() for log in logs)
    workers = {int(found) for log in logs for found in re.findall(r" worker (\d+): ", log.read_text())}
    assert workers and os.getpid() not in workers
    stamps = _stamps(tmp_path / "shared")
    assert len(stamps) == 4
    again = greenadapt.compare(**_common(setup), out=tmp_path / "shared", ray=cluster, run_cpus=1)  # type: ignore[arg-type]
    _same_result(shared, again)
    assert _stamps(tmp_path / "shared") == stamps  # finished runs are skipped

    # Storage the nodes do not share: inputs go out through the object store, run folders and logs come back.
    local = greenadapt.compare(**_common(setup), out=tmp_path / "local", ray=cluster, ray_storage="local",
                               run_cpus=1)  # type: ignore[arg-type]
    _same_result(here, local)
    came_back = tmp_path / "local"
    assert all((came_back / v / f"seed-{s}" / "manifest.json").is_file() and (came_back / v / f"seed-{s}.log").is_file()
               for v in ("base", "green") for s in (3, 4))
    manifest = json.loads((came_back / "green" / "seed-3" / "manifest.json").read_text())
    assert "greenadapt-ray" not in json.dumps(manifest)  # every path names this machine's files, not a node's copies
    stamps = _stamps(came_back)
    # They are this machine's runs now: a compare here (no cluster) and one on the cluster both take them as finished.
    again = greenadapt.compare(**_common(setup), out=came_back)  # type: ignore[arg-type]
    _same_result(here, again)
    again = greenadapt.compare(**_common(setup), out=came_back, ray=cluster, ray_storage="local", run_cpus=1)  # type: ignore[arg-type]
    assert _stamps(came_back) == stamps


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("storage", ["shared", "local"])
def test_a_failed_run_is_reported_with_its_log_and_the_others_finish(cluster: str, setup: dict[str, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str], storage: str) -> None:
    import shutil

    from cli_helpers import run_cli

    broken = tmp_path / "broken"
    shutil.copytree(setup["base"], broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")  # passes compare's checks; fails on the node
    out = tmp_path / "cmp"
    code, err = run_cli(["compare", "--task", "ner", "--train", str(setup["train"]), "--test", str(setup["test"]),
                         "--model", f"base={setup['base']}", "--model", f"broken={broken}", "--seeds", "3", "--epochs", "1",
                         "--batch-size", "8", "--device", "cpu", "--keep-going", "--out", str(out), "--ray", cluster,
                         "--run-cpus", "1", "--ray-storage", storage], monkeypatch, capsys)
    log = out / "broken" / "seed-3.log"
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert "1 fine-tuning(s) failed: broken seed 3" in err and str(log) in err, err
    node_log = log.read_text()
    assert "safetensors" in node_log or "weights" in node_log  # the node's log, here
    assert (out / "base" / "seed-3" / "manifest.json").is_file()  # the other run went on and finished
    assert not (out / "broken" / "seed-3").exists()


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "greenadapt", "compare", *args, "--quiet"]


def _slow_args(setup: dict[str, Path], out: Path, cluster: str) -> list[str]:
    """Runs long enough (a few hundred steps) to be caught while they train."""
    return ["--task", "ner", "--train", str(setup["train"]), "--test", str(setup["test"]), "--model", f"base={setup['base']}",
            "--model", f"green={setup['green']}", "--seeds", "1,2", "--epochs", "150", "--save-every", "20", "--batch-size", "8",
            "--device", "cpu", "--bootstrap", "200", "--keep-going", "--out", str(out), "--ray", cluster, "--run-cpus", "1"]


def _start(setup: dict[str, Path], out: Path, cluster: str) -> subprocess.Popen[str]:
    return subprocess.Popen(_cli(*_slow_args(setup, out, cluster)), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run_to_end(setup: dict[str, Path], out: Path, cluster: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_cli(*_slow_args(setup, out, cluster)), cwd=REPO, capture_output=True, text=True, timeout=HANG_S)


def _training_worker(out: Path, timeout: float = HANG_S) -> tuple[Path, int]:
    """The first run's log and its worker's process id, once a run is training."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for log in out.glob("*/seed-*.log"):
            for line in log.read_text(errors="replace").splitlines():
                found = re.search(r" worker (\d+): ", line)
                if found and not (log.parent / log.stem / "manifest.json").exists():
                    return log, int(found[1])
        time.sleep(0.1)
    raise AssertionError("no run started training")


@pytest.mark.ray
@pytest.mark.slow
def test_a_killed_worker_is_retried_or_reported_and_a_rerun_finishes(cluster: str, setup: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "killed"
    compare = _start(setup, out, cluster)
    try:
        log, worker = _training_worker(out)
        os.kill(worker, signal.SIGKILL)
        stdout, stderr = compare.communicate(timeout=HANG_S)
    finally:
        if compare.poll() is None:
            compare.kill()
    run = f"{log.parent.name} seed {log.stem.split('-')[1]}"
    if compare.returncode == 0:  # retried: on another worker, from its last checkpoint
        assert f"worker {worker}:" not in log.read_text(), "the run was not trained again"
    else:
        assert run in stderr and "died" in stderr and len(stderr.strip().splitlines()) == 1, stderr
    rerun = _run_to_end(setup, out, cluster)
    assert rerun.returncode == 0, rerun.stderr
    assert len(_stamps(out)) == 4


@pytest.mark.ray
@pytest.mark.slow
def test_a_second_compare_is_refused_and_ctrl_c_cancels_the_runs(cluster: str, setup: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "busy"
    first = _start(setup, out, cluster)
    try:
        _training_worker(out)
        second = _run_to_end(setup, out, cluster)
        assert second.returncode == 75 and "compare" in second.stderr, second.stderr
        first.send_signal(signal.SIGINT)
        _, stderr = first.communicate(timeout=HANG_S)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130, stderr
    # The cancelled runs stopped: no log grows once compare has gone, and no run folder is half-written.
    sizes = {log: log.stat().st_size for log in out.glob("*/seed-*.log")}
    time.sleep(3)
    assert {log: log.stat().st_size for log in out.glob("*/seed-*.log")} == sizes
    for folder in out.glob("*/seed-*"):
        if folder.is_dir() and not folder.name.endswith(".checkpoint"):
            assert (folder / "manifest.json").is_file(), f"{folder} is half-written"
    rerun = _run_to_end(setup, out, cluster)
    assert rerun.returncode == 0, rerun.stderr


@pytest.mark.ray
def test_every_task_runs_with_the_drivers_greenadapt_variables(cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The nodes' `ray start` did not have them (tests/ray_helpers.py); a run there must see what a run here sees
    ($GREENADAPT_CPU_AUTO_PRECISION decides bf16 or fp32: scores differ without it)."""
    from greenadapt.comparison.ray_runs import ray_cluster

    monkeypatch.setenv("GREENADAPT_CPU_AUTO_PRECISION", "fp32")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("NOT_GREENADAPTS", "x")

    def environment() -> dict[str, str | None]:
        return {name: os.environ.get(name) for name in ("GREENADAPT_CPU_AUTO_PRECISION", "HF_HUB_OFFLINE", "NOT_GREENADAPTS")}

    with ray_cluster(cluster) as ray:
        seen = ray.get(ray.remote(environment).options(num_cpus=0).remote())
    assert seen == {"GREENADAPT_CPU_AUTO_PRECISION": "fp32", "HF_HUB_OFFLINE": "1", "NOT_GREENADAPTS": None}


@pytest.mark.ray
@pytest.mark.slow
def test_a_cluster_that_cannot_take_the_runs_is_one_line_before_any_training(cluster: str, setup: dict[str, Path], tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from cli_helpers import run_cli

    common = ["compare", "--task", "ner", "--train", str(setup["train"]), "--test", str(setup["test"]), "--model", f"base={setup['base']}",
              "--model", f"green={setup['green']}", "--seeds", "1", "--out", str(tmp_path / "never"), "--ray", cluster]
    for more, said in ((["--run-gpus", "1"], "the Ray cluster has 0 GPU(s)"), (["--run-cpus", "64"], "no node of the Ray cluster has"),
                       (["--parallel", "2"], "--parallel is for one machine"), (["--ray-storage", "nfs"], "--ray-storage")):
        code, err = run_cli([*common, *more], monkeypatch, capsys)
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1, err
    code, err = run_cli([*common[:-1], "127.0.0.1:1"], monkeypatch, capsys)
    assert code == 2 and "cannot reach the Ray cluster at 127.0.0.1:1" in err and len(err.strip().splitlines()) == 1, err
    assert not any((tmp_path / "never").glob("*/seed-*"))


def test_the_storage_check_names_a_node_that_cannot_write(tmp_path: Path) -> None:
    """What each node runs, and the line the driver makes of a node's answer (one machine cannot be two nodes that see
    different disks; the real cluster above passes the same check)."""
    from greenadapt.comparison.ray_runs import _probe_storage

    marker = tmp_path / ".ray-probe.tmp"
    marker.write_text("token")
    assert _probe_storage(str(marker), "token", str(tmp_path / "answer.tmp")) == ""
    assert not (tmp_path / "answer.tmp").exists()
    assert "holds something else" in _probe_storage(str(marker), "other", str(tmp_path / "answer.tmp"))
    assert "FileNotFoundError" in _probe_storage(str(tmp_path / "elsewhere" / "m"), "token", str(tmp_path / "a"))
    assert "Error" in _probe_storage(str(marker), "token", str(tmp_path / "no-such-folder" / "answer"))


def test_without_ray_compare_ray_names_the_extra_and_nothing_imports_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from cli_helpers import run_cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    train = tmp_path / "t.tsv"
    train.write_text("a\tO\n")
    code, err = run_cli(["compare", "--task", "ner", "--train", str(train), "--test", str(train), "--model", "a=x", "--model", "b=y",
                         "--out", str(tmp_path / "o"), "--ray", "auto"], monkeypatch, capsys)
    assert code == 2 and "pip install 'greenadapt[cluster]'" in err, err
    assert "ray" not in heavy_modules_after(["--help"], ["compare", "--help"])


@pytest.mark.ray
@pytest.mark.slow
def test_a_head_whose_gcs_dies_mid_run_ends_compare_in_one_line_of_ours(setup: dict[str, Path], tmp_path: Path) -> None:
    """Issue 81: `--ray auto` finds the head, the runs start, then the head's GCS is killed. Ray's client would retry
    for a minute and end the process from C++ (exit 1, its lines only); compare ends first, in one line, exit 5."""
    pytest.importorskip("ray", reason="compare --ray needs Ray: pip install 'greenadapt[cluster]'")
    from ray_helpers import gcs_server_of, local_ray_cluster

    from greenadapt.comparison.ray_runs import HEAD_LOST_S

    with local_ray_cluster() as address:
        out = tmp_path / "lost"
        compare = subprocess.Popen(_cli(*_slow_args(setup, out, "auto")), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env={**os.environ, "RAY_ADDRESS": address})
        try:
            _training_worker(out)
            gcs = gcs_server_of(address)
            assert len(gcs) == 1, gcs
            os.kill(gcs[0], signal.SIGKILL)
            killed = time.monotonic()
            _, stderr = compare.communicate(timeout=HANG_S)
            took = time.monotonic() - killed
        finally:
            if compare.poll() is None:
                compare.kill()
    assert compare.returncode == 5, stderr
    assert len(stderr.strip().splitlines()) == 1 and "stopped answering" in stderr and "rerun the same compare" in stderr, stderr
    assert took < 60 + HEAD_LOST_S, "Ray's own client ended it, not compare"


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
def test_rays_own_lines_on_stderr_go_to_the_log_and_ours_pass_as_written(terminal: bool, tmp_path: Path) -> None:
    """What Ray's C++ core writes on fd 2 during a session (the lines of a lost head) is the log's; greenadapt's own
    lines, a bar's unfinished "\\r" line and a line that only starts with "[" reach the user's stderr as written, and a
    terminal stays a terminal (the bars ask)."""
    import pty

    script = ("import logging, os, sys\n"
              "logging.basicConfig(level=logging.DEBUG, stream=open(sys.argv[1], 'w'), format='%(message)s')\n"
              "from greenadapt.comparison.ray_console import ray_lines_to_log\n"
              "with ray_lines_to_log():\n"
              "    os.write(2, b'[2026-11-28 16:24:52,091 E 11296 11313] task_manager.cc:1545: Failed to push error\\n')\n"
              "    sys.stderr.write('ours: one\\n[not ray] two\\n'); sys.stderr.flush()\n"
              "    os.write(2, b'[2026-11-28 16:25:52,421 E 11296 11373] rpc_client.h:204: Failed to connect to GCS')\n"
              "    os.write(2, b' within 60 seconds\\nbar 50%\\r')\n"
              "    print('tty' if sys.stderr.isatty() else 'pipe', flush=True)\n"
              "sys.stderr.write('after\\n')\n")
    logged = tmp_path / "log.txt"
    command = [sys.executable, "-c", script, str(logged)]
    if terminal:
        leader, follower = pty.openpty()
        done = subprocess.run(command, cwd=REPO, stdout=subprocess.PIPE, stderr=follower, timeout=HANG_S)
        os.close(follower)
        said = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            said += chunk
        os.close(leader)
        stderr = said.decode().replace("\r\n", "\n")  # the test's own pseudo-terminal translates; the relay's does not
    else:
        done = subprocess.run(command, cwd=REPO, capture_output=True, timeout=HANG_S)
        stderr = done.stderr.decode()
    assert done.returncode == 0, stderr
    assert done.stdout.decode().strip() == ("tty" if terminal else "pipe")
    assert stderr == "ours: one\n[not ray] two\nbar 50%\rafter\n", repr(stderr)
    assert logged.read_text().splitlines() == ["ray: [2026-11-28 16:24:52,091 E 11296 11313] task_manager.cc:1545: Failed to push error",
                                               "ray: [2026-11-28 16:25:52,421 E 11296 11373] rpc_client.h:204: Failed to connect to GCS "
                                               "within 60 seconds"]
