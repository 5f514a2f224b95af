"""Running the ``greenadapt`` command line in-process, as a user would, for tests."""

from __future__ import annotations

import sys

import pytest


def run_cli(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """(exit code, stderr) of ``greenadapt ARGS --quiet``; a failure must print nothing on stdout."""
    from greenadapt.cli import main

    monkeypatch.setattr(sys, "argv", ["greenadapt", *args, "--quiet"])
    monkeypatch.delenv("GREENADAPT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as info:
        main()
    captured = capsys.readouterr()
    code = int(info.value.code or 0)
    assert code == 0 or captured.out == ""
    return code, captured.err


def cli_output(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``greenadapt ARGS`` in process, as written (no ``--quiet`` added)."""
    from greenadapt.cli import main

    monkeypatch.setattr(sys, "argv", ["greenadapt", *args])
    monkeypatch.delenv("GREENADAPT_DEBUG", raising=False)
    code = 0
    try:
        main()
    except SystemExit as done:
        code = int(done.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err
