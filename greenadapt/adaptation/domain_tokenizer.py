"""The general tokenizer T_LM and the domain tokenizer T̂ built from it.

T̂ is T_LM's ``tokenizer.json`` with the new words appended to the
WordPiece vocabulary (ids ``first_id``, ``first_id + 1``, … in the order
given), plus a matching ``vocab.txt``; normalizer, pre-tokenizer,
post-processor, special tokens and ``tokenizer_config.json`` are T_LM's.
Building it is a dict update and one JSON dump: about a second for a
million new words. It is never built with per-token ``add_tokens``, which is
quadratic and matches added tokens *inside* words ("sleep" -> "sle ep").

How T̂ splits text (greedy longest-match-first WordPiece, as in the
reference code of Poerner et al., 2020):

- a new word is one wordpiece with an id >= the old vocabulary size;
- a word that neither is new nor *starts with* a new word is split exactly
  as T_LM splits it, because new entries are word-initial only (none starts
  with ``##``) and greedy matching only consults word-initial entries at a
  word's first character;
- **the prefix case**: a word that starts with a new word is split at the
  longest new word it starts with, e.g. with "tachycardia" new,
  "tachycardias" becomes ``tachycardia ##s`` (T_LM: ``ta ##chy ##card
  ##ias``). We follow the reference code here, not the paper's stricter
  definition (where only words of L_LM ∪ L_W2V change): the longer match
  gives the model the aligned vector of the stem, and a word whose
  remainder has no ``##`` pieces becomes ``[UNK]`` under both tokenizers
  anyway.

transformers 5 loads a BERT tokenizer folder by taking the vocabulary from
``tokenizer.json`` (``vocab.txt`` is then unused) and rebuilding the
normalizer from ``tokenizer_config.json``; loading a T̂ with a million
extra entries takes a few seconds.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenadapt.errors import ModelError

log = logging.getLogger(__name__)

TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
# Fills ids between the tokenizer's last entry and the embedding matrix's last
# row, so that row i is always id i; brackets are punctuation for the BERT
# pre-tokenizer, so these entries can never match text.
_GAP_TOKEN = "[greenadapt-unused-{}]"
_PROBE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


@dataclass
class GeneralTokenizer:
    """The model's own tokenizer, T_LM, in the two forms we need."""

    path: Path
    backend: Any  # the tokenizers.Tokenizer: normalizer, pre-tokenizer and WordPiece model
    spec: dict[str, Any]  # tokenizer.json contents
    vocab: dict[str, int]  # WordPiece vocabulary (token -> id)
    added: dict[str, int]  # added tokens outside the WordPiece vocabulary

    def word_splitter(self) -> Any:
        """A copy of the backend that splits words into wordpieces and nothing more: a model's tokenizer.json
        may pad every encoding to a fixed length (MiniLM's pads to 128) or cut it, so both are off."""
        from tokenizers import Tokenizer

        splitter = Tokenizer.from_str(self.backend.to_str())
        splitter.no_padding()
        splitter.no_truncation()
        return splitter

    @property
    def max_input_chars_per_word(self) -> int:
        return int(self.spec["model"].get("max_input_chars_per_word", 100))

    @property
    def continuing_prefix(self) -> str:
        return str(self.spec["model"].get("continuing_subword_prefix", "##"))

    @property
    def size(self) -> int:
        """One past the largest id any token has."""
        return max(list(self.vocab.values()) + list(self.added.values()) + [-1]) + 1

    def is_known(self, word: str) -> bool:
        return word in self.vocab or word in self.added

    def normalize(self, text: str) -> str:
        normalizer = self.backend.normalizer
        return normalizer.normalize_str(text) if normalizer is not None else text

    def normalization(self) -> dict[str, bool]:
        return normalization_of(self.backend.normalizer)


