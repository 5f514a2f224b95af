"""The words ``expand`` adds: the word2vec words the model's tokenizer splits, frequent enough, in a fixed order.

Order: count descending, then word (Unicode code point order); words the tokenizer can never produce, or
longer than its word limit, are left out and counted (``excluded``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from greenadapt.errors import StageError

if TYPE_CHECKING:
    from greenadapt.adaptation.domain_tokenizer import GeneralTokenizer

log = logging.getLogger(__name__)

NEW_WORDS_FILE = "new_words.tsv"


@dataclass
class NewWords:
    """The words expand adds, in id order, with their rows in the word2vec matrix."""

    words: list[str]
    counts: list[int]
    w2v_rows: list[int]
    excluded: dict[str, int] = field(default_factory=dict)


def select_new_words(
    general: GeneralTokenizer,
    words: Sequence[str],
    counts: Mapping[str, int],
    *,
    max_new: int | None,
    min_count: int,
) -> NewWords:
    """Pick and order the new words (see the module docstring): at most ``max_new``, each seen ``min_count`` times."""
    from greenadapt.adaptation.domain_tokenizer import reachable_words

    excluded = {"below_min_count": 0, "too_long": 0, "unreachable": 0}
    max_chars = general.max_input_chars_per_word
    vocab, added = general.vocab, general.added
    tokens = general.family.word_tokens(words)
    unknown = [i for i, (word, token) in enumerate(zip(words, tokens, strict=True)) if token not in vocab and word not in added]
    # A million words: comprehensions over the unknown ones, not a loop with a branch per word.
    try:
        unknown_counts = [counts[words[i]] for i in unknown]
    except KeyError as missing:
        raise StageError(
            f"the counts file has no count for word2vec word {missing.args[0]!r}",
            hint="the w2v output is inconsistent; rerun `greenadapt w2v ... --force`",
        ) from None
    frequent = [i for i, count in zip(unknown, unknown_counts) if count >= min_count]
    excluded["below_min_count"] = len(unknown) - len(frequent)
    rows = [i for i in frequent if len(words[i]) <= max_chars]
    excluded["too_long"] = len(frequent) - len(rows)
    keep = reachable_words(general, [words[i] for i in rows])
    excluded["unreachable"] = keep.count(False)
    if excluded["unreachable"]:
        log.warning(
            "%d word2vec words can never be produced by the model's tokenizer (normalization, punctuation "
            "or a leading ##) and are not added; was w2v trained with this model's tokenizer?",
            excluded["unreachable"],
        )
    rows = [i for i, ok in zip(rows, keep) if ok]
    chosen_words = [words[i] for i in rows]
    chosen_counts = [counts[w] for w in chosen_words]
    # Two stable sorts on plain keys (word, then count) give the (-count, word)
    # order several times faster than one sort on tuples.
    order = sorted(range(len(rows)), key=chosen_words.__getitem__)
    order.sort(key=[-c for c in chosen_counts].__getitem__)
    if max_new is not None:
        order = order[:max_new]
    return NewWords(
        words=[chosen_words[k] for k in order],
        counts=[chosen_counts[k] for k in order],
        w2v_rows=[rows[k] for k in order],
        excluded=excluded,
    )
