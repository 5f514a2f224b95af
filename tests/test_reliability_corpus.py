"""Very long lines: memory stays bounded, the line is cut at spaces, no word and no character is lost.

A 100 MB line with no newline is read in a subprocess whose peak RSS is
measured; smaller cases (with the cut size lowered) check where the cuts
fall: at whitespace when there is any, between characters when there is none,
with CRLF lines and invalid UTF-8 around them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import HANG_S

from greenadapt.corpus import ReadStats, resolve_corpus
from greenadapt.corpus import lines as line_reading

WORD = b"abcdefghi "  # 10 bytes a word


def _read(path: Path) -> tuple[list[str], ReadStats]:
    stats = ReadStats()
    texts = [t for source in resolve_corpus([str(path)]) for t in source.iter_texts(stats)]
    return texts, stats


def test_a_100_mb_line_streams_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "one-line.txt"
    n_words = 10_000_000  # 100 MB, no newline at all
    with open(path, "wb") as handle:
        for _ in range(100):
            handle.write(WORD * (n_words // 100))
    script = textwrap.dedent(
        """
        import json, re, resource, sys
        from greenadapt.corpus import ReadStats, resolve_corpus
        from greenadapt.corpus.lines import MAX_LINE_BYTES
        stats = ReadStats()
        words = pieces = longest = 0
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for source in resolve_corpus([sys.argv[1]]):
            for text in source.iter_texts(stats):
                pieces += 1
                words += sum(1 for _ in re.finditer(rb"\\S+", text.encode()))  # no list: the reader's memory alone
                longest = max(longest, len(text.encode()))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"words": words, "pieces": pieces, "longest": longest, "limit": MAX_LINE_BYTES,
                          "cuts": stats.long_line_cuts, "before_kib": before, "peak_kib": peak}))
        """
    )
    result = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["words"] == n_words  # cut at spaces: not a word lost or split
    assert report["longest"] <= report["limit"]
    assert report["pieces"] == report["cuts"] + 1 >= 100 * 2**20 // report["limit"]
    # Held whole, the line alone would take 100 MB as bytes plus 100 MB as text: the growth must be a fraction of it.
    growth_mib = (report["peak_kib"] - report["before_kib"]) / 1024
    assert growth_mib < 100, report  # measured: about 50-60 MiB; whole, it would be over 200
    assert "cut into pieces" in result.stderr  # said once, as a warning
    assert result.stderr.count("cut into pieces") == 1


def test_cuts_fall_at_whitespace_and_keep_every_word(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(line_reading, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(line_reading, "_BLOCK", 256)
    words = [f"w{i}é" for i in range(3000)]
    long = " ".join(words)
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"first\r\n" + long.encode() + b"\r\nbad \xff byte\r\nlast")
    texts, stats = _read(path)
    assert texts[0] == "first" and texts[-2:] == ["bad \ufffd byte", "last"]
    middle = texts[1:-2]
    assert len(middle) == stats.long_line_cuts + 1 > 1
    assert all(len(t.encode()) <= 1000 for t in middle)
    assert " ".join(middle).split() == words  # nothing lost, split or reordered
    assert stats.replaced_chars == 1


def test_a_line_without_whitespace_is_cut_between_characters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(line_reading, "MAX_LINE_BYTES", 1001)  # not a multiple of any character's length
    monkeypatch.setattr(line_reading, "_BLOCK", 300)
    text = "".join(chr(c) for c in [0x61, 0xE9, 0x65E5, 0x1F600] * 700)  # 1, 2, 3 and 4 bytes
    path = tmp_path / "dense.txt"
    path.write_bytes(text.encode() + b"\nnext")
    texts, stats = _read(path)
    assert texts[-1] == "next"
    assert "".join(texts[:-1]) == text  # characters intact: nothing replaced
    assert stats.replaced_chars == 0 and stats.long_line_cuts == len(texts) - 2 > 0
    assert all(len(t.encode()) <= 1001 for t in texts[:-1])


def test_w2v_input_from_a_cut_line_keeps_every_word(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pre-tokenized (what word2vec reads): the pieces become lines of at most 1000 words, all words there, in order."""
    from transformers import BertTokenizerFast

    from greenadapt.corpus.pretokenize import MAX_LINE_WORDS, pretokenize_corpus

    monkeypatch.setattr(line_reading, "MAX_LINE_BYTES", 4096)
    from conftest import tiny_vocab

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(tiny_vocab()) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)
    words = [f"word{i}" for i in range(5000)]
    path = tmp_path / "doc.txt"
    path.write_text(" ".join(words))  # one line, no newline
    result = pretokenize_corpus(resolve_corpus([str(path)]), tokenizer, tmp_path / "cache", workers=1)
    lines = result.path.read_text(encoding="utf-8").split("\n")[:-1]
    assert all(len(line.split(" ")) <= MAX_LINE_WORDS for line in lines)
    assert " ".join(lines).split(" ") == words
