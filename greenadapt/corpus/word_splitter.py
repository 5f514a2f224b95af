"""What a "word" is for a model: its own normalizer and pre-tokenizer, fast and verified.

:class:`WordSplitter` turns text into the words the model's tokenizer sees
before WordPiece. ASCII lines take a byte path read off the real normalizer
and pre-tokenizer and enabled only when it reproduces them exactly on a probe
set; other lines go through the real objects in batches behind a sentinel
checked by count (see :mod:`greenadapt.corpus.pretokenize` for the whole design).
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from greenadapt.families import component_types

log = logging.getLogger(__name__)

SLOW_BATCH_CHARS = 256 << 10  # text per normalize/pre-tokenize call on the general path
_NORMALIZERS_LOCAL = {"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents", "Strip"}
_PRE_TOKENIZERS_LOCAL = {"BertPreTokenizer", "WhitespaceSplit", "Whitespace", "Punctuation", "Digits", "Split"}
_SENTINEL_CANDIDATES = ("\u2402", "\u241e", "\u2403", "qzxjsentinelqzxj")
_FILE_WHITESPACE = re.compile("[\t\x0b\x0c\r\n]")
_SURROGATES = re.compile("[\ud800-\udfff]")



@dataclass(frozen=True)
class TextRules:
    """The model's normalizer and its word-level pre-tokenizer as canonical JSON (None when absent); for
    byte-level BPE and Unigram models, the pre-tokenizer that gives plain-text words
    (:func:`greenadapt.families.word_pre_tokenizer`)."""

    normalizer: str | None
    pre_tokenizer: str | None

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> TextRules:
        """From a transformers fast tokenizer or a ``tokenizers.Tokenizer``."""
        from greenadapt.families import word_pre_tokenizer

        backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
        spec = json.loads(backend.to_str())
        words = word_pre_tokenizer((spec.get("model") or {}).get("type"), spec.get("pre_tokenizer"))
        return cls(_canonical(spec.get("normalizer")), _canonical(words))

    def flags(self) -> dict[str, bool]:
        """``{"lowercase": ..., "strip_accents": ...}`` as the normalizer applies them."""
        return normalization_flags(json.loads(self.normalizer) if self.normalizer else None)


def _canonical(obj: Any) -> str | None:
    return None if obj is None else json.dumps(obj, sort_keys=True, separators=(",", ":"))


def normalization_flags(normalizer: dict[str, Any] | None) -> dict[str, bool]:
    """Whether a normalizer (tokenizer.json form) lower-cases and strips accents.

    ``BertNormalizer(strip_accents=None)`` strips accents exactly when it
    lower-cases (the original BERT behaviour), so the effective value is
    reported, not the raw setting.
    """
    flags = {"lowercase": False, "strip_accents": False}

    def visit(node: Any) -> None:
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        if kind == "BertNormalizer":
            lower = bool(node.get("lowercase", True))
            strip = node.get("strip_accents")
            flags["lowercase"] |= lower
            flags["strip_accents"] |= lower if strip is None else bool(strip)
        elif kind == "Lowercase":
            flags["lowercase"] = True
        elif kind == "StripAccents":
            flags["strip_accents"] = True
        for child in node.get("normalizers") or ():
            visit(child)

    visit(normalizer)
    return flags


class WordSplitter:
    """Turns lines of raw text into lines of space-separated model words.

    Built from :class:`TextRules` (JSON) so worker processes can rebuild
    it; construction probes the real objects to set up the fast paths.
    """

    def __init__(self, rules: TextRules) -> None:
        from tokenizers import Tokenizer

        # A throwaway tokenizer is the public way to deserialize components.
        spec: dict[str, Any] = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [],
            "normalizer": json.loads(rules.normalizer) if rules.normalizer else None,
            "pre_tokenizer": json.loads(rules.pre_tokenizer) if rules.pre_tokenizer else {"type": "WhitespaceSplit"},
            "post_processor": None,
            "decoder": None,
            "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"},
        }
        carrier = Tokenizer.from_str(json.dumps(spec))
        self._normalizer = carrier.normalizer
        self._pre_tokenizer = carrier.pre_tokenizer
        local = component_types(spec["normalizer"], "normalizers") <= _NORMALIZERS_LOCAL and component_types(
            spec["pre_tokenizer"], "pretokenizers"
        ) <= _PRE_TOKENIZERS_LOCAL
        self._sentinel = self._choose_sentinel() if local else None
        self._ascii = _AsciiPlan.build(self) if local else None
        self.replaced_chars = 0

    # -- the reference behaviour ----------------------------------------------
    def words(self, text: str) -> list[str]:
        """The model's words for ``text``: normalize, then pre-tokenize (one call each)."""
        try:
            normalized = self._normalizer.normalize_str(text) if self._normalizer is not None else text
        except UnicodeEncodeError:  # lone surrogates cannot cross into Rust
            text, count = _SURROGATES.subn("\ufffd", text)
            self.replaced_chars += count
            normalized = self._normalizer.normalize_str(text) if self._normalizer is not None else text
        return [word for word, _ in self._pre_tokenizer.pre_tokenize_str(normalized)]

    # -- batch interface ------------------------------------------------------
    def split_text(self, text: str) -> list[str]:
        """One output line per ``\\n``-separated line of ``text`` (``""`` when a line has no words)."""
        if self._ascii is not None and text.isascii():
            return self._ascii.split(text)
        return self.split_lines(text.split("\n"))

    def split_lines(self, lines: Sequence[str]) -> list[str]:
        """One output line per input line (``""`` when a line has no words)."""
        if self._ascii is None:
            return self._split_general(lines)
        plain: list[int] = []
        other: list[int] = []
        for i, line in enumerate(lines):
            (plain if line.isascii() else other).append(i)
        out = [""] * len(lines)
        if plain:
            for i, words in zip(plain, self._ascii.split("\n".join(lines[i] for i in plain)), strict=True):
                out[i] = words
        for i, words in zip(other, self._split_general([lines[i] for i in other]), strict=True):
            out[i] = words
        return out

    def _split_general(self, lines: Sequence[str]) -> list[str]:
        out: list[str] = []
        batch: list[str] = []
        size = 0
        for line in lines:
            batch.append(line)
            size += len(line)
            if size >= SLOW_BATCH_CHARS:
                out.extend(self._split_batch(batch))
                batch, size = [], 0
        if batch:
            out.extend(self._split_batch(batch))
        return out

    def _split_batch(self, lines: list[str]) -> list[str]:
        if self._sentinel is not None and len(lines) > 1:
            sentinel, marker = self._sentinel
            joined = f" {sentinel} ".join(lines)
            # The raw count rules out lines containing the sentinel; the
            # count after normalization rules out text normalized into it.
            words = self.words(joined) if joined.count(sentinel) == len(lines) - 1 else []
            breaks = [i for i, word in enumerate(words) if word == marker]
            if len(breaks) == len(lines) - 1:
                out, start = [], 0
                for end in [*breaks, len(words)]:
                    out.append(_safe_join(words[start:end]))
                    start = end + 1
                return out
            log.debug("sentinel %r seen in the text; %d lines split one by one", sentinel, len(lines))
        return [_safe_join(self.words(line)) for line in lines]

    def _choose_sentinel(self) -> tuple[str, str] | None:
        for candidate in _SENTINEL_CANDIDATES:
            words = self.words(f"a {candidate} b")
            if len(words) == 3 and words[1] not in (words[0], words[2]):
                return candidate, words[1]
        return None


