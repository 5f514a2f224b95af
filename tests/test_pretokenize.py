"""Pre-tokenization: exactly the model's words, line by line, fast paths included; the cache."""

from __future__ import annotations

import collections
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import HANG_S
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenadapt.corpus import CorpusSource, ReadStats, pretokenize, resolve_corpus
from greenadapt.corpus.pretokenize import MAX_LINE_WORDS, _process_chunk, pretokenize_corpus
from greenadapt.corpus.word_splitter import TextRules, WordSplitter, normalization_flags
from greenadapt.errors import CorpusError

TRICKY = [
    "Héllo, WORLD!! naïve café — résumé",
    "e\u0301t\u00e9 \u0301starts with a combining mark",
    "中文字符 and 日本語 mixed; 한국어 too",
    "tab\tseparated\x0bvertical\x0cform\rcarriage",
    "nul\x00 and del\x7f and info-sep\x1c\x1d\x1e\x1f chars",
    "nbsp\u00a0nel\x85ls\u2028ps\u2029ideographic\u3000space",
    "the sentinel \u2402 itself, and \u241e, and qzxjsentinelqzxj",
    "İstanbul ǅ ß ﬁ ＡＢＣ full-width",
    "",
    "   ",
    "\x00\x01\x02",
    "emoji 🧬🦠 and math ∑∫≈ and ½",
    "(parenthesised) [bracketed] {braced} 'quoted' \"double\"",
    "replacement \ufffd char and zero\u200bwidth and bidi\u202emark",
]
# the corpus readers refuse files with NUL bytes as binary
IN_FILES = [line.replace("\x00", "") for line in TRICKY]


