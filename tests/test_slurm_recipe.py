"""The Slurm recipe of docs/cluster.md (issue 66, item 3), as far as a machine without Slurm can test it: the script's
shape, and what it runs, with stand-ins for ``scontrol``, ``srun``, ``ray``, ``sleep`` and ``greenadapt`` that record
their arguments."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

from conftest import REPO

SCRIPT = REPO / "docs" / "slurm" / "compare-ray.sbatch"

STAND_INS = {
    "scontrol": 'echo "$*" >> "$CALLS/scontrol"; printf "node-a\\nnode-b\\nnode-c\\n"',
    # srun -w NODE CMD...: runs CMD (as Slurm would on NODE), its node recorded
    "srun": 'node=""; while [ $# -gt 0 ]; do case "$1" in -w) node=$2; shift 2;; --*) shift;; *) break;; esac; done; '
            'echo "$node $*" >> "$CALLS/srun"; if [ "$1" = hostname ]; then echo "10.0.0.$(( ${#node} ))"; else "$@"; fi',
    "ray": 'echo "$*" >> "$CALLS/ray"',
    "sleep": ":",
    "greenadapt": 'echo "RAY_ADDRESS=$RAY_ADDRESS $*" >> "$CALLS/greenadapt"; echo "{}"',
}


def _run_with_stand_ins(tmp_path: Path) -> Path:
    bin_dir, calls, venv = tmp_path / "bin", tmp_path / "calls", tmp_path / "venv"
    for folder in (bin_dir, calls, venv / "bin"):
        folder.mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    for name, body in STAND_INS.items():
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls), "GREENADAPT_VENV": str(venv),
           "SLURM_JOB_NODELIST": "node-[a-c]", "SLURM_CPUS_PER_TASK": "16", "SLURM_GPUS_PER_TASK": "4", "SLURM_JOB_ID": "77"}
    done = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return calls


def test_the_script_is_valid_bash_with_its_slurm_lines() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    text = SCRIPT.read_text()
    assert re.search(r"^#SBATCH --nodes=\d+$", text, re.M) and re.search(r"^#SBATCH --ntasks-per-node=1$", text, re.M)
    assert "--ray auto" in text and "ray start --head" in text


def test_it_starts_the_head_then_the_workers_and_runs_compare_against_the_head(tmp_path: Path) -> None:
    text = SCRIPT.read_text()
    # The head is started, then waited for, before any worker (the srun lines run in the background: their order as
    # recorded below is the shell's, so the order is read from the script itself).
    head_at, workers_at = text.index("ray start --head"), text.index("ray start --address")
    assert head_at < workers_at and re.search(r"^sleep \d+", text[head_at:workers_at], re.M)
    calls = _run_with_stand_ins(tmp_path)
    ray = (calls / "ray").read_text().splitlines()
    (head,) = [line for line in ray if line.startswith("start --head") and "--block" in line]
    head_ip = re.search(r"--node-ip-address=(\S+)", head)[1]  # type: ignore[index]
    port = re.search(r"--port=(\d+)", head)[1]  # type: ignore[index]
    workers = [line for line in ray if line != head]
    assert len(workers) == 2 and all(f"--address={head_ip}:{port}" in w and "--block" in w for w in workers)
    assert all("--num-cpus=16" in line and "--num-gpus=4" in line for line in ray)
    started_on = {line.split()[0]: line for line in (calls / "srun").read_text().splitlines() if " ray start" in f" {line}"}
    assert sorted(started_on) == ["node-a", "node-b", "node-c"]  # one Ray node per Slurm node
    assert "--head" in started_on["node-a"] and head_ip == "10.0.0.6"  # the head on the first, at that node's address
    (compare,) = (calls / "greenadapt").read_text().splitlines()
    assert compare.startswith(f"RAY_ADDRESS={head_ip}:{port} compare ") and "--ray auto" in compare
    assert (tmp_path / "compare-77.json").read_text().strip() == "{}"


def test_every_option_it_gives_compare_is_one_compare_takes(tmp_path: Path) -> None:
    from greenadapt.comparison.settings import CompareSettings
    from greenadapt.options import declared_fields

    calls = _run_with_stand_ins(tmp_path)
    arguments = shlex.split((calls / "greenadapt").read_text().split(" ", 1)[1])
    taken = {flag for _, declared in declared_fields(CompareSettings) for flag in declared.flags} | {"--out", "--json"}
    given = [a for a in arguments if a.startswith("--")]
    assert given and set(given) <= taken, set(given) - taken
    assert {"--task", "--train", "--test", "--model", "--out", "--ray"} <= set(given)
