#!/usr/bin/env python3
"""Run chosen tests many times and count, per test, how often each passed: the hunt for flaky tests.

A test that starts processes, threads or signals can fail one run in ten;
one green run says little. This runs each selected test N times, each in a
fresh pytest process (``--isolated``, the default), or the files they live
in N times as a whole (``--whole-file``: the same tests next to their
neighbours), and prints one line per test::

    tests/test_x.py::test_y: 30 passed, 0 failed

Failed runs keep their output under ``--logs`` (default ``loop-logs/``).
Exit status: 0 when every run of every test passed, 1 otherwise; stopped (Ctrl-C
or SIGTERM), it prints the counts of the runs that finished and exits 130.

    python tests/loop_tests.py -n 30 tests/test_reliability_ddp.py::test_two_rank_pretrain_resume_matches_an_uninterrupted_run
    python tests/loop_tests.py -n 30 --whole-file tests/test_reliability_signals.py
    make loop-tests TESTS="tests/test_distributed_exit.py" N=30

A file or folder given as a test stands for every test in it (collected
once). ``--find`` keeps only the tests that start processes, threads or
signals, found by what their code does (their body, the helpers of their own
module they call, and their fixtures), not by file name::

    python tests/loop_tests.py --find tests/            # list them
    python tests/loop_tests.py --find -n 30 tests/      # and loop them

Runs are sequential: on a small machine, parallel runs would test the
machine's load more than the tests.
"""

from __future__ import annotations

import argparse
import ast
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


# What starts a process, a thread or a signal, as it reads in a test's code.
CONCURRENT = re.compile(
    r"subprocess\.|Popen|sys\.executable|multiprocessing|ProcessPool|ThreadPool|threading\.|Thread\(|os\.kill|"
    r"signal\.(?:SIG|signal|alarm|raise_signal|pthread_kill)|torchrun|\bworkers=[2-9]|start_new_session"
)


def starts_concurrency(test_id: str) -> bool:
    """Whether the test's body, a same-module function or fixture it names (transitively) starts processes/threads/signals."""
    path, _, name = test_id.partition("::")
    name = name.split("::")[-1].split("[")[0]
    tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
    functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    constants = {
        target.id: ast.get_source_segment((REPO / path).read_text(encoding="utf-8"), node.value) or ""
        for node in tree.body if isinstance(node, ast.Assign) for target in node.targets if isinstance(target, ast.Name)
    }
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in functions:
            continue
        seen.add(current)
        node = functions[current]
        source = ast.unparse(node)
        if CONCURRENT.search(source):
            return True
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {a.arg for a in node.args.args}
        if any(CONCURRENT.search(constants[n]) for n in names if n in constants):
            return True
        todo.extend(names)
    return False


