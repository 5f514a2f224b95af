"""Byte-level BPE (RoBERTa, BioMed-RoBERTa, ModernBERT): new whole-word entries, looked up before any merge.

A word in running text is one pre-tokenized piece with its space marker:
"disease" after a space is the piece ``Ġdisease`` (bytes mapped to printable
characters as GPT-2 does). T̂ appends ``Ġ<word>`` for each new word to the
vocabulary, adds **no merges**, and turns on the BPE model's
``ignore_merges``: a piece that is a vocabulary entry as a whole becomes that
one token before any merge is tried.

- a new word is one token wherever it is a whole piece, i.e. after a space
  or punctuation-free boundary, and in word-split input (greenadapt encodes
  pre-split words with their space marker, as RoBERTa saw words in
  pretraining);
- never inside another word: with no new merges, BPE can build a new entry
  only by the whole-piece lookup, so "tachycardias" is split as T_LM splits it;
- every other piece is split exactly as T_LM splits it, with one caveat this
  module measures: an old entry that T_LM's own merges never produce from its
  text (rare in trained vocabularies) would now be produced whole.
  ``write`` counts such entries and records the count.

The word at the very start of a text, with no space before it, has no marker
(``disease``) and keeps T_LM's split: giving both forms a row would double
the rows for a case that word-split input and mid-text words never hit.

Adding merges instead cannot be exact: a merge chain that builds
"tachycardia" fires inside every longer word whose pieces contain the same
pairs. Added tokens (``add_tokens``) match inside words and are quadratic to
add; ``ignore_merges`` is one dict lookup per piece.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from greenadapt.families.base import CONTINUATION, GAP_TOKEN, TokenizerFamily, check_unique, ids_filled
from greenadapt.families.wordpiece import tokenizer_json

log = logging.getLogger(__name__)


def byte_to_char() -> list[str]:
    """GPT-2's reversible map of the 256 bytes to printable characters (``tokenizers``' ByteLevel alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


_BYTE_TO_CHAR = byte_to_char()
_ASCII_TABLE = str.maketrans({chr(b): _BYTE_TO_CHAR[b] for b in range(128)})


_CHAR_TO_BYTE = {char: byte for byte, char in enumerate(_BYTE_TO_CHAR)}


def _text_of(token: str) -> str:
    """The text a byte-level token stands for (undecodable byte runs replaced)."""
    return bytes(_CHAR_TO_BYTE.get(c, 63) for c in token).decode("utf-8", errors="replace")


def _printable(raw: bytes) -> str:
    """Text for a person: a piece's UTF-8 text, a byte that is no text alone (half a character, a control
    character, a lone space) as ``<0xC3>``, as SentencePiece writes its byte pieces."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(f"<0x{b:02X}>" for b in raw)
    if not text or not text.isprintable() or text != text.strip():
        return "".join(c if c.isprintable() and not c.isspace() else "".join(f"<0x{b:02X}>" for b in c.encode("utf-8"))
                       for c in text) or "<0x20>"
    return text


class ByteLevelBpeFamily(TokenizerFamily):
    name = "BPE"
    word_prefix = " "
    marker = _BYTE_TO_CHAR[ord(" ")]  # "Ġ"

    def word_token(self, word: str) -> str:
        text = " " + word
        if text.isascii():
            return text.translate(_ASCII_TABLE)
        return "".join(_BYTE_TO_CHAR[b] for b in text.encode("utf-8"))

    def is_word_initial(self, token: str) -> bool:
        return token.startswith(self.marker)

    def readable(self, token: str) -> str:
        raw = bytes(_CHAR_TO_BYTE.get(c, 63) for c in token)  # "Ġcaf\u00c3\u00a9" is the bytes of " café"
        initial = self.is_word_initial(token)
        text = _printable(raw[1:] if initial else raw)
        return text if initial else CONTINUATION + text

    def write(self, general: Any, new_words: Sequence[str], first_id: int, dest: Path) -> dict[str, Any]:
        tokens = ids_filled(general.vocab, general.added, first_id, general.path) + self.word_tokens(new_words)
        check_unique(tokens)
        (dest / "tokenizer.json").write_text(tokenizer_json(general.spec, tokens, ignore_merges=True), encoding="utf-8")
        missed = self.entries_merges_miss(general)
        if missed:
            log.warning("%d old vocabulary entries (e.g. %s) are never produced by the model's own merges; the domain tokenizer "
                        "keeps them whole where the general one splits them", len(missed), ", ".join(map(repr, missed[:3])))
        return {"old_entries_now_whole": len(missed)}

    def write_without(self, general: Any, dropped: set[str], dest: Path) -> None:
        # an entry is never made once no merge makes it (and no merge starts from it); its id keeps a name no text has
        tokens = [GAP_TOKEN.format(i) if token in dropped else token
                  for i, token in enumerate(ids_filled(general.vocab, general.added, general.size, general.path))]
        pairs = [merge.split(" ") if isinstance(merge, str) else list(merge) for merge in general.spec["model"].get("merges") or []]
        kept = [pair for pair in pairs if not dropped.intersection((*pair, "".join(pair)))]
        text = tokenizer_json({**general.spec, "model": {**general.spec["model"], "merges": kept}}, tokens)
        (dest / "tokenizer.json").write_text(text, encoding="utf-8")

    def entries_merges_miss(self, general: Any) -> list[str]:
        """Old entries that T_LM's merges do not rebuild from their own text although the pre-tokenizer can make
        them a whole piece: the only pieces ``ignore_merges`` changes besides the new words'."""
        if general.spec["model"].get("ignore_merges"):
            return []
        model, pre_tokenizer = general.backend.model, general.backend.pre_tokenizer
        missed = (token for token in general.vocab if token not in general.added and [t.value for t in model.tokenize(token)] != [token])
        return [token for token in missed if [p for p, _ in pre_tokenizer.pre_tokenize_str(_text_of(token))] == [token]]
