"""WordPiece (BERT, BioBERT, MiniLM, ELECTRA): new words appended to the vocabulary, word-initial only.

T̂ is T_LM's ``tokenizer.json`` with the new words appended to the WordPiece
vocabulary, plus a matching ``vocab.txt``. How it splits text (greedy
longest-match-first, as in the reference code of Poerner et al., 2020):

- a new word is one wordpiece with an id >= the old vocabulary size;
- a word that neither is new nor *starts with* a new word is split exactly
  as T_LM splits it, because new entries are word-initial only (none starts
  with ``##``) and greedy matching only consults word-initial entries at a
  word's first character;
- **the prefix case**: a word that starts with a new word is split at the
  longest new word it starts with, e.g. with "tachycardia" new,
  "tachycardias" becomes ``tachycardia ##s`` (T_LM: ``ta ##chy ##card
  ##ias``). We follow the reference code here, not the paper's stricter
  definition: the longer match gives the model the aligned vector of the
  stem, and a word whose remainder has no ``##`` pieces becomes ``[UNK]``
  under both tokenizers anyway.

transformers 5 loads a BERT tokenizer folder by taking the vocabulary from
``tokenizer.json`` (``vocab.txt`` is then unused) and rebuilding the
normalizer from ``tokenizer_config.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from greenadapt.families.base import GAP_TOKEN, TokenizerFamily, check_unique, ids_filled

VOCAB_PLACEHOLDER = "\x00greenadapt-vocab\x00"


class WordPieceFamily(TokenizerFamily):
    name = "WordPiece"
    load_as_written = False  # BertTokenizer's rebuild keeps everything T̂ changes: the vocabulary

    @property
    def continuing_prefix(self) -> str:
        return str(self.spec["model"].get("continuing_subword_prefix", "##"))

    @property
    def max_word_chars(self) -> int:
        return int(self.spec["model"].get("max_input_chars_per_word", 100))

    def is_word_initial(self, token: str) -> bool:
        return not token.startswith(self.continuing_prefix)

    def readable(self, token: str) -> str:
        return token  # "disease", "##ase": the convention greenadapt's output uses is WordPiece's own

    def qualifies(self, backend: Any, word: str) -> bool:
        # A "##x" entry would change how T_LM's own words split.
        prefix = self.continuing_prefix
        return not (prefix and word.startswith(prefix)) and self.piece_of(backend, word) == word

    def write(self, general: Any, new_words: Sequence[str], first_id: int, dest: Path) -> dict[str, Any]:
        tokens = ids_filled(general.vocab, general.added, first_id, general.path) + list(new_words)
        check_unique(tokens)
        (dest / "tokenizer.json").write_text(tokenizer_json(general.spec, tokens), encoding="utf-8")
        with open(dest / "vocab.txt", "w", encoding="utf-8", newline="\n") as handle:
            handle.write("\n".join(tokens) + "\n")
        return {}


    def write_without(self, general: Any, dropped: set[str], dest: Path) -> None:
        # each dropped entry keeps its id under a name no text can match (BertTokenizer reads ids from vocab.txt's lines)
        tokens = [GAP_TOKEN.format(i) if token in dropped else token
                  for i, token in enumerate(ids_filled(general.vocab, general.added, general.size, general.path))]
        (dest / "tokenizer.json").write_text(tokenizer_json(general.spec, tokens), encoding="utf-8")
        with open(dest / "vocab.txt", "w", encoding="utf-8", newline="\n") as handle:
            handle.write("\n".join(tokens) + "\n")


def tokenizer_json(spec: Mapping[str, Any], tokens: Sequence[str], **model_fields: Any) -> str:
    """``json.dumps`` of ``spec`` with its ``{token: id}`` vocabulary replaced by ``{token: index}`` (and any
    ``model_fields`` set), byte for byte, but with the vocabulary's text made by one join: with a million new
    words, ``json.dumps`` spends seconds on the dict alone."""
    encode = json.encoder.encode_basestring  # the C encoder json.dumps(ensure_ascii=False) uses
    vocab_text = "{" + ", ".join(f"{encode(token)}: {index}" for index, token in enumerate(tokens)) + "}"
    text = json.dumps({**spec, "model": {**spec["model"], **model_fields, "vocab": VOCAB_PLACEHOLDER}}, ensure_ascii=False)
    placeholder = json.dumps(VOCAB_PLACEHOLDER, ensure_ascii=False)
    if text.count(placeholder) != 1:
        raise RuntimeError("the tokenizer spec holds greenadapt's vocabulary placeholder")  # cannot happen with a real spec
    return text.replace(placeholder, vocab_text, 1)
