"""The new user's path, timed: README's commands in order, in a new shell, after README's own set-up.

Run from a fresh clone after `make demo` (README's first command, which makes .venv): every later command runs as
`source .venv/bin/activate && COMMAND` with a PATH that has nothing else of this machine's Python, in a folder that
holds the files README's examples name (the README test's sandbox: small data files in the real formats, a stand-in
for the Hub's bert-base-uncased in an offline cache, the `cord19` recipe as a local file). Prints a Markdown table:
each command, its exit status and its wall time.

    git clone <repo> /tmp/fresh && cd /tmp/fresh && /usr/bin/time -f "%e s" make demo
    python bench/readme_transcript.py --sandbox /tmp/readme-sandbox > transcript.md
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sandbox", type=Path, required=True, help="an empty folder to run README's examples in")
    args = parser.parse_args()
    import test_readme  # the README test's sandbox and its reading of README's commands

    venv = HERE / ".venv"
    if not (venv / "bin" / "activate").is_file():
        raise SystemExit(f"no {venv}: run `make demo` first, as README says")
    args.sandbox.mkdir(parents=True, exist_ok=False)
    env = test_readme.build_sandbox(args.sandbox)
    (args.sandbox / ".venv").unlink()
    (args.sandbox / ".venv").symlink_to(venv, target_is_directory=True)  # this clone's own .venv, as README made it
    env["PYTHONPATH"] = str(args.sandbox / "_site")  # the stand-ins only: greenadapt comes from the clone's .venv
    print("| # | command | exit | seconds |")
    print("|---:|---|---:|---:|")
    activated, failed = False, 0
    for number, (language, command) in enumerate(test_readme.readme_commands(), 1):
        if command == test_readme.ACTIVATE:
            activated = True
            continue
        why = test_readme.why_not_run(command)
        shown = command if len(command) < 110 else command[:107] + "..."
        if why:
            print(f"| {number} | `{shown}` | not run: {why} | |")
            continue
        setup = f"{test_readme.ACTIVATE} && " if activated else ""
        if language == "python":
            script = args.sandbox / f"_readme_block_{number}.py"
            script.write_text(command, encoding="utf-8")
            argv, shown = ["bash", "-c", f"{setup}python {script}"], f"(Python block, {len(command.splitlines())} lines)"
        else:
            argv = ["bash", "-o", "pipefail", "-c", setup + command]
        started = time.perf_counter()
        done = subprocess.run(argv, cwd=args.sandbox, env=env, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - started
        failed += done.returncode != 0
        escaped = shown.replace("|", "\\|")
        print(f"| {number} | `{escaped}` | {done.returncode} | {seconds:.1f} |", flush=True)
        if done.returncode:
            print(done.stderr[-2000:], file=sys.stderr)
    print(f"\n{failed} command(s) failed", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    os.environ.setdefault("GREENADAPT_HEARTBEAT", "0")
    main()
