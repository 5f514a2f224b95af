"""A real local Ray cluster for the tests of ``compare --ray``: started on 127.0.0.1 with this machine's cores, stopped
afterwards with every process it started (its own session), nothing left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import free_port

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0
TERM_GRACE_S = 5.0


def _session_members(session: int) -> list[int]:
    """Processes in the session ``ray start`` opened (the head's GCS, raylet and its workers); a zombie is gone, only
    not reaped (PID 1 of a container may never reap it)."""
    from conftest import processes

    return [process.pid for process in processes() if process.session == session and process.state != "Z"]


def _stop_with_parent() -> None:
    """In ``ray start``'s process: SIGTERM when the test process dies, even by SIGKILL (the fixture's teardown cannot
    run then), so the cluster stops what it started instead of outliving the tests."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _start_head(cpus: int | None, temp: str) -> tuple[subprocess.Popen[str], int, str | None]:
    """Start ``ray start --head --block``: the process, its port, and None once it is up, else why it is not."""
    port = free_port()
    ray = Path(sys.executable).parent / "ray"
    command = [str(ray), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
               f"--num-cpus={cpus or os.cpu_count() or 1}", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
               f"--temp-dir={temp}", "--object-store-memory=300000000",
               # ports of their own, so that two clusters (two test workers) never take each other's defaults
               *(f"--{name}={free_port()}" for name in ("ray-client-server-port", "dashboard-agent-listen-port",
                                                         "dashboard-agent-grpc-port", "runtime-env-agent-port", "metrics-export-port",
                                                         "node-manager-port", "object-manager-port", "dashboard-port"))]
    # As on a real cluster, the nodes do not have the driver's greenadapt variables: compare must send them.
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GREENADAPT_")}, "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONUNBUFFERED": "1"}  # what ray start said before it ended reaches the error line, even if it was killed
    head = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            preexec_fn=_stop_with_parent)
    said: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    assert head.stdout is not None
    while time.monotonic() < deadline:
        line = head.stdout.readline()
        if not line and head.poll() is not None:
            return head, port, f"ray start ended with status {head.returncode}: " + "".join(said[-20:])
        said.append(line)
        if "Ray runtime started" in line:
            return head, port, None
    return head, port, "ray start did not start in time: " + "".join(said[-20:])


@contextmanager
def local_ray_cluster(cpus: int | None = None) -> Iterator[str]:
    """``ray start --head --block`` in a session of its own; yields its address; stops it and every process it made.

    A head that ends before it is up is started once more, on other ports, with a warning that keeps what it said:
    the free ports are probed before ray binds them, and another process can take one meanwhile: ray start then ends
    with status 1 ("Failed to start GCS", or nothing at all; seen once in 61 starts beside other tests, and made so
    by holding the GCS port).
    A second failure is an error."""
    import shutil

    failures: list[str] = []
    while True:
        temp = tempfile.mkdtemp(prefix="ga-ray-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
        head, port, failure = _start_head(cpus, temp)
        try:
            if failure is None:
                yield f"127.0.0.1:{port}"
                return
        finally:
            stop(head)
            if head.stdout is not None:
                head.stdout.close()
            shutil.rmtree(temp, ignore_errors=True)
        failures.append(failure)
        if len(failures) == 2:
            raise RuntimeError("\n".join(failures))
        warnings.warn(f"the local Ray head did not come up; starting it again: {failure}", stacklevel=2)


def stop(head: subprocess.Popen[str]) -> None:
    """SIGTERM to ``ray start --block`` (it stops what it started), then SIGKILL to anything of its session still there."""
    if head.poll() is None:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(TERM_GRACE_S)  # ray start stops its processes one by one, slowly: the rest are killed below
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _session_members(head.pid) and time.monotonic() < deadline:
        for pid in _session_members(head.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    if head.poll() is None:
        head.kill()
        head.wait()
    left = _session_members(head.pid)
    assert not left, f"the Ray cluster left processes running: {left}"


def gcs_server_of(address: str) -> list[int]:
    """The process id of the GCS of the head at ``address`` (the cluster's one process that, killed, loses the head)."""
    port = address.rpartition(":")[2]
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "gcs_server":
                if f"--gcs_server_port={port}" in (entry / "cmdline").read_bytes().decode(errors="replace").split("\0"):
                    found.append(int(entry.name))
        except OSError:
            continue
    return found
