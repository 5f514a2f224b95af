"""On a terminal: one live display per command, log lines printed above its bars, never glued into them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_S, REPO

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _on_a_terminal(args: list[str], cwd: Path) -> str:
    """Everything ``greenadapt ARGS`` writes to a pseudo-terminal (stderr and stdout both), escape codes removed."""
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "COLUMNS": "140", "LINES": "40", "TERM": "xterm-256color"}
    env.pop("GREENADAPT_DEBUG", None)
    process = subprocess.Popen([sys.executable, "-m", "greenadapt", *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                               cwd=cwd, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert process.wait(timeout=HANG_S) == 0, b"".join(chunks).decode(errors="replace")[-3000:]
    return ANSI.sub("", b"".join(chunks).decode(errors="replace"))


@pytest.mark.slow
def test_log_lines_print_above_the_bars_and_each_stage_is_a_row(tiny_bert: Path, tmp_path: Path) -> None:
    words = ["the", "patients", "with", "tachycardia", "and", "leukemia", "were", "in", "study", "of", "cells"]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(words[(i + j) % len(words)] for j in range(9)) for i in range(300)) + "\n")
    text = _on_a_terminal(["adapt", "--corpus", str(corpus), "--model", str(tiny_bert), "--workers", "1", "--w2v-min-count", "1",
                           "--workdir", str(tmp_path / "work")], tmp_path)
    # align warns that a few shared words underdetermine a 32-dimensional map, while the bars are live.
    warning = next((line for line in re.split(r"[\r\n]", text) if "shared words for" in line), None)
    assert warning is not None, text[-2000:]
    assert "━" not in warning and "ETA" not in warning, f"a log line glued onto a progress bar: {warning!r}"
    # The console's own log line, on its own (the time is left out when it repeats the line above's).
    assert re.match(r"\s*(\d\d:\d\d:\d\d)?\s+WARNING\s", warning), warning
    # One display: the finished stages stay as rows of it, each drawn to completion once at the end.
    final = text[text.rfind("adapted model") - 4000 :] if "adapted model" in text else text
    for stage in ("pre-tokenizing", "word2vec"):
        assert stage in final, final[-2000:]
    # The last frame: one row per phase, whole counts, no 0/0 for a corpus under 1 MB, no ?/? for unknown lengths.
    last = final[final.rfind("pre-tokenizing") :]
    assert last.count("reading word2vec vectors") == 1, last
    assert "0/0 " not in text and "/?" not in text, final[-2000:]


def test_rows_are_phases_and_counts_read_as_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    from io import StringIO

    from rich.console import Console

    from greenadapt.cli import _common

    console = Console(file=StringIO(), force_terminal=True, width=140)
    monkeypatch.setattr(_common, "stderr_console", lambda: console)
    bar = _common.RichProgress()
    bar.start("pre-tokenizing", total=0.42, unit="MB")
    bar.update(0.42)
    bar.start("reading word2vec vectors")
    bar.start("fitting the map (lstsq)")
    bar.start("reading word2vec vectors")  # expand reads them again: the same row, not a second one
    bar.close()
    tasks = bar._progress.tasks
    assert [t.description for t in tasks] == ["pre-tokenizing", "reading word2vec vectors", "fitting the map (lstsq)"]
    assert all(t.finished for t in tasks)  # phases of unknown length end as full bars, not pulsing ones
    assert [t.fields["count"] for t in tasks] == ["0.4/0.4 MB", "", ""]

    assert _common.count_text(1200, 5000, "words") == "1,200/5,000 words"
    assert _common.count_text(0.35, 12.5, "MB") == "0.3/12.5 MB"  # 0.35 rounds half to even
    assert _common.count_text(1234.5, 20000.0, "MB") == "1,234/20,000 MB"
    assert _common.count_text(7, None, "lines") == "7 lines"
    assert _common.count_text(0, None, "") == ""
