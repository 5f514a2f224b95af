"""tests/loop_tests.py, the flaky-test hunter: its counts, its exit status, and what it says when stopped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import loop_tests
import pytest

TEST = "tests/test_x.py::test_y"


def _outcomes(sequence: list[str]) -> Iterator[tuple[dict[tuple[str, str], str], str, int]]:
    for outcome in sequence:
        if outcome == "STOP":
            raise KeyboardInterrupt
        yield {loop_tests.junit_key(TEST): outcome}, f"output of a {outcome.lower()} run", 0 if outcome == "PASSED" else 1


@pytest.fixture
def looped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    def run(sequence: list[str], runs: int) -> int:
        outcomes = _outcomes(sequence)
        monkeypatch.setattr(loop_tests, "collect", lambda selection, extra: [TEST])
        monkeypatch.setattr(loop_tests, "pytest_run", lambda targets, extra, timeout: next(outcomes))
        return loop_tests.main(["-n", str(runs), "--logs", str(tmp_path / "logs"), TEST])

    return run


def test_each_run_is_counted_and_a_failed_run_keeps_its_output(looped, capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert looped(["PASSED", "FAILED", "PASSED", "PASSED"], runs=4) == 1
    captured = capsys.readouterr()
    assert captured.out == f"{TEST}: 3 passed, 1 failed\n"
    progress = [line.strip() for line in captured.err.splitlines() if line.startswith("  run ")]  # one line a run
    assert [line.split(": ")[0] for line in progress] == [f"run {run}/4 of {TEST}" for run in range(1, 5)]
    assert [line.split(": ")[1].split(" (")[0] for line in progress] == ["ok", "1 failed", "ok", "ok"]
    (log,) = (tmp_path / "logs").iterdir()
    assert "run2" in log.name and "output of a failed run" in log.read_text()


def test_every_run_passing_exits_0(looped, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    import signal

    before = signal.getsignal(signal.SIGTERM)
    assert looped(["PASSED"] * 3, runs=3) == 0
    after = signal.getsignal(signal.SIGTERM)
    assert after is before and after is not loop_tests._stop  # the loop's own SIGTERM handler is not left behind
    assert capsys.readouterr().out == f"{TEST}: 3 passed, 0 failed\n"


def test_a_loop_cut_short_says_what_the_finished_runs_found(looped,
                                                            capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    try:
        status = looped(["PASSED", "FAILED", "STOP"], runs=30)
    except KeyboardInterrupt:
        pytest.fail("the stop escaped the loop")  # not pytest's own Ctrl-C: that would end this whole session
    assert status == 130
    captured = capsys.readouterr()
    assert captured.out == f"{TEST}: 1 passed, 1 failed\n"
    assert "stopped" in captured.err