def _safe_join(words: list[str]) -> str:
    text = " ".join(words)
    if _FILE_WHITESPACE.search(text):
        # gensim splits lines at ASCII whitespace; a pre-tokenizer that keeps
        # such characters inside a word gets its word split there, visibly.
        text = " ".join(word for word in _FILE_WHITESPACE.sub(" ", text).split(" ") if word)
    return text


class _AsciiPlan:
    """Normalize + pre-tokenize ASCII text with byte operations, verified against the real objects."""

    def __init__(self, table: bytes, delete: bytes, isolated: bytes) -> None:
        self.table = table
        self.delete = delete
        self.isolated = [bytes([c]) for c in isolated]

    @classmethod
    def build(cls, splitter: WordSplitter) -> _AsciiPlan | None:
        normalized: dict[int, str] = {}
        for code in range(128):
            if code == 10:  # never inside a line: it is the line separator here
                continue
            out = splitter._normalizer.normalize_str(chr(code)) if splitter._normalizer is not None else chr(code)
            if len(out) > 1 or (out and (not out.isascii() or out == "\n")):
                return None
            normalized[code] = out
        pre = splitter._pre_tokenizer
        if [w for w, _ in pre.pre_tokenize_str("aa")] != ["aa"]:
            return None
        kinds: dict[str, str] = {}
        for ch in set(normalized.values()) - {""}:
            got = [w for w, _ in pre.pre_tokenize_str(f"a{ch}a")]
            if got == ["a", "a"]:
                kinds[ch] = "separator"
            elif got == ["a", ch, "a"]:
                kinds[ch] = "isolated"
            elif got == [f"a{ch}a"]:
                kinds[ch] = "word"
            else:
                return None
        if kinds.get(" ") != "separator":
            return None
        table = bytearray(range(256))
        delete = bytearray()
        for code, out in normalized.items():
            if out == "":
                delete.append(code)
            elif kinds[out] == "separator":
                table[code] = 32
            else:
                table[code] = ord(out)
        isolated = bytes(sorted({ord(ch) for ch, kind in kinds.items() if kind == "isolated"}))
        plan = cls(bytes(table), bytes(delete), isolated)
        return plan if plan._verify(splitter) else None

    def split(self, text: str) -> list[str]:
        """``split_text`` for pure-ASCII ``text``."""
        data = text.encode("ascii").translate(self.table, self.delete)
        for char in self.isolated:
            if char in data:
                data = data.replace(char, b" " + char + b" ")
        while b"  " in data:
            data = data.replace(b"  ", b" ")
        return [line.strip(" ") for line in data.decode("ascii").split("\n")]

    def _verify(self, splitter: WordSplitter) -> bool:
        for probe in _ascii_probes():
            expected = [" ".join(splitter.words(line)) for line in probe.split("\n")]
            if self.split(probe) != expected:
                log.debug("ASCII fast path disagrees with the tokenizer; using the general path only")
                return False
        return True


def _ascii_probes() -> Iterator[str]:
    chars = [chr(c) for c in range(128) if c != 10]
    # every ordered pair, between word characters, so context effects show up
    yield " ".join(f"a{x}{y}b" for x in chars for y in chars)
    # runs of one class next to another (punctuation runs, whitespace runs, controls)
    rng = random.Random(20240601)
    alphabets = [
        "".join(chars),
        "aB9 !?.,-_()[]'\"\t\r",
        "ab \x00\x01\x1c\x1f\x7f\t\x0b\x0c\r",
        "Ab1 " + "".join(c for c in chars if not c.isalnum()),
    ]
    for alphabet in alphabets:
        yield "\n".join("".join(rng.choices(alphabet, k=rng.randint(0, 40))) for _ in range(64))
