"""The warm starts README's test runs its commands with (tests/warm_start.py) behave as the command run cold would.

A defect there would hide README commands that fail (a lost exit status), so each property a shell relies on is
checked here on a zygote that preloads nothing: the status, the streams, the folder and environment, a signal to the
client, the client's death, and the cold start when the environment differs in what libraries read at import.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import processes
from warm_start import Zygote, differing_variables

HERE = Path(__file__).resolve()


def report_and_exit() -> None:
    """A command for the zygote: reads stdin, writes what it was given on stdout, a line on stderr, exits 3."""
    seen = {"argv": sys.argv, "cwd": os.getcwd(), "stdin": sys.stdin.read(), "marker": os.environ.get("GREENADAPT_MARKER"),
            "parent": os.getppid(), "imported": os.environ.get("WARM_TEST_IMPORTED")}
    print(json.dumps(seen))
    print("to stderr", file=sys.stderr)
    sys.exit(3)


def wait_forever() -> None:
    """A command for the zygote: writes its pid to the file its argument names, then sleeps; a SIGTERM is written
    beside it and ends it with 143, as greenadapt's commands end on one."""
    def stop(number: int, _frame: object) -> None:
        Path(sys.argv[1] + ".signal").write_text(signal.Signals(number).name)
        os._exit(143)

    signal.signal(signal.SIGTERM, stop)
    Path(sys.argv[1]).write_text(str(os.getpid()))
    time.sleep(120)


def _shell(zygote: Zygote, env: dict[str, str], entry: str, command: str, cwd: Path, **run: object) -> subprocess.Popen[str]:
    env = dict(env, BASH_ENV=zygote.bash_env(program=str(HERE), entry=entry))
    return subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **run)  # type: ignore[call-overload]


@pytest.fixture
def zygote_env() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}


def test_a_warm_command_gets_the_callers_arguments_streams_folder_environment_and_gives_back_its_status(
        tmp_path: Path, zygote_env: dict[str, str]) -> None:
    # a preloaded module that sets a variable at import, as torch does (TORCHINDUCTOR_CACHE_DIR): the command sees it
    (tmp_path / "sets_variable.py").write_text("import os\nos.environ['WARM_TEST_IMPORTED'] = 'yes'\n")
    zygote_env["PYTHONPATH"] = os.pathsep.join(filter(None, [zygote_env.get("PYTHONPATH"), str(tmp_path)]))
    with Zygote(zygote_env, modules=("sets_variable",)) as zygote:
        shell = _shell(zygote, zygote_env, "test_warm_start:report_and_exit",
                       "GREENADAPT_MARKER=set greenadapt one 'two words'", tmp_path)
        out, err = shell.communicate("from stdin\n", timeout=60)
    assert shell.returncode == 3, err
    seen = json.loads(out)
    assert seen["argv"] == [str(HERE), "one", "two words"]
    assert seen["cwd"] == str(tmp_path) and seen["stdin"] == "from stdin\n" and seen["marker"] == "set"
    assert seen["imported"] == "yes"
    assert seen["parent"] != shell.pid  # it ran in the zygote, not as the shell's child
    assert err == "to stderr\n"


def test_a_command_that_cannot_be_set_up_fails_instead_of_passing(tmp_path: Path, zygote_env: dict[str, str]) -> None:
    """A folder gone between the client's request and the fork: the status is 1 with the reason on stderr, not 0."""
    import socket

    import warm_start

    payload = json.dumps({"argv": [str(HERE)], "cwd": str(tmp_path / "gone"), "env": zygote_env,
                          "entry": "test_warm_start:report_and_exit"}).encode()
    read_end, write_end = os.pipe()
    with Zygote(zygote_env, modules=()) as zygote, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(zygote.socket)
        with open(os.devnull) as nothing:
            socket.send_fds(conn, [warm_start._HEADER.pack(len(payload))], [nothing.fileno(), write_end, write_end])
        conn.sendall(payload)
        os.close(write_end)
        assert "pid" in (warm_start._line(conn) or {})
        done = warm_start._line(conn)
    with os.fdopen(read_end) as stderr:
        assert done is not None and os.waitstatus_to_exitcode(done["status"]) == 1
        assert "FileNotFoundError" in stderr.read()


