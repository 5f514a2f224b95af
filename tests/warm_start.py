"""Warm starts for the tests' ``greenadapt`` commands: a process that has imported torch and transformers forks one per command.

Most of the suite's CPU time on a slow machine is interpreter start-ups: each ``greenadapt`` process imports torch and
transformers (6-8 CPU-seconds on a Zen 3 EPYC, 4 on a newer one) before a command on a tiny model that takes one. A
test that runs many commands in one environment (README's examples) starts a :class:`Zygote` with that environment:
it imports those libraries once and forks a process per command, each with the caller's arguments, working folder,
environment and standard streams (passed as file descriptors), so each command is a process of its own that exits with
its own status. The caller's side is a client (``python -I -S warm_start.py client ...``, stdlib only, ~20 ms) that a
shell reaches as a ``greenadapt`` function (:meth:`Zygote.bash_env`): a command line is not rewritten.

What a warm command does not exercise is the interpreter's start and the console script, which every other subprocess
test and CI's ``make wheel-demo`` run. Libraries read some environment variables once, at import (Hugging Face's
cache and offline switches, OpenMP's thread count, ``PYTHONPATH``), so a command whose environment differs from the
zygote's in any variable but those of :data:`RUN_TIME_VARIABLES` starts cold, as the real program, instead.

Run as ``warm_start.py serve SOCKET MODULE...`` (the zygote) or ``warm_start.py client SOCKET PROGRAM ENTRY ARGS...``
(ENTRY: the ``module:function`` that is PROGRAM's main).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

# Variables nothing imported by the zygote reads at import: a command may differ from the zygote in these and start warm.
# (greenadapt's own are read when a command runs: the zygote does not import greenadapt.)
RUN_TIME_VARIABLES = ("PATH", "VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT", "PS1", "PWD", "OLDPWD", "SHLVL", "_", "BASH_ENV")
RUN_TIME_PREFIXES = ("GREENADAPT_",)
# The entry that runs ARGS[0] as ``python ARGS`` would (PROGRAM: the interpreter, for a cold start).
SCRIPT = "script"
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_HEADER = struct.Struct("!I")


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    chunks = b""
    while len(chunks) < size:
        chunk = conn.recv(size - len(chunks))
        if not chunk:
            raise EOFError("the client left")
        chunks += chunk
    return chunks


def _line(conn: socket.socket) -> dict | None:
    text = b""
    while not text.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            return None
        text += chunk
    return json.loads(text)


def differing_variables(request: dict[str, str], own: dict[str, str]) -> list[str]:
    """The variables, read at import, in which a command's environment differs from the zygote's."""
    names = set(request) | set(own)
    return sorted(name for name in names if request.get(name) != own.get(name)
                  and name not in RUN_TIME_VARIABLES and not name.startswith(RUN_TIME_PREFIXES))


# ---- the zygote ------------------------------------------------------------------------------------------------


def serve(path: str, modules: list[str]) -> None:
    import ctypes
    import importlib

    # ended with the test that started it, however that ends (PR_SET_PDEATHSIG: a killed pytest worker too)
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if os.getppid() == 1:
        return
    started = dict(os.environ)
    for name in modules:
        importlib.import_module(name)
    # what the imports set in the environment (torch: TORCHINDUCTOR_CACHE_DIR) a cold command's imports set too
    imported = {name: value for name, value in os.environ.items() if started.get(name) != value}
    # each supervisor reaped as it ends, so that its CPU time counts in the zygote's children (/usr/bin/time's figure)
    signal.signal(signal.SIGCHLD, lambda _number, _frame: _reap())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print("ready", flush=True)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nobody reads the pipe after this line: nothing may fill it
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                _supervise(conn, started, imported)
            finally:
                os._exit(0)
        conn.close()


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _supervise(conn: socket.socket, started: dict[str, str], imported: dict[str, str]) -> None:
    """One command: fork it, tell the client its pid and then its wait status; kill it if the client goes away."""
    import select

    header, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
    header += _read_exactly(conn, _HEADER.size - len(header))
    request = json.loads(_read_exactly(conn, _HEADER.unpack(header)[0]))
    differing = differing_variables(request["env"], started)
    if differing:
        conn.sendall(json.dumps({"cold": differing}).encode() + b"\n")
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            conn.close()
            _run_command(request, fds, imported)  # ends the process
        except BaseException:
            import traceback

            traceback.print_exc()  # a set-up that failed (a folder gone, say): never an exit 0 for a command not run
        os._exit(1)
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    process = os.pidfd_open(pid)
    while True:
        readable, _, _ = select.select([conn.fileno(), process], [], [])
        if process in readable:
            _, status = os.waitpid(pid, 0)
            conn.sendall(json.dumps({"status": status}).encode() + b"\n")
            return
        if not conn.recv(1):  # the client was killed: its command goes with it
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return


def _run_command(request: dict, fds: list[int], imported: dict[str, str]) -> None:
    """In the forked command: the client's streams, folder, environment and arguments, then its program, then an
    interpreter's exit (non-daemon threads joined, exit handlers run, streams flushed)."""
    import atexit
    import threading
    import traceback

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.update(imported)
    sys.argv = request["argv"]
    sys.path[0] = os.path.dirname(os.path.realpath(request["argv"][0]))  # a script's folder, as cold (not tests/)
    for number in FORWARDED_SIGNALS:
        signal.signal(number, signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL)
    code: object = 0
    try:
        if request["entry"] == SCRIPT:
            import runpy

            runpy.run_path(sys.argv[0], run_name="__main__")
        else:
            module, _, function = request["entry"].partition(":")
            getattr(__import__(module, fromlist=[function]), function)()
    except SystemExit as done:
        code = done.code
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        code = 1
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            code = code or 120
    os._exit(code or 0)


