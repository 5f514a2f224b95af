"""The disk fills up while a stage writes its own files: one line, exit 5, the earlier output untouched.

(StageRun's commit under ENOSPC and an unwritable parent are tried in
test_stage.py; here the failure comes from the stage's own writer, through
the command line, as a real ``write()`` raises it: an OSError without a file name.)
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import pytest
from w2v_fixtures import linear_w2v

from greenadapt.artifacts.manifest import load_stage
from greenadapt.errors import EXIT_RESOURCE
from greenadapt.options import Run


def _cli(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from greenadapt.cli import main

    monkeypatch.setattr(sys, "argv", ["greenadapt", *args, "--quiet"])
    monkeypatch.delenv("GREENADAPT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as info:
        main()
    return int(info.value.code or 0), capsys.readouterr().err


def _full_disk(path: Path) -> None:
    with open(path, "wb") as handle:
        handle.write(b"\x00" * 100)  # part of the file made it
    raise OSError(errno.ENOSPC, "No space left on device")


def _check(code: int, err: str, out: Path, kind: str, before: dict) -> None:
    assert code == EXIT_RESOURCE, err
    lines = [line for line in err.strip().splitlines() if not line[:2].isdigit()]  # log lines start with the time
    assert len(lines) == 1 and lines[0].startswith(f"error: {out}: disk full ("), err
    assert load_stage(out, kind)["files"] == before  # the earlier output, checksums verified
    assert not list(out.parent.glob(f".{out.name}.tmp-*"))


def test_disk_full_while_expand_writes_weights(tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import greenadapt.adaptation.expand as expand_module
    from greenadapt.adaptation.align import align_stage
    from greenadapt.adaptation.expand import expand_stage

    w2v, _ = linear_w2v(tmp_path / "w2v", tiny_bert, noise=0.01)
    aligned = align_stage(w2v=w2v, run=Run(out=tmp_path / "align")).path
    out = expand_stage(align=aligned, run=Run(out=tmp_path / "expanded")).path
    before = load_stage(out, "expand")["files"]
    monkeypatch.setattr(expand_module, "write_safetensors", lambda path, *a, **k: _full_disk(Path(path)))
    code, err = _cli(["expand", "--align", str(aligned), "--out", str(out), "--force"], monkeypatch, capsys)
    _check(code, err, out, "expand", before)


def test_disk_full_while_w2v_writes_vectors(tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from gensim.models import KeyedVectors

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join("heart rate of patients with tachycardia after covid" for _ in range(50)) + "\n")
    out = tmp_path / "work" / "w2v"
    args = ["w2v", "-c", str(corpus), "-m", str(tiny_bert), "--workers", "1", "--w2v-min-count", "1", "--epochs", "1",
            "--dim", "8", "--workdir", str(tmp_path / "work"), "--out", str(out)]
    code, err = _cli(args, monkeypatch, capsys)
    assert code == 0, err
    before = load_stage(out, "w2v")["files"]
    monkeypatch.setattr(KeyedVectors, "save_word2vec_format", lambda self, path, *a, **k: _full_disk(Path(path)))
    code, err = _cli([*args, "--force"], monkeypatch, capsys)
    _check(code, err, out, "w2v", before)