def test_python_running_a_script_starts_warm_as_the_script_would_run_cold(tmp_path: Path, zygote_env: dict[str, str]) -> None:
    (tmp_path / "block.py").write_text(
        "import json, os, sys\n"
        "print(json.dumps({'argv': sys.argv, 'name': __name__, 'path0': sys.path[0], 'parent': os.getppid()}))\n"
        "sys.exit(5)\n")
    with Zygote(zygote_env, modules=()) as zygote:
        shell = _shell(zygote, zygote_env, "unused:unused", "python block.py x; echo $?; python -c 'print(7)'", tmp_path)
        out, err = shell.communicate("", timeout=60)
    seen, status, plain = out.splitlines()
    assert json.loads(seen)["argv"] == ["block.py", "x"] and json.loads(seen)["name"] == "__main__", err
    assert json.loads(seen)["path0"] == str(tmp_path.resolve())  # the script's folder, as `python block.py` has it
    assert json.loads(seen)["parent"] != shell.pid and (status, plain) == ("5", "7")


def test_an_environment_that_differs_in_what_imports_read_starts_cold(tmp_path: Path, zygote_env: dict[str, str]) -> None:
    assert differing_variables({"PATH": "a", "GREENADAPT_X": "1", "HF_HOME": "b"}, {"PATH": "c"}) == ["HF_HOME"]
    program = tmp_path / "program"
    program.write_text("#!/bin/sh\necho cold \"$@\"\n")
    program.chmod(0o755)
    with Zygote(zygote_env, modules=()) as zygote:
        client = zygote.client(str(program), "test_warm_start:report_and_exit")
        changed = subprocess.run([*client, "a"], env=dict(zygote_env, HF_HUB_OFFLINE="changed"), capture_output=True,
                                 text=True, timeout=60)
        # the same command in the zygote's environment: warm (on the same socket: nothing else decided it)
        same = subprocess.run([*zygote.client(str(HERE), "test_warm_start:report_and_exit"), "a"], env=zygote_env,
                              capture_output=True, text=True, timeout=60)
    assert same.returncode == 3 and json.loads(same.stdout)["argv"] == [str(HERE), "a"]
    assert (changed.returncode, changed.stdout) == (0, "cold a\n"), changed.stderr


def test_a_signal_to_the_client_reaches_the_command_and_its_status_is_the_clients(tmp_path: Path, zygote_env: dict[str, str]) -> None:
    pid_file = tmp_path / "pid"
    with Zygote(zygote_env, modules=()) as zygote:
        client = subprocess.Popen([*zygote.client(str(HERE), "test_warm_start:wait_forever"), str(pid_file)], env=zygote_env)
        command = _wait_for_pid(pid_file)
        client.send_signal(signal.SIGTERM)
        assert client.wait(timeout=60) == 143
        _wait_gone(command)
    assert (tmp_path / "pid.signal").read_text() == "SIGTERM"


def test_a_killed_client_takes_its_command_with_it(tmp_path: Path, zygote_env: dict[str, str]) -> None:
    pid_file = tmp_path / "pid"
    with Zygote(zygote_env, modules=()) as zygote:
        client = subprocess.Popen([*zygote.client(str(HERE), "test_warm_start:wait_forever"), str(pid_file)], env=zygote_env)
        command = _wait_for_pid(pid_file)
        client.kill()
        client.wait(timeout=60)
        _wait_gone(command)


def _wait_for_pid(path: Path) -> int:
    deadline = time.monotonic() + 60
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    return int(path.read_text())


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 30
    while any(process.pid == pid and process.state != "Z" for process in processes()):  # a zombie has ended
        assert time.monotonic() < deadline, f"the command {pid} outlived its client"
        time.sleep(0.05)


def test_a_signal_that_comes_before_the_commands_pid_is_passed_on_once_the_pid_is_known(tmp_path: Path) -> None:
    """A stand-in zygote holds its reply until the client has had a SIGTERM: the command still gets it."""
    import socket

    import warm_start

    command = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
                                "print('ready', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert command.stdout is not None and command.stdout.readline() == "ready\n"
    path = str(Path(tempfile.mkdtemp(prefix="warm-")) / "stand-in.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(1)
        client = subprocess.Popen([sys.executable, "-I", "-S", warm_start.__file__, "client", path, "/bin/false", "x:y"])
        conn, _ = server.accept()
        header, fds, _, _ = socket.recv_fds(conn, 4, 3)
        warm_start._read_exactly(conn, warm_start._HEADER.unpack(header)[0])  # the request: the client now waits
        for fd in fds:
            os.close(fd)
        client.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # were it later, the client would pass it on directly: the test would hold either way
        conn.sendall(json.dumps({"pid": command.pid}).encode() + b"\n")
        try:
            assert command.wait(timeout=30) == 143
        finally:
            command.kill()
        conn.sendall(json.dumps({"status": 143 << 8}).encode() + b"\n")
        assert client.wait(timeout=30) == 143
        conn.close()
    os.unlink(path)
    os.rmdir(os.path.dirname(path))