def _tokenizer(*, lowercase: bool | None, strip_accents: bool | None = None, normalizer: bool = True) -> Any:
    """A WordPiece tokenizers.Tokenizer with BERT's normalizer (or none) and pre-tokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    tokenizer = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    if normalizer:
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=bool(lowercase), strip_accents=strip_accents)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return tokenizer


TOKENIZERS = {
    "uncased": _tokenizer(lowercase=True),
    "cased": _tokenizer(lowercase=False),
    "cased-strip": _tokenizer(lowercase=False, strip_accents=True),
    "no-normalizer": _tokenizer(lowercase=None, normalizer=False),
}
SPLITTERS = {name: WordSplitter(TextRules.from_tokenizer(tok)) for name, tok in TOKENIZERS.items()}


def reference(tokenizer: Any, line: str) -> str:
    """What the tokenizer itself makes of one line, before WordPiece."""
    normalized = tokenizer.normalizer.normalize_str(line) if tokenizer.normalizer is not None else line
    return " ".join(word for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized))


def _cut(line: str) -> list[str]:
    words = line.split(" ")
    return [" ".join(words[i : i + MAX_LINE_WORDS]) for i in range(0, len(words), MAX_LINE_WORDS)]


def expected_lines(tokenizer: Any, text: str) -> list[str]:
    return [reference(tokenizer, line) for line in text.split("\n")]


# --------------------------------------------------------------------------
# The word splitter against the tokenizer itself

_SPECIALS = st.sampled_from(
    ["\n", "\r\n", "\r", "\u2402", "\u241e", "qzxjsentinelqzxj", "é", "e\u0301", "\u0301", "中", "İ", "\x00", "\x1c",
     "\u00a0", "\x85", "\u2028", "!!", "...", " ", "\t", "\ufffd", "ǅ", "ﬁ", "Ａ"]
)
_ANY_TEXT = st.lists(
    st.one_of(st.text(st.characters(exclude_categories=("Cs",)), max_size=12), _SPECIALS), max_size=40
).map("".join)
_ASCII_TEXT = st.text(st.characters(max_codepoint=127), max_size=300)


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(_ANY_TEXT, _ASCII_TEXT))
def test_lines_equal_the_tokenizers_own_words(name: str, text: str) -> None:
    assert SPLITTERS[name].split_text(text) == expected_lines(TOKENIZERS[name], text)


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_tricky_lines_in_one_chunk(name: str) -> None:
    text = "\n".join(TRICKY * 3)
    result = _process_chunk(text, SPLITTERS[name])
    kept = [line for line in expected_lines(TOKENIZERS[name], text) if line]
    assert result.text == "\n".join(kept) + "\n"
    assert result.lines == len(kept)
    assert result.tokens == sum(len(line.split(" ")) for line in kept)
    assert result.counts == collections.Counter(w for line in kept for w in line.split(" "))
    # first-occurrence order, as gensim's own vocabulary scan would insert them
    first_seen = list(dict.fromkeys(w for line in kept for w in line.split(" ")))
    assert list(result.counts) == first_seen


def test_fast_paths_are_enabled_for_bert_tokenizers() -> None:
    for name, splitter in SPLITTERS.items():
        assert splitter._ascii is not None, name
        assert splitter._sentinel is not None, name


def test_unusual_pre_tokenizer_falls_back_to_line_by_line() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    splitter = WordSplitter(TextRules.from_tokenizer(tokenizer))
    assert splitter._ascii is None and splitter._sentinel is None
    text = "\n".join(line for line in TRICKY if not any(c in line for c in "\t\x0b\x0c\r"))
    assert splitter.split_text(text) == expected_lines(tokenizer, text)


def test_word_boundaries_never_hide_in_ascii_whitespace() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("|", "removed")  # keeps tabs inside words
    splitter = WordSplitter(TextRules.from_tokenizer(tokenizer))
    assert splitter.split_text("a\tb|c d|e") == ["a b c d e"]


def test_sentinel_in_the_text_does_not_shift_lines() -> None:
    splitter = SPLITTERS["uncased"]
    sentinel = splitter._sentinel[0]
    lines = [f"é {sentinel} x", "ü", f"{sentinel}{sentinel}", "ñ y"]
    assert splitter.split_lines(lines) == [reference(TOKENIZERS["uncased"], line) for line in lines]


def test_normalization_flags() -> None:
    assert normalization_flags(None) == {"lowercase": False, "strip_accents": False}
    bert = {"type": "BertNormalizer", "lowercase": True, "strip_accents": None}
    assert normalization_flags(bert) == {"lowercase": True, "strip_accents": True}
    assert normalization_flags({**bert, "lowercase": False}) == {"lowercase": False, "strip_accents": False}
    assert normalization_flags({**bert, "strip_accents": False}) == {"lowercase": True, "strip_accents": False}
    sequence = {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"}, {"type": "StripAccents"}]}
    assert normalization_flags(sequence) == {"lowercase": True, "strip_accents": True}
    rules = TextRules.from_tokenizer(TOKENIZERS["cased-strip"])
    assert rules.flags() == {"lowercase": False, "strip_accents": True}


# --------------------------------------------------------------------------
# The driver: files, chunks, workers, cache


@dataclass(frozen=True)
class CountingSource(CorpusSource):
    """A real text source that records each time it is read."""

    reads: list[int] = field(default_factory=list, compare=False)

    def iter_texts(self, stats: ReadStats) -> Any:
        self.reads.append(1)
        return super().iter_texts(stats)


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _corpus_lines(n: int) -> list[str]:
    base = [
        "Patients with COVID-19 (n=42) showed increased IL-6 levels.",
        "Tachycardia, naïve T-cells & the café-au-lait spots.",
        "   ",
        "β-blockers reduced the heart-rate by ~10%; see Fig. 2.",
        "Sleep apnoea 睡眠 was common [12].",
    ]
    return [f"{base[i % len(base)]} #{i}" if i % 5 != 2 else "" for i in range(n)]


def test_pretokenized_file_format_and_stats(tmp_path: Path) -> None:
    source = _write(tmp_path / "c.txt", IN_FILES + _corpus_lines(50))
    tok = TOKENIZERS["uncased"]
    result = pretokenize_corpus(resolve_corpus([str(source)]), tok, tmp_path / "cache", workers=1)
    text = result.path.read_bytes().decode("utf-8")
    lines = text.split("\n")
    assert text.endswith("\n") and lines[-1] == ""
    lines = lines[:-1]
    raw = source.read_bytes().decode("utf-8").split("\n")[:-1]
    assert lines == [r for r in (reference(tok, line) for line in raw) if r]
    assert all(line and "  " not in line and line == line.strip(" ") for line in lines)
    assert result.lines == len(lines)
    assert result.tokens == sum(len(line.split(" ")) for line in lines)
    assert result.output_bytes == len(text.encode("utf-8"))
    counts = result.word_counts()
    assert sum(counts.values()) == result.tokens and result.types == len(counts)
    assert list(counts) == list(dict.fromkeys(" ".join(lines).split(" ")))
    assert result.path.parent == tmp_path / "cache" / result.key
    manifest = json.loads((result.folder / "manifest.json").read_text())
    assert manifest["kind"] == "pretok" and manifest["stats"]["tokens"] == result.tokens


def test_cache_is_reused_without_reading_the_sources(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.txt", _corpus_lines(40))
    source = CountingSource(str(path), "text")
    tok = TOKENIZERS["uncased"]
    first = pretokenize_corpus([source], tok, tmp_path / "cache", workers=1)
    second = pretokenize_corpus([source], tok, tmp_path / "cache", workers=1)
    assert len(source.reads) == 1
    assert not first.cached and second.cached
    assert (second.path, second.key, second.tokens, second.lines) == (first.path, first.key, first.tokens, first.lines)
    # other normalization rules, other cache entry
    cased = pretokenize_corpus([source], TOKENIZERS["cased"], tmp_path / "cache", workers=1)
    assert cased.key != first.key and len(source.reads) == 2
    assert "Patients" in cased.word_counts() and "patients" in first.word_counts()
    # force redoes it
    again = pretokenize_corpus([source], tok, tmp_path / "cache", workers=1, force=True)
    assert not again.cached and len(source.reads) == 3 and again.path.read_bytes() == first.path.read_bytes()
    # a changed file is a new cache entry
    _write(path, _corpus_lines(41))
    changed = pretokenize_corpus([CountingSource(str(path), "text")], tok, tmp_path / "cache", workers=1)
    assert changed.key != first.key and not changed.cached


def test_worker_count_does_not_change_the_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # small chunks, so that a small corpus is many tasks and really uses the pool
    monkeypatch.setattr(pretokenize, "CHUNK_CHARS", 1500)
    path = _write(tmp_path / "c.txt", _corpus_lines(400) + IN_FILES)
    sources = resolve_corpus([str(path)])
    tok = TOKENIZERS["uncased"]
    one = pretokenize_corpus(sources, tok, tmp_path / "one", workers=1)
    three = pretokenize_corpus(sources, tok, tmp_path / "three", workers=3)
    assert one.key == three.key
    assert one.path.read_bytes() == three.path.read_bytes()
    assert (one.folder / "vocab.tsv").read_bytes() == (three.folder / "vocab.tsv").read_bytes()
    assert (one.lines, one.tokens, one.types) == (three.lines, three.tokens, three.types)


def test_very_long_line_is_cut_into_consecutive_lines(tmp_path: Path) -> None:
    n = 100_000
    ascii_line = " ".join(f"Word{i % 997}." for i in range(n // 2))  # n words: "wordK" and "."
    accented_line = " ".join(f"Mot{i % 991}é" for i in range(n))
    path = tmp_path / "long.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(f"short line\n{ascii_line}\n{accented_line}\n")
    tok = TOKENIZERS["uncased"]
    result = pretokenize_corpus(resolve_corpus([str(path)]), tok, tmp_path / "cache", workers=1)
    lines = result.path.read_bytes().decode("utf-8").split("\n")[:-1]
    assert lines[0] == "short line"
    assert [len(line.split(" ")) for line in lines[1:]] == [MAX_LINE_WORDS] * (2 * n // MAX_LINE_WORDS)
    # nothing lost, nothing reordered: the pieces put back together are the tokenizer's words
    half = 1 + n // MAX_LINE_WORDS
    assert " ".join(lines[1:half]) == reference(tok, ascii_line)
    assert " ".join(lines[half:]) == reference(tok, accented_line)
    assert lines[half].startswith("mot0e mot1e")
    assert result.tokens == 2 + 2 * n and result.lines == len(lines)


def test_empty_corpus_is_a_corpus_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "blank.txt", ["", "   ", "\x01\x02", "\t"])
    with pytest.raises(CorpusError) as info:
        pretokenize_corpus(resolve_corpus([str(path)]), TOKENIZERS["uncased"], tmp_path / "cache", workers=1)
    message = info.value.one_line()
    assert "blank.txt" in message and "no words" in message and "\n" not in message
    # nothing that looks like a cache entry is left behind
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] == []


@pytest.mark.integration
def test_real_minilm_tokenizer_on_cord19_abstracts(tmp_path: Path, minilm_path: Path, shared_data: Path) -> None:
    from greenadapt.artifacts.pretrained import load_fast_tokenizer

    tokenizer = load_fast_tokenizer(minilm_path)
    backend = tokenizer.backend_tokenizer
    sources = resolve_corpus([str(shared_data / "corpora" / "cord19-abstracts-sample.jsonl")], text_fields=["abstract"])
    result = pretokenize_corpus(sources, tokenizer, tmp_path / "cache", workers=2)
    stats = ReadStats()
    raw = [line for text in sources[0].iter_texts(stats) for line in text.split("\n")]
    expected = [piece for r in (reference(backend, line) for line in raw) if r for piece in _cut(r)]
    assert result.path.read_bytes().decode("utf-8").split("\n")[:-1] == expected
    assert result.tokens > 500_000


def test_a_script_without_a_main_guard_runs_once_with_worker_processes(tmp_path: Path) -> None:
    """The README's Python snippet saved as a script: the workers re-imported it, ran `adapt` again, found the
    first run's lock and printed a LockedError traceback; pre-tokenizing then fell back to one process."""
    import os
    import subprocess
    import sys

    from conftest import build_tiny_bert

    model = build_tiny_bert(tmp_path / "model", head="base")
    script = tmp_path / "adapt_sample.py"
    script.write_text(
        "import greenadapt\n\n"
        f"adapted = greenadapt.adapt('sample', model={str(model)!r}, workdir={str(tmp_path / 'work')!r}, epochs=1, workers=2)\n"
        "print('adapted', adapted.path)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("adapted ") == 1
    assert "Traceback" not in done.stderr and "worker processes failed" not in done.stderr, done.stderr[-3000:]
    assert "pre-tokenized" in done.stderr or "w2v" in done.stderr  # it ran, and said so on stderr


@pytest.mark.parametrize("kind", ["byte-level", "metaspace"])
def test_bpe_and_unigram_words_are_the_model_pieces_without_their_markers(kind: str) -> None:
    """The word splitter's fast paths agree with the family's word pre-tokenizer, and every word is a model
    piece (or, for Metaspace, a run of it) with the space marker dropped."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    if kind == "byte-level":
        tokenizer = Tokenizer(models.BPE(vocab={"a": 0}, merges=[]))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tokenizer = Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0)], unk_id=0))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    rules = TextRules.from_tokenizer(tokenizer)
    splitter = WordSplitter(rules)
    text = "\n".join(line for line in TRICKY if not any(c in line for c in "\t\x0b\x0c\r"))
    by_lines = splitter.split_text(text)
    assert by_lines == [" ".join(splitter.words(line)) for line in text.split("\n")]
    assert splitter.split_text("the patients' tachycardia, 12 cases") == ["the patients ' tachycardia , 12 cases"]
    assert all("\u0120" not in w and "\u2581" not in w for line in by_lines for w in line.split())
