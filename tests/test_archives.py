"""Archive sources (.tar, .tar.gz, .tgz, .zip) with hostile members: only regular files inside the archive are read.

Each archive holds two good members and members that a careless extractor
would let write or read outside its folder: ``../`` and absolute names,
a symlink and a hard link to /etc/passwd, a device, a FIFO, a zip-slip
name with backslashes, an archive inside the archive, a binary file named
``.txt``. Every bad member is skipped, counted in ``ReadStats.skipped_members``
and warned about by name; nothing is written to disk; the good members are
read in their own formats.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from greenadapt.corpus import ReadStats, resolve_corpus
from greenadapt.errors import CorpusError

GOOD_TEXT = "heart rate of patients\nwith tachycardia"
GOOD_JSONL = gzip.compress(json.dumps({"text": "covid infection and sleep"}).encode() + b"\n")
EXPECTED = ["heart rate of patients", "with tachycardia", "covid infection and sleep"]


def _tar(path: Path, mode: str) -> int:
    """Write the hostile tar; return how many bad members it has."""
    def add(archive: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
        archive.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as nested:
        add(nested, "nested.txt", b"nested words")
    with tarfile.open(path, mode) as archive:
        add(archive, "corpus/a.txt", GOOD_TEXT.encode())
        add(archive, "../escape.txt", b"traversal words")
        add(archive, "corpus/../../escape2.txt", b"traversal words")
        add(archive, "/tmp/absolute.txt", b"absolute words")
        add(archive, "corpus/passwd.txt", kind=tarfile.SYMTYPE, link="/etc/passwd")
        add(archive, "corpus/hard.txt", kind=tarfile.LNKTYPE, link="/etc/passwd")
        add(archive, "corpus/dev.txt", kind=tarfile.CHRTYPE)
        add(archive, "corpus/fifo.txt", kind=tarfile.FIFOTYPE)
        add(archive, "corpus/inner.tar", inner.getvalue())
        add(archive, "corpus/binary.txt", b"\x00\x01\x02" * 100)
        add(archive, "corpus/b.jsonl.gz", GOOD_JSONL)
        add(archive, "corpus/notes.png", b"\x89PNG")  # not a corpus type: ignored, not counted
    return 9


def _zip(path: Path) -> int:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("corpus/a.txt", GOOD_TEXT)
        archive.writestr("../../zipslip.txt", "traversal words")
        archive.writestr("/abs.txt", "absolute words")
        archive.writestr("C:/windows.txt", "absolute words")
        archive.writestr("corpus\\..\\..\\backslash.txt", "traversal words")
        link = zipfile.ZipInfo("corpus/passwd.txt")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
        fifo = zipfile.ZipInfo("corpus/fifo.txt")
        fifo.external_attr = (stat.S_IFIFO | 0o644) << 16
        archive.writestr(fifo, "fifo words")
        archive.writestr("corpus/inner.zip", b"PK\x05\x06" + b"\x00" * 18)
        archive.writestr("corpus/b.jsonl.gz", GOOD_JSONL)
    return 7


def _read(path: Path) -> tuple[list[str], ReadStats]:
    stats = ReadStats()
    texts = [t for source in resolve_corpus([str(path)]) for t in source.iter_texts(stats)]
    return texts, stats


def _files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


@pytest.mark.parametrize("name,mode", [("a.tar", "w"), ("a.tar.gz", "w:gz"), ("a.tgz", "w:gz"), ("a.zip", None)])
def test_hostile_members_are_skipped_counted_and_warned(tmp_path: Path, name: str, mode: str | None,
                                                        caplog: pytest.LogCaptureFixture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    path = work / name
    bad = _zip(path) if mode is None else _tar(path, mode)
    monkeypatch.chdir(work)  # where a naive extractor would write
    before = _files_under(tmp_path)
    with caplog.at_level(logging.WARNING):
        texts, stats = _read(path)
    assert texts == EXPECTED
    assert stats.skipped_members == bad
    assert "root:" not in "".join(texts)  # /etc/passwd never read through a link
    for word in ("traversal", "absolute", "nested", "fifo"):
        assert word not in " ".join(texts)
    # The first few are warned about by name, then one warning with the total.
    named = [r.getMessage() for r in caplog.records if "skipped member" in r.getMessage()]
    assert len(named) == 5 and all(str(path) in m for m in named)
    assert f"skipped {bad} archive members in all" in caplog.text
    assert any("symbolic link" in m for m in named) or mode is None
    assert any("../ name" in m for m in named)
    assert _files_under(tmp_path) == before  # nothing extracted, anywhere below
    assert not Path("/tmp/absolute.txt").exists() and not (tmp_path / "escape.txt").exists()


def test_w2v_input_stats_count_skipped_members(tmp_path: Path) -> None:
    """What pre-tokenization records (and w2v's manifest repeats): the skipped members."""
    from conftest import tiny_vocab
    from transformers import BertTokenizerFast

    from greenadapt.corpus.pretokenize import pretokenize_corpus

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(tiny_vocab()) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)
    path = tmp_path / "corpus.tgz"
    bad = _tar(path, "w:gz")
    result = pretokenize_corpus(resolve_corpus([str(path)]), tokenizer, tmp_path / "cache", workers=1)
    assert result.skipped_members == bad
    manifest = json.loads((result.folder / "manifest.json").read_text())
    assert manifest["stats"]["skipped_members"] == bad
    assert result.path.read_text().split() == " ".join(EXPECTED).split()


def test_folder_walk_picks_up_zip(tmp_path: Path) -> None:
    _zip(tmp_path / "a.zip")
    [source] = resolve_corpus([str(tmp_path)])
    assert source.format == "zip"


def test_corrupt_zip_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.zip"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(CorpusError, match="not a readable zip archive") as info:
        _read(path)
    assert str(path) in str(info.value)


def test_zip_over_http_is_refused_clearly() -> None:
    from greenadapt.corpus import CorpusSource, readers

    source = CorpusSource("https://127.0.0.1:9/corpus.zip", "zip")
    with pytest.raises(CorpusError, match="local file"):
        list(readers.read_zip(source, io.BytesIO(b""), ReadStats()))


def test_member_names_outside_the_archive(tmp_path: Path) -> None:
    from greenadapt.corpus.readers import _unsafe_member

    for name in ("../x.txt", "a/../../x.txt", "/etc/x.txt", "C:/x.txt", "C:\\x.txt", "a\\..\\..\\x.txt", "..", "a/.."):
        assert _unsafe_member(name, "file"), name
    for name in ("a.txt", "a/b.txt", "a..b.txt", "..a/b.txt", "a/b/c..txt"):
        assert _unsafe_member(name, "file") is None, name
    for kind in ("symlink", "hardlink", "device"):
        assert _unsafe_member("a.txt", kind)
    assert os.sep == "/"  # the checks are on archive names, which use / everywhere
