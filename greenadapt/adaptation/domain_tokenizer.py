"""The general tokenizer T_LM and the domain tokenizer T̂ built from it.

T̂ is T_LM's ``tokenizer.json`` with the new words as new entries (ids
``first_id``, ``first_id + 1``, … in the order given); normalizer,
pre-tokenizer, post-processor and special tokens are T_LM's. How a family
(WordPiece, byte-level BPE, Unigram) makes each new word one token, and what
else it changes: :mod:`greenadapt.families`. Building it is a
list update and one JSON dump: about a second for a million new words. It is
never built with per-token ``add_tokens``, which is quadratic and matches
added tokens *inside* words ("sleep" -> "sle ep").
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenadapt.families import TokenizerFamily, family_of
from greenadapt.errors import ModelError

log = logging.getLogger(__name__)

TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
# Vocabulary files of other families, kept with T_LM's copy but not written for T̂ (tokenizer.json is T̂'s whole truth).
_GENERAL_ONLY_FILES = ("vocab.json", "merges.txt", "spm.model", "sentencepiece.bpe.model")


@dataclass
class GeneralTokenizer:
    """The model's own tokenizer, T_LM, in the forms we need."""

    path: Path
    backend: Any  # the tokenizers.Tokenizer: normalizer, pre-tokenizer and subword model
    spec: dict[str, Any]  # tokenizer.json contents
    vocab: dict[str, int]  # the subword model's vocabulary (token -> id)
    added: dict[str, int]  # added tokens outside that vocabulary
    family: TokenizerFamily

    def word_splitter(self) -> Any:
        """A copy of the backend that splits words into pieces and nothing more: a model's tokenizer.json
        may pad every encoding to a fixed length (MiniLM's pads to 128) or cut it, so both are off."""
        from tokenizers import Tokenizer

        splitter = Tokenizer.from_str(self.backend.to_str())
        splitter.no_padding()
        splitter.no_truncation()
        return splitter

    def split_words(self, words: Sequence[str]) -> list[Any]:
        """T_LM's encodings of ``words``, each as it is split in running text (after a space)."""
        prefix = self.family.word_prefix
        texts = [prefix + w for w in words] if prefix else list(words)
        return self.word_splitter().encode_batch(texts, add_special_tokens=False)

    @property
    def max_input_chars_per_word(self) -> int:
        return self.family.max_word_chars

    @property
    def size(self) -> int:
        """One past the largest id any token has."""
        return max(list(self.vocab.values()) + list(self.added.values()) + [-1]) + 1

    def word_id(self, word: str) -> int | None:
        """The id of ``word`` when T_LM has it as one whole-word entry (shared with word2vec), else None."""
        return self.vocab.get(self.family.word_token(word))

    def is_known(self, word: str) -> bool:
        return self.word_id(word) is not None or word in self.added

    def normalize(self, text: str) -> str:
        normalizer = self.backend.normalizer
        return normalizer.normalize_str(text) if normalizer is not None else text

    def normalization(self) -> dict[str, bool]:
        return normalization_of(self.backend.normalizer)


def load_general_tokenizer(model_path: Path) -> GeneralTokenizer:
    """Load T_LM of ``model_path`` and insist that it is of a family greenadapt can adapt."""
    from greenadapt.artifacts.pretrained import load_backend_tokenizer

    spec_path = model_path / "tokenizer.json"
    spec: dict[str, Any] | None = None
    if spec_path.is_file():
        try:
            spec = json.loads(spec_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelError(f"unreadable tokenizer.json: {exc}", path=spec_path) from None
    backend = load_backend_tokenizer(model_path)  # refuses a family greenadapt cannot adapt, from the file itself
    if spec is None:
        spec = json.loads(backend.to_str())
    family = family_of(spec, path=spec_path)
    vocab = family.vocabulary()
    if not vocab:
        raise ModelError(f"tokenizer.json has no {family.name} vocabulary", path=spec_path)
    added = {
        str(t["content"]): int(t["id"])
        for t in spec.get("added_tokens", [])
        if isinstance(t, dict) and t.get("content") not in vocab
    }
    return GeneralTokenizer(path=model_path, backend=backend, spec=spec, vocab=vocab, added=added, family=family)


def normalization_of(normalizer: Any) -> dict[str, bool]:
    """Effective ``lowercase``/``strip_accents`` of a normalizer, found by probing it."""
    if normalizer is None:
        return {"lowercase": False, "strip_accents": False}
    return {
        "lowercase": normalizer.normalize_str("A") == "a",
        "strip_accents": normalizer.normalize_str("\u00e9") == "e",
    }


def reachable_words(general: GeneralTokenizer, words: Sequence[str]) -> list[bool]:
    """Which ``words`` T̂ could ever produce as one token: the normalizer leaves the word unchanged and the
    pre-tokenizer keeps it whole in running text (so "Covid" for an uncased model, or "covid-19" for any
    BERT, do not), plus what the family rules out (a WordPiece "##x" would change how T_LM's words split)."""
    return general.family.reachable(general.backend, words)


def write_domain_tokenizer(general: GeneralTokenizer, new_words: Sequence[str], first_id: int, dest: Path) -> dict[str, Any]:
    """Write T̂ into ``dest``: T_LM with ``new_words`` as ids ``first_id, …``; returns the family's facts."""
    if first_id < general.size:
        raise ValueError(f"first_id {first_id} collides with existing ids (< {general.size})")
    from greenadapt.artifacts.pretrained import record_added_tokens

    facts = general.family.write(general, new_words, first_id, dest)
    for name in TOKENIZER_FILES[2:]:
        if (general.path / name).is_file():
            shutil.copyfile(general.path / name, dest / name)
    if general.family.load_as_written:
        _load_as_written(dest / "tokenizer_config.json")
    # The family writers keep T_LM's added tokens as they are.
    record_added_tokens(dest, {token["id"]: {key: value for key, value in token.items() if key != "id"}
                               for token in general.spec.get("added_tokens", [])})
    return {"family": general.family.name, **facts}


def _load_as_written(config_path: Path) -> None:
    """Make transformers load T̂'s tokenizer.json as written (:attr:`TokenizerFamily.load_as_written`)."""
    try:
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    except (OSError, ValueError):
        config = {}
    config["tokenizer_class"] = "TokenizersBackend"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def copy_general_tokenizer(model_path: Path, dest: Path) -> None:
    """Copy T_LM's files unchanged into ``dest`` (with config.json when only it names the tokenizer class)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in (*TOKENIZER_FILES, *_GENERAL_ONLY_FILES):
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
    encodings = general.split_words(head)
    pieces = [len(encoding.tokens) for encoding in encodings]
    return {
        "words_measured": len(head),
        "general_pieces_mean": round(sum(pieces) / len(pieces), 3),
        "examples": [{"word": word, "general": list(encoding.tokens)} for word, encoding in zip(head[:shown], encodings, strict=False)],
    }
