"""A saved tokenizer as inference reads it: ``tokenizer.json`` through the tokenizers library, without transformers.

Inference needs of a tokenizer only its ``tokenizers.Tokenizer`` (normalizer, pre-tokenizer, vocabulary), its special
ids, its length and its ``model_max_length``. transformers' ``AutoTokenizer`` gives the same, but importing it imports
torch and transformers (most of a cold predict from a cached ONNX export), and greenadapt then copied its backend to
switch padding and truncation off (a serialization round trip: 3.5 CPU-s for a million-word T̂, whose load itself
took 2.1; reading it here takes 3.6 and needs no copy: docs/benchmarks.md). A :class:`SavedTokenizer` is read where
the folder's files say all of it the way transformers would build it; anything else is loaded by transformers as
before (:func:`~greenadapt.artifacts.pretrained.load_fast_tokenizer`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# transformers 5 loads these classes' tokenizer.json as it is (TokenizersBackend) or rebuilds it (BertTokenizer) from
# the vocabulary and the settings of tokenizer_config.json; for a BertTokenizer the file's normalizer, pre-tokenizer and
# WordPiece model are checked below to be what those settings build. Other classes rebuild from settings this reader
# does not follow: transformers loads them.
_AS_SAVED = ("TokenizersBackend", "PreTrainedTokenizerFast")
_BERT = ("BertTokenizer", "BertTokenizerFast")
# tokenizer_config.json's BertTokenizer settings -> (the BertNormalizer field they become, BertTokenizer's default)
_BERT_NORMALIZER = {"do_lower_case": ("lowercase", True), "strip_accents": ("strip_accents", None),
                    "tokenize_chinese_chars": ("handle_chinese_chars", True)}
_SPECIAL = ("cls_token", "sep_token", "pad_token", "unk_token")
_NO_LIMIT = int(1e30)  # transformers' model_max_length when tokenizer_config.json gives none


@dataclass(eq=False)  # keyed by identity (greenadapt.modeling.units caches its backends per tokenizer object)
class SavedTokenizer:
    """A tokenizer read from its files. ``backend_tokenizer`` has padding and truncation off and is only read: it is this
    object's own, so its users share it instead of copying it."""

    path: Path
    backend_tokenizer: Any  # tokenizers.Tokenizer
    cls_token_id: int
    sep_token_id: int
    pad_token_id: int
    unk_token_id: int
    model_max_length: int

    def __len__(self) -> int:
        return int(self.backend_tokenizer.get_vocab_size(with_added_tokens=True))


def read_saved_tokenizer(path: Path) -> SavedTokenizer | None:
    """The tokenizer of ``path`` read from its files, or None where transformers must build it (no tokenizer.json, a
    class this reader does not follow, settings the file's normalizer contradicts, a special token it lacks)."""
    from greenadapt.artifacts.files import read_own_text
    from greenadapt.artifacts.pretrained import load_backend_tokenizer

    path = Path(path)
    if not (path / "tokenizer.json").is_file():
        return None
    try:
        config = json.loads(read_own_text(path / "tokenizer_config.json"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or config.get("tokenizer_class") not in _AS_SAVED + _BERT:
        return None
    backend = load_backend_tokenizer(path)  # the family checked, as transformers' load is
    if config["tokenizer_class"] in _BERT and not _bert_as_rebuilt(backend, config):
        return None
    ids = {name: _token_id(backend, config.get(name)) for name in _SPECIAL}
    if any(value is None for value in ids.values()):
        return None
    backend.no_padding()
    backend.no_truncation()
    limit = config.get("model_max_length")
    return SavedTokenizer(path, backend, **{f"{name}_id": value for name, value in ids.items()},  # type: ignore[arg-type]
                          model_max_length=int(limit) if isinstance(limit, int | float) else _NO_LIMIT)


def _content(token: Any) -> Any:
    """A special token's text as tokenizer_config.json writes it (the text, or an AddedToken's fields)."""
    return token.get("content") if isinstance(token, dict) else token


def _token_id(backend: Any, token: Any) -> int | None:
    content = _content(token)
    return backend.token_to_id(content) if isinstance(content, str) else None


def _bert_as_rebuilt(backend: Any, config: dict[str, Any]) -> bool:
    """Whether the file holds the BertTokenizer transformers builds from ``config``: it rebuilds the normalizer,
    pre-tokenizer and WordPiece model from those settings and the vocabulary, whatever tokenizer.json says."""
    from tokenizers.models import WordPiece

    normalizer, pre_tokenizer, model = backend.normalizer, backend.pre_tokenizer, backend.model
    if normalizer is None or pre_tokenizer is None or not isinstance(model, WordPiece):
        return False
    state = json.loads(normalizer.__getstate__())
    return (state.get("type") == "BertNormalizer" and state.get("clean_text") is True
            and all(state.get(field) == config.get(key, default) for key, (field, default) in _BERT_NORMALIZER.items())
            and json.loads(pre_tokenizer.__getstate__()).get("type") == "BertPreTokenizer"
            and model.continuing_subword_prefix == "##" and model.max_input_chars_per_word == 100
            and model.unk_token == _content(config.get("unk_token", "[UNK]")))