def load_general_tokenizer(model_path: Path) -> GeneralTokenizer:
    """Load T_LM of ``model_path`` and insist that it is WordPiece (also in ``tokenizer.json``)."""
    from greenadapt.artifacts.pretrained import load_backend_tokenizer

    spec_path = model_path / "tokenizer.json"
    spec: dict[str, Any] | None = None
    if spec_path.is_file():
        try:
            spec = json.loads(spec_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelError(f"unreadable tokenizer.json: {exc}", path=spec_path) from None
        model = spec.get("model") if isinstance(spec, dict) else None
        model_type = model.get("type") if isinstance(model, dict) else None
        # transformers' BertTokenizer rebuilds a WordPiece model from whatever
        # vocabulary tokenizer.json holds, so the loaded tokenizer alone would
        # not reveal a BPE or Unigram file.
        if model_type != "WordPiece":
            raise ModelError(
                f"not a BERT-style model with a WordPiece vocabulary (tokenizer.json holds a {model_type} model)",
                path=spec_path,
                hint="greenadapt adapts WordPiece models such as BERT, BioBERT, MiniLM, ELECTRA",
            )
    backend = load_backend_tokenizer(model_path)
    if spec is None:
        spec = json.loads(backend.to_str())
    vocab = spec["model"].get("vocab")
    if not isinstance(vocab, dict) or not vocab:
        raise ModelError("tokenizer.json has no WordPiece vocabulary", path=spec_path)
    added = {
        str(t["content"]): int(t["id"])
        for t in spec.get("added_tokens", [])
        if isinstance(t, dict) and t.get("content") not in vocab
    }
    return GeneralTokenizer(path=model_path, backend=backend, spec=spec, vocab=vocab, added=added)


def normalization_of(normalizer: Any) -> dict[str, bool]:
    """Effective ``lowercase``/``strip_accents`` of a normalizer, found by probing it."""
    if normalizer is None:
        return {"lowercase": False, "strip_accents": False}
    return {
        "lowercase": normalizer.normalize_str("A") == "a",
        "strip_accents": normalizer.normalize_str("\u00e9") == "e",
    }


def reachable_words(general: GeneralTokenizer, words: Sequence[str]) -> list[bool]:
    """Which ``words`` T̂ could ever produce as one word-initial wordpiece.

    A word qualifies when the tokenizer's normalizer leaves it unchanged and
    its pre-tokenizer keeps it whole (so "Covid" for an uncased model, or
    "covid-19" for any BERT, do not), and it does not begin with the
    continuing-subword prefix (a "##x" entry would change how T_LM's words
    split). Words of plain letters and digits take a fast path when probing
    shows the normalizer and pre-tokenizer leave such text alone.
    """
    backend = general.backend
    normalizer, pre_tokenizer = backend.normalizer, backend.pre_tokenizer
    prefix = general.continuing_prefix

    def keeps_whole(word: str) -> bool:
        if normalizer is not None and normalizer.normalize_str(word) != word:
            return False
        if pre_tokenizer is None:
            return True
        pieces = pre_tokenizer.pre_tokenize_str(word)
        return len(pieces) == 1 and pieces[0][0] == word

    def qualifies(word: str) -> bool:
        return not (prefix and word.startswith(prefix)) and keeps_whole(word)

    for alphabet in ("A-Za-z0-9", "a-z0-9"):
        probe = "".join(c for c in _PROBE if re.fullmatch(f"[{alphabet}]", c))
        if qualifies(probe) and all(qualifies(c) for c in probe):
            return _fast_then_full(words, alphabet, qualifies)
    return [qualifies(w) for w in words]


def _fast_then_full(words: Sequence[str], alphabet: str, qualifies: Callable[[str], bool]) -> list[bool]:
    """Words made only of ``alphabet`` pass as they are; the others get the full check.

    One regex scan over all words joined by spaces finds the characters
    outside the alphabet, instead of a Python-level match per word (a
    million words: a fraction of a second instead of seconds).
    """
    import numpy as np

    joined = " ".join(words)
    if joined.count(" ") != max(len(words) - 1, 0):  # a word holds a space: no fast path
        return [qualifies(w) for w in words]
    ends = np.cumsum(np.fromiter(map(len, words), dtype=np.int64, count=len(words)) + 1)
    odd = [m.start() for m in re.finditer(f"[^{alphabet} ]", joined)]
    result = [True] * len(words)
    for index in set(np.searchsorted(ends, odd, side="right").tolist()):
        result[index] = qualifies(words[index])
    return result


def write_domain_tokenizer(general: GeneralTokenizer, new_words: Sequence[str], first_id: int, dest: Path) -> None:
    """Write T̂ into ``dest``: T_LM with ``new_words`` appended to the WordPiece vocabulary from ``first_id``."""
    if first_id < general.size:
        raise ValueError(f"first_id {first_id} collides with existing ids (< {general.size})")
    by_id: list[str | None] = [None] * first_id
    for token, token_id in general.vocab.items():
        if by_id[token_id] is not None:
            raise ModelError(
                f"tokens {by_id[token_id]!r} and {token!r} share id {token_id}", path=general.path / "tokenizer.json"
            )
        by_id[token_id] = token
    added_by_id = {i: token for token, i in general.added.items()}
    # Added tokens keep their ids and other unused ids get placeholders, so
    # that vocab.txt's line numbers are the ids and row i is id i.
    tokens = [t if t is not None else added_by_id.get(i, _GAP_TOKEN.format(i)) for i, t in enumerate(by_id)]
    tokens += new_words
    vocab = dict(zip(tokens, range(len(tokens))))
    if len(vocab) != len(tokens):
        clash = next(t for i, t in enumerate(tokens) if vocab[t] != i)  # dict() kept the last of the two
        raise ValueError(f"{clash!r} would appear twice in the vocabulary (a new word that is already an entry?)")
    (dest / "tokenizer.json").write_text(tokenizer_json(general.spec, tokens), encoding="utf-8")
    with open(dest / "vocab.txt", "w", encoding="utf-8", newline="\n") as handle:
        handle.write("\n".join(tokens) + "\n")
    for name in TOKENIZER_FILES[2:]:
        if (general.path / name).is_file():
            shutil.copyfile(general.path / name, dest / name)


_VOCAB_PLACEHOLDER = "\x00greenadapt-vocab\x00"


def tokenizer_json(spec: Mapping[str, Any], tokens: Sequence[str]) -> str:
    """``json.dumps`` of ``spec`` with its WordPiece vocabulary replaced by ``{token: index}``, byte for byte,
    but with the vocabulary's text made by one join: with a million new words, ``json.dumps`` spends seconds
    on the dict alone."""
    encode = json.encoder.encode_basestring  # the C encoder json.dumps(ensure_ascii=False) uses
    vocab_text = "{" + ", ".join(f"{encode(token)}: {index}" for index, token in enumerate(tokens)) + "}"
    text = json.dumps({**spec, "model": {**spec["model"], "vocab": _VOCAB_PLACEHOLDER}}, ensure_ascii=False)
    placeholder = json.dumps(_VOCAB_PLACEHOLDER, ensure_ascii=False)
    if text.count(placeholder) != 1:
        raise RuntimeError("the tokenizer spec holds greenadapt's vocabulary placeholder")  # cannot happen with a real spec
    return text.replace(placeholder, vocab_text, 1)


def copy_general_tokenizer(model_path: Path, dest: Path) -> None:
    """Copy T_LM's files unchanged into ``dest`` (with config.json when only it names the tokenizer class)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (model_path / name).is_file():
            shutil.copyfile(model_path / name, dest / name)
    if not _names_tokenizer_class(model_path / "tokenizer_config.json"):
        # AutoTokenizer falls back to config.json's model_type to pick the class.
        shutil.copyfile(model_path / "config.json", dest / "config.json")


def _names_tokenizer_class(path: Path) -> bool:
    try:
        return bool(json.loads(path.read_text(encoding="utf-8")).get("tokenizer_class"))
    except (OSError, ValueError, AttributeError):
        return False


def tokenization_change(general: GeneralTokenizer, words: Sequence[str], *, measured: int = 10_000, shown: int = 5) -> dict[str, Any]:
    """What T̂ changes, true at any corpus size: how many wordpieces T_LM split the new words into (over the
    ``measured`` most frequent, which T̂ keeps as one token each), and the ``shown`` most frequent as examples."""
    head = list(words[:measured])
    if not head:
        return {"words_measured": 0}
    encodings = general.word_splitter().encode_batch(head, add_special_tokens=False)
    pieces = [len(encoding.tokens) for encoding in encodings]
    return {
        "words_measured": len(head),
        "general_pieces_mean": round(sum(pieces) / len(pieces), 3),
        "examples": [{"word": word, "general": list(encoding.tokens)} for word, encoding in zip(head[:shown], encodings, strict=False)],
    }
