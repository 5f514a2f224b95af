"""Tokenizer families: what a whole word is to a model, and how T̂ makes each new word one token.

One module a family (WordPiece, byte-level BPE, Unigram), chosen from the
``model`` and ``pre_tokenizer`` of T_LM's ``tokenizer.json``. Every family
keeps T_LM's ids, so old rows stay where they are, and writes its new words
as ids ``first_id, first_id + 1, …`` in the order given.

A family answers four questions for the stages above it:

- ``word_token(word)``: the vocabulary string a whole word takes in running
  text ("disease" for WordPiece, "Ġdisease" for byte-level BPE, "▁disease"
  for Unigram/SentencePiece), so align finds shared words and T̂ names its
  new entries;
- ``qualifies(word)``: whether T̂ can ever see ``word`` as one piece (the
  normalizer leaves it unchanged and the pre-tokenizer keeps it whole);
- ``is_word_initial(token)``: vocabulary entries that begin a word (whole-word
  rows for ``--match-norm``);
- ``write(...)``: T̂'s ``tokenizer.json`` (and ``vocab.txt`` for WordPiece).

Why each construction is the one it is: docs/design.md, "Tokenizer families".
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from greenadapt.families.base import TokenizerFamily
from greenadapt.errors import ModelError

SUPPORTED = "WordPiece (BERT, BioBERT, MiniLM, ELECTRA), byte-level BPE (RoBERTa, ModernBERT) and Unigram/SentencePiece (DeBERTa-v3, XLM-R)"


def component_types(node: Any, key: str) -> set[str]:
    """The ``type`` names in a (possibly nested ``Sequence``) tokenizer component spec; ``key`` names the children."""
    if not isinstance(node, Mapping):
        return set()
    found = {str(node.get("type"))}
    for child in node.get(key) or ():
        found |= component_types(child, key)
    found.discard("Sequence")
    return found


# The split ByteLevel(use_regex=True) makes before mapping bytes (GPT-2's pattern, as in ``tokenizers``).
BYTE_LEVEL_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def word_pre_tokenizer(model_type: str | None, pre_tokenizer: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    r"""The pre-tokenizer that makes the *words* (word2vec's tokens) of a model of ``model_type`` from normalized text.

    WordPiece models: their own. Byte-level BPE: the same split without the byte mapping, each piece's
    leading space dropped, so "disease" after a space and at a text's start are one word2vec word
    ("disease", in plain text, not "Ġdisease"). Unigram/SentencePiece: Metaspace keeps punctuation
    on the word ("disease,"), so words are split at punctuation too (``Whitespace``: ``\w+|[^\w\s]+``).
    """
    if model_type not in ("BPE", "Unigram") or not isinstance(pre_tokenizer, Mapping):
        return pre_tokenizer
    return _words_of(pre_tokenizer)


def _words_of(pre_tokenizer: Mapping[str, Any]) -> Mapping[str, Any] | None:
    kind = pre_tokenizer.get("type")
    if kind == "Sequence":
        parts = [_words_of(child) for child in pre_tokenizer.get("pretokenizers") or ()]
        kept = [p for p in parts if p is not None]
        changed = any(p is not c for p, c in zip(parts, pre_tokenizer.get("pretokenizers") or (), strict=True))
        if not changed:
            return pre_tokenizer
        return {"type": "Sequence", "pretokenizers": kept} if kept else {"type": "WhitespaceSplit"}
    if kind == "ByteLevel":
        split = {"type": "Split", "pattern": {"Regex": BYTE_LEVEL_PATTERN}, "behavior": "Isolated", "invert": False}
        tail = {"type": "WhitespaceSplit"}
        return {"type": "Sequence", "pretokenizers": [split, tail] if pre_tokenizer.get("use_regex", True) else [tail]}
    if kind == "Metaspace":
        return {"type": "Whitespace"}
    return pre_tokenizer


def running_text_pre_tokenizer(pre_tokenizer: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The pre-tokenizer for pre-split words, each treated as in running text: a byte-level word gets its space
    marker (``Ġdisease``, the piece a T̂ entry matches; the published RoBERTa setting encodes a lone word as if
    it began the text), a Metaspace word its ``▁`` whatever its position. Unchanged (the same object) otherwise."""
    if not isinstance(pre_tokenizer, Mapping):
        return pre_tokenizer
    kind = pre_tokenizer.get("type")
    if kind == "ByteLevel" and not pre_tokenizer.get("add_prefix_space"):
        return {**pre_tokenizer, "add_prefix_space": True}
    if kind == "Metaspace" and pre_tokenizer.get("prepend_scheme") == "first":
        return {**pre_tokenizer, "prepend_scheme": "always"}
    if kind == "Sequence":
        children = list(pre_tokenizer.get("pretokenizers") or ())
        changed = [running_text_pre_tokenizer(child) for child in children]
        if any(new is not old for new, old in zip(changed, children, strict=True)):
            return {**pre_tokenizer, "pretokenizers": changed}
    return pre_tokenizer


def pre_tokenizer_from_spec(spec: Mapping[str, Any] | None) -> Any:
    """A ``tokenizers`` pre-tokenizer built from its JSON form (a throwaway tokenizer is the public way to
    deserialize a component)."""
    import json

    from tokenizers import Tokenizer

    carrier: dict[str, Any] = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
               "pre_tokenizer": spec, "post_processor": None, "decoder": None,
               "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}}
    return Tokenizer.from_str(json.dumps(carrier)).pre_tokenizer


def family_of(spec: Mapping[str, Any], *, path: Path | None = None) -> TokenizerFamily:
    """The family of a ``tokenizer.json`` (as a dict); a one-line :class:`ModelError` for any other kind."""
    model = spec.get("model")
    model_type = model.get("type") if isinstance(model, dict) else None
    pre = component_types(spec.get("pre_tokenizer"), "pretokenizers")
    if model_type == "WordPiece":
        from greenadapt.families.wordpiece import WordPieceFamily

        return WordPieceFamily(spec)
    if model_type == "BPE" and "ByteLevel" in pre:
        from greenadapt.families.bpe import ByteLevelBpeFamily

        return ByteLevelBpeFamily(spec)
    if model_type == "Unigram" and "Metaspace" in pre:
        from greenadapt.families.unigram import UnigramFamily

        return UnigramFamily(spec)
    why = {
        "BPE": "a BPE model without a byte-level pre-tokenizer (character BPE with end-of-word suffixes: GPT-1, CLIP)",
        "Unigram": "a Unigram model without a Metaspace pre-tokenizer",
        "WordLevel": "a word-level model (no subword pieces to build new words from)",
    }.get(str(model_type), f"a {model_type} tokenizer model")
    raise ModelError(
        f"cannot adapt {why}",
        path=path,
        hint=f"greenadapt adapts {SUPPORTED}",
    )


__all__ = ["BYTE_LEVEL_PATTERN", "SUPPORTED", "TokenizerFamily", "component_types", "family_of", "pre_tokenizer_from_spec",
           "running_text_pre_tokenizer", "word_pre_tokenizer"]