# ---- the client --------------------------------------------------------------------------------------------------


def client(path: str, program: str, entry: str, args: list[str]) -> None:
    """Run ``program ARGS`` in the zygote at ``path``, as if it were run here; cold (exec) when it cannot be warm."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        os.execv(program, [program, *args])
    argv = args if entry == SCRIPT else [program, *args]
    payload = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "entry": entry}).encode()
    # a signal before the command's pid is known is held and passed on once it is (the default would end this
    # client alone, and its command only when the supervisor saw it gone: by SIGKILL, without its own handlers)
    held: list[int] = []
    target: list[int] = []

    def forward(received: int, _frame: object) -> None:
        if target:
            os.kill(target[0], received)
        else:
            held.append(received)

    for number in FORWARDED_SIGNALS:
        signal.signal(number, forward)
    socket.send_fds(conn, [_HEADER.pack(len(payload))], [0, 1, 2])
    conn.sendall(payload)
    reply = _line(conn)
    if reply is None or "cold" in reply:
        conn.close()
        for number in FORWARDED_SIGNALS:
            signal.signal(number, signal.SIG_DFL)
        for signal_number in held:  # what this process would have done with it
            os.kill(os.getpid(), signal_number)
        os.execv(program, [program, *args])
    target.append(reply["pid"])
    for signal_number in held:
        os.kill(target[0], signal_number)
    pid = target[0]
    done = _line(conn)
    if done is None:
        print(f"warm_start: lost the command {pid}", file=sys.stderr)
        sys.exit(1)
    code = os.waitstatus_to_exitcode(done["status"])
    if code < 0:  # killed by a signal: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


# ---- for tests ----------------------------------------------------------------------------------------------------


class Zygote:
    """A zygote with ``env`` for the ``with`` block: :meth:`bash_env` makes a shell's ``greenadapt`` start warm in it."""

    def __init__(self, env: dict[str, str], modules: tuple[str, ...] = ("torch", "transformers.models.bert.modeling_bert")):
        self.env = env
        self.modules = modules
        # a socket's path has at most 107 bytes: pytest's tmp_path can be longer
        self.folder = Path(tempfile.mkdtemp(prefix="warm-"))
        self.socket = str(self.folder / "zygote.sock")

    def __enter__(self) -> Zygote:
        # a session of its own: leaving the block kills the zygote and every command still running in one call
        self.process = subprocess.Popen([sys.executable, __file__, "serve", self.socket, *self.modules], env=self.env,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            self.process.wait()
            raise RuntimeError(f"the zygote did not start (exit {self.process.returncode}); its stderr is above")
        return self

    def client(self, program: str, entry: str = "greenadapt.cli:entry_point") -> list[str]:
        """The command line that runs ``program`` warm; its arguments follow."""
        return [sys.executable, "-I", "-S", __file__, "client", self.socket, program, entry]

    def bash_env(self, program: str, entry: str = "greenadapt.cli:entry_point") -> str:
        """A file for ``$BASH_ENV`` that defines ``greenadapt`` as a warm start of ``program`` (its path, for argv[0]
        and for a cold start), and ``python SCRIPT.py`` as a warm start of the script; a shell function is found
        before any program of that name on ``$PATH``."""
        script = self.folder / "bash_env.sh"
        words = " ".join(shlex.quote(word) for word in self.client(program, entry))
        *head, _, entry_word = self.client("", SCRIPT)  # PROGRAM is the shell's python, found when the function runs
        interpreter = " ".join([*map(shlex.quote, head), '"$(command -v python)"', shlex.quote(entry_word)])
        script.write_text(f'greenadapt() {{ {words} "$@"; }}\n'
                          # `python SCRIPT.py ...` warm too; any other use of python (-m, -c, options) as it is
                          f'python() {{ case "$1" in *.py) {interpreter} "$@";; *) command python "$@";; esac; }}\n',
                          encoding="utf-8")
        return str(script)

    def __exit__(self, *exc: object) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        for leftover in self.folder.iterdir():
            leftover.unlink()
        self.folder.rmdir()


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3:])
    else:
        client(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