def collect(selection: list[str], extra: list[str]) -> list[str]:
    """The test ids ``selection`` stands for (a file or folder stands for every test in it)."""
    found = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *extra, *selection],
        cwd=REPO, capture_output=True, text=True,
    )
    ids = [line.strip() for line in found.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if not ids:
        sys.exit(f"loop_tests: no test collected from {' '.join(selection)}\n{found.stdout[-2000:]}{found.stderr[-2000:]}")
    return ids


def junit_key(test_id: str) -> tuple[str, str]:
    """The (classname, name) pytest's JUnit XML gives the test ``test_id``."""
    path, *parts = test_id.split("::")
    module = path.removesuffix(".py").replace("/", ".")
    return ".".join([module, *parts[:-1]]), parts[-1]


def pytest_run(targets: list[str], extra: list[str], timeout: float) -> tuple[dict[tuple[str, str], str], str, int]:
    """One pytest process over ``targets``: each test's outcome by its JUnit key, the whole output, the exit status."""
    import tempfile
    import xml.etree.ElementTree as ElementTree

    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", *extra, *targets]
        try:
            done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
            output, status = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as expired:
            text = expired.stdout.decode(errors="replace") if isinstance(expired.stdout, bytes) else (expired.stdout or "")
            return {}, text + f"\n[loop_tests: pytest ran past {timeout:.0f} s and was killed]", -9
        outcomes: dict[tuple[str, str], str] = {}
        if report.is_file():
            for case in ElementTree.parse(report).iter("testcase"):
                tags = {child.tag for child in case}
                outcome = "ERROR" if "error" in tags else "FAILED" if "failure" in tags else "SKIPPED" if "skipped" in tags else "PASSED"
                key = (case.get("classname", ""), case.get("name", ""))
                if outcomes.get(key) not in ("FAILED", "ERROR"):  # an error in teardown after a pass is a second entry
                    outcomes[key] = outcome
    return outcomes, output, status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tests", nargs="+", help="test ids, files or folders (pytest's syntax)")
    parser.add_argument("-n", "--runs", type=int, default=30, help="runs of each test (default 30)")
    parser.add_argument("--whole-file", action="store_true", help="run each test's whole file N times instead of the test alone")
    parser.add_argument("-m", "--marker", default=None, help="pytest -m expression, e.g. 'not cuda'")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one pytest process may run (default 1800)")
    parser.add_argument("--logs", type=Path, default=REPO / "loop-logs", help="where failed runs' output goes")
    parser.add_argument("--find", action="store_true", help="keep only tests that start processes, threads or signals (alone: list them)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    extra = ["-m", args.marker] if args.marker else []
    ids = collect(args.tests, extra)
    if args.find:
        ids = [test for test in ids if starts_concurrency(test)]
        if "-n" not in (argv if argv is not None else sys.argv) and "--runs" not in (argv if argv is not None else sys.argv):
            print("\n".join(ids))
            return 0
    groups = sorted({test.split("::")[0] for test in ids}) if args.whole_file else ids
    counts: dict[str, Counter[str]] = {test: Counter() for test in ids}
    previous = signal.signal(signal.SIGTERM, _stop)
    stopped = False
    try:
        _loop(groups, ids, counts, args, extra)
    except KeyboardInterrupt:
        # A loop of hours is often cut short: say what the runs that finished found (the one under way is not counted).
        stopped = True
        print("loop_tests: stopped; the counts of the runs that finished:", file=sys.stderr, flush=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    for test in ids:
        print(f"{test}: {_summary(counts[test])}")
    return 130 if stopped else 1 if any(_failures(counts[test]) for test in ids) else 0


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _loop(groups: list[str], ids: list[str], counts: dict[str, Counter[str]], args: argparse.Namespace, extra: list[str]) -> None:
    started = time.monotonic()
    for group in groups:
        for run in range(1, args.runs + 1):
            run_started = time.monotonic()
            outcomes, output, status = pytest_run([group], extra, args.timeout)
            failed = 0
            for test in ids if args.whole_file else [group]:
                if args.whole_file and not test.startswith(group + "::"):
                    continue
                outcome = outcomes.get(junit_key(test), "MISSING")  # a crash or kill before the test reported
                counts[test][outcome] += 1
                if outcome not in ("PASSED", "SKIPPED", "XFAIL"):
                    failed += 1
                    args.logs.mkdir(parents=True, exist_ok=True)
                    log = args.logs / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', test)}.run{run}.log"
                    log.write_text(f"exit status {status}\n{output}", encoding="utf-8")
                    print(f"  {test}: run {run} {outcome} (exit {status}; {log})", file=sys.stderr, flush=True)
            # A line a run: a loop of hours shows how far it is and how long a run takes.
            print(f"  run {run}/{args.runs} of {group}: {'ok' if not failed else f'{failed} failed'} "
                  f"({time.monotonic() - run_started:.0f} s)", file=sys.stderr, flush=True)
        # Counts as each group ends, so a loop cut short still says what it ran.
        for test in ids if args.whole_file else [group]:
            if test.startswith(group):
                print(f"  {test}: {_summary(counts[test])}", file=sys.stderr, flush=True)
        print(f"  done {group} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)


def _failures(count: Counter[str]) -> int:
    return sum(n for outcome, n in count.items() if outcome not in ("PASSED", "SKIPPED", "XFAIL"))


def _summary(count: Counter[str]) -> str:
    skipped = count["SKIPPED"] + count["XFAIL"]
    return f"{count['PASSED']} passed, {_failures(count)} failed" + (f", {skipped} skipped" if skipped else "")


if __name__ == "__main__":
    sys.exit(main())
