"""Two `w2v` processes on one output folder: the second fails at once (exit 75) or, with --wait, queues.

Process A is a plain ``python -m greenadapt w2v``. The contenders are started
before A and held, with their imports done, until A is writing its output;
then each runs the same command line through ``greenadapt.cli.main``. So they
reach the lock within milliseconds, while A certainly holds it, whatever the
machine's speed.
"""

from __future__ import annotations
from conftest import HANG_S

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from greenadapt.artifacts.manifest import load_stage
from greenadapt.errors import EXIT_LOCKED

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
_HELD = (
    "import os, sys\n"
    "from pathlib import Path\n"
    "import gensim.models\n"
    "from greenadapt.cli import main\n"
    "from greenadapt.artifacts.pretrained import load_fast_tokenizer\n"
    "load_fast_tokenizer(Path(os.environ['WARM_MODEL']))  # the lazy imports too\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "sys.argv = ['greenadapt', *sys.argv[1:]]\n"
    "main()\n"
)


def _corpus(path: Path, lines: int = 3000) -> Path:
    words = "the of and in to a with patients cells tumor blood heart rate sleep tachycardia infection virus protein gene".split()
    rng = random.Random(0)
    path.write_text("".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 25))) + ".\n" for _ in range(lines)))
    return path


def _held(args: list[str], model: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", _HELD, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**ENV, "WARM_MODEL": str(model)})
    assert process.stdout is not None and process.stdout.readline().strip() == "ready", process.communicate()
    return process


def _go(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.write("go\n")
    process.stdin.flush()


def test_second_writer_fails_fast_or_waits_and_the_folder_stays_whole(tmp_path: Path, tiny_bert: Path) -> None:
    out = tmp_path / "w2v"
    args = ["w2v", "-c", str(_corpus(tmp_path / "corpus.txt")), "-m", str(tiny_bert), "--workers", "1", "--w2v-min-count", "2",
            "--epochs", "20", "--workdir", str(tmp_path / "work"), "--out", str(out), "--quiet"]
    fail_fast, waiting = _held(args, tiny_bert), _held([*args, "--wait"], tiny_bert)
    processes = [fail_fast, waiting]
    try:
        writer = subprocess.Popen([sys.executable, "-m", "greenadapt", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=ENV)
        processes.append(writer)
        deadline = time.monotonic() + HANG_S
        while not list(tmp_path.glob(f".w2v.tmp-{writer.pid}-*")):
            assert writer.poll() is None and time.monotonic() < deadline, writer.communicate()
            time.sleep(0.005)

        _go(waiting)  # first, so it queues behind A while A writes
        _go(fail_fast)
        stdout, stderr = fail_fast.communicate(timeout=HANG_S)
        assert fail_fast.returncode == EXIT_LOCKED, (stdout, stderr)
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and f"greenadapt pid {writer.pid}" in errors[0], stderr
        assert "is writing this w2v output right now" in errors[0] and "--wait" in errors[0]
        assert stdout == "" and "Traceback" not in stderr

        writer_out, writer_err = writer.communicate(timeout=HANG_S)
        assert writer.returncode == 0, writer_err
        stdout, stderr = waiting.communicate(timeout=HANG_S)
        assert waiting.returncode == 0, stderr
        assert stdout.startswith("w2v: up to date") and str(out) in stdout  # queued, then found A's output current
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()

    manifest = load_stage(out, "w2v")  # checksums verified
    assert writer_out.startswith("w2v: ") and "up to date" not in writer_out
    assert manifest["config"]["epochs"] == 20
    assert not list(tmp_path.glob(".w2v.tmp-*")) and not list(tmp_path.glob(".w2v.old-*"))

