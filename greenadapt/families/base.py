"""What every tokenizer family provides (see the package docstring)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

_PROBE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
# Fills ids between the tokenizer's last entry and the embedding matrix's last row, so that row i is
# always id i; brackets are punctuation to every pre-tokenizer here, so these entries never match text.
GAP_TOKEN = "[greenadapt-unused-{}]"


CONTINUATION = "##"  # how output marks a piece that continues a word (WordPiece's own convention)


class TokenizerFamily:
    """One family's answers; subclasses set ``name`` and override what differs."""

    name = ""
    word_prefix = ""  # what to put before an isolated word so it is tokenized as in running text
    # transformers' own tokenizer class of the model would rebuild T̂ from the bare vocabulary (dropping what
    # the family set on the model), so T̂'s tokenizer_config names the class that reads tokenizer.json whole
    load_as_written = True

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec

    # -- vocabulary ----------------------------------------------------------------------------
    def vocabulary(self) -> dict[str, int]:
        """token -> id of the model's own vocabulary (added tokens not included)."""
        vocab = self.spec["model"].get("vocab")
        if isinstance(vocab, dict):
            return {str(token): int(i) for token, i in vocab.items()}
        return {str(entry[0]): i for i, entry in enumerate(vocab or [])}

    def word_token(self, word: str) -> str:
        return word

    def word_tokens(self, words: Sequence[str]) -> list[str]:
        return [self.word_token(w) for w in words]

    def is_word_initial(self, token: str) -> bool:
        return True

    def readable(self, token: str) -> str:
        """A vocabulary entry as a person reads it in greenadapt's output: the text of a word-initial piece
        (``disease``, not ``Ġdisease`` or ``▁disease``), and a piece inside a word after ``##`` (``##ase``), the
        convention BERT users know; WordPiece's entries are already written so."""
        return token if self.is_word_initial(token) else CONTINUATION + token

    @property
    def max_word_chars(self) -> int:
        return 1 << 30

    # -- which words T̂ can keep whole ---------------------------------------------------------
    def piece_of(self, backend: Any, word: str) -> str | None:
        """The one piece T_LM's normalizer and pre-tokenizer make of ``word`` in running text, if one."""
        normalizer, pre_tokenizer = backend.normalizer, backend.pre_tokenizer
        if normalizer is not None and normalizer.normalize_str(word) != word:
            return None
        text = self.word_prefix + word
        if pre_tokenizer is None:
            return text
        pieces = pre_tokenizer.pre_tokenize_str(text)
        return pieces[0][0] if len(pieces) == 1 else None

    def qualifies(self, backend: Any, word: str) -> bool:
        return bool(word) and not any(c.isspace() for c in word) and self.piece_of(backend, word) == self.word_token(word)

    def reachable(self, backend: Any, words: Sequence[str]) -> list[bool]:
        """Which ``words`` T̂ could produce as one token; plain letters and digits take a fast path when
        probing shows the normalizer and pre-tokenizer leave such text alone."""

        def qualifies(word: str) -> bool:
            return self.qualifies(backend, word)

        for alphabet in ("A-Za-z0-9", "a-z0-9", "A-Za-z", "a-z"):
            probe = "".join(c for c in _PROBE if re.fullmatch(f"[{alphabet}]", c))
            if qualifies(probe) and all(qualifies(c) for c in probe):
                return fast_then_full(words, alphabet, qualifies)
        return [qualifies(w) for w in words]

    # -- T̂ ------------------------------------------------------------------------------------
    def write(self, general: Any, new_words: Sequence[str], first_id: int, dest: Path) -> dict[str, Any]:
        """Write T̂'s tokenizer files into ``dest``; returns facts for the manifest."""
        raise NotImplementedError

    def write_without(self, general: Any, dropped: set[str], dest: Path) -> None:
        """Write T_LM's tokenizer files into ``dest`` made never to produce the entries ``dropped`` (every other id
        unchanged): a second view of the same vocabulary (``greenadapt second-view``)."""
        raise NotImplementedError

    def droppable(self, token: str) -> bool:
        """An entry a second view may do without: a piece of two characters or more (single characters and bytes
        keep every word spellable)."""
        text = self.readable(token)
        return len(text[len(CONTINUATION):] if text.startswith(CONTINUATION) else text) >= 2


def ids_filled(vocab: Mapping[str, int], added: Mapping[str, int], first_id: int, path: Path) -> list[str]:
    """Tokens by id below ``first_id``: the vocabulary, added tokens at their ids, placeholders elsewhere."""
    from greenadapt.errors import ModelError

    by_id: list[str | None] = [None] * first_id
    for token, token_id in vocab.items():
        if by_id[token_id] is not None:
            raise ModelError(f"tokens {by_id[token_id]!r} and {token!r} share id {token_id}", path=path / "tokenizer.json")
        by_id[token_id] = token
    added_by_id = {i: token for token, i in added.items()}
    return [t if t is not None else added_by_id.get(i, GAP_TOKEN.format(i)) for i, t in enumerate(by_id)]


def check_unique(tokens: Sequence[str]) -> dict[str, int]:
    vocab = dict(zip(tokens, range(len(tokens))))
    if len(vocab) != len(tokens):
        clash = next(t for i, t in enumerate(tokens) if vocab[t] != i)  # dict() kept the last of the two
        raise ValueError(f"{clash!r} would appear twice in the vocabulary (a new word that is already an entry?)")
    return vocab


def fast_then_full(words: Sequence[str], alphabet: str, qualifies: Callable[[str], bool]) -> list[bool]:
    """Words made only of ``alphabet`` pass as they are; the others get the full check.

    One regex scan over all words joined by spaces finds the characters outside the alphabet, instead of a
    Python-level match per word (a million words: a fraction of a second instead of seconds).
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
