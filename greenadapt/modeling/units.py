"""Both tokenizations of every example, computed once before training.

A *view* is one tokenizer's encoding: view 0 is the general tokenizer T_LM,
view 1 the domain tokenizer T̂ (when the model folder has one). A *unit* is
what one sequence of the model sees: a chunk of an NER sentence or one
classification example, encoded under every view, with the positions of
its *output rows* (the word-initial wordpieces of its words for NER, the
[CLS] position for classification) and one target label id per row.

Because every view of a unit covers the same words, the logits of a word
can be averaged across views: that is the mean-pooled inference.

NER sentences are cut into chunks of at most ``max_words`` whitespace words
without splitting a labelled span (the BioBERT recipe); a chunk whose
wordpieces do not fit ``max_length`` under some view is cut further, at
entity boundaries where possible, so no word is ever truncated away. Only a
single word longer than the whole sequence loses its trailing pieces (its
first piece, which carries the label, is kept).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from greenadapt.artifacts.model_folder import TokenizerPair
from greenadapt.data.metrics import can_cut_before
from greenadapt.data.task_files import NerSentence, TextExample
from greenadapt.defaults import check_max_length
from greenadapt.errors import UsageError

log = logging.getLogger(__name__)

VIEW_GENERAL = 0
VIEW_DOMAIN = 1
IGNORE = -100  # target of a row with no gold label (unlabelled input)


def plain_backend(tokenizer: Any) -> Any:
    """The tokenizers backend with no padding or truncation (tokenizer.json may set both), for reading only: a
    :class:`~greenadapt.artifacts.saved_tokenizer.SavedTokenizer`'s own (it has neither), else a private copy (a
    transformers tokenizer sets its backend's padding and truncation at every call)."""
    from greenadapt.artifacts.saved_tokenizer import SavedTokenizer

    if isinstance(tokenizer, SavedTokenizer):
        return tokenizer.backend_tokenizer
    backend = _copy(tokenizer.backend_tokenizer)
    backend.no_padding()
    backend.no_truncation()
    return backend


def _copy(backend: Any) -> Any:
    """A private copy of a tokenizers backend (a serialization round trip: 1.5 CPU-s for a million-word T̂)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_str(backend.to_str())


def word_backend(tokenizer: Any) -> Any:
    """:func:`plain_backend` for pre-split words, each encoded as in running text
    (:func:`greenadapt.families.running_text_pre_tokenizer`); for reading only."""
    import json

    from greenadapt.families import pre_tokenizer_from_spec, running_text_pre_tokenizer

    backend = plain_backend(tokenizer)
    if backend.pre_tokenizer is not None:
        # Only the pre-tokenizer is read: serializing the backend would write out a million-entry T̂ vocabulary.
        own = json.loads(backend.pre_tokenizer.__getstate__())
        words = running_text_pre_tokenizer(own)
        if words is not own:
            backend = _private(tokenizer, backend)
            backend.pre_tokenizer = pre_tokenizer_from_spec(words)
    return backend


def _private(tokenizer: Any, backend: Any) -> Any:
    """``backend`` (from :func:`plain_backend`), copied when it is the tokenizer's own, so it can be changed."""
    return _copy(backend) if backend is getattr(tokenizer, "backend_tokenizer", None) else backend


# Each tokenizer's private backends, made once and only read after: a copy is a serialization round trip (1.4 CPU-s
# for the two views of a million-word T̂, 67 ms for MiniLM's), and prediction asked for one every batch it streamed.
# Keyed by the tokenizer object and its length, so tokens added to it later make new copies.
_SHARED_BACKENDS: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()


def shared_backend(tokenizer: Any, *, words: bool = False, max_length: int | None = None) -> Any:
    """:func:`word_backend` (``words``) or :func:`plain_backend`, truncating at ``max_length`` (None: never), made once per
    tokenizer and kind; callers must not change what it returns."""
    made = _SHARED_BACKENDS.setdefault(tokenizer, {})
    key = (words, max_length, len(tokenizer))
    if key not in made:
        backend = word_backend(tokenizer) if words else plain_backend(tokenizer)
        if max_length is not None:
            backend = _private(tokenizer, backend)
            backend.enable_truncation(max_length, strategy="longest_first")
        made[key] = backend
    return made[key]


@dataclass
class Unit:
    """One model sequence, under every view."""

    example: int  # index of the sentence / text example
    first_word: int  # NER: the unit's first word within the sentence; 0 for classification
    targets: np.ndarray  # int64, one per output row; IGNORE when unlabelled
    ids: list[np.ndarray]  # per view: input ids with [CLS] and [SEP]
    type_ids: list[np.ndarray | None]  # per view: segment ids (sentence pairs), None = all zeros
    rows: list[np.ndarray]  # per view: positions of the output rows in ``ids``
    # G-MAP: the general model's input for this unit (whatever view the domain model reads), when fused
    memory_ids: np.ndarray | None = None
    memory_type_ids: np.ndarray | None = None

    @property
    def n_rows(self) -> int:
        return len(self.targets)


# --------------------------------------------------------------------------
# NER


def word_pieces(backend: Any, sentences: Sequence[Sequence[str]], unk_id: int) -> list[list[tuple[int, ...]]]:
    """``[sentence][word] -> wordpiece ids``; never empty: a word the tokenizer drops becomes [UNK].

    The backend's normalizer and pre-tokenizer run per word, so a word such as
    ``"APC2,"`` may become several pieces; they all belong to that word. A word's
    pieces do not depend on its neighbours (:func:`word_backend` encodes each word as
    in running text), so each distinct word is tokenized once: the serving benchmark's
    5,000 sentences hold 135,000 words, 12,500 of them distinct. Words of one spelling
    share one tuple of pieces.
    """
    distinct = list(dict.fromkeys(word for sentence in sentences for word in sentence))
    encodings = backend.encode_batch([[word] for word in distinct], is_pretokenized=True, add_special_tokens=False)
    pieces_of = {word: tuple(encoding.ids) or (unk_id,) for word, encoding in zip(distinct, encodings, strict=True)}
    return [[pieces_of[word] for word in sentence] for sentence in sentences]


def split_ranges(
    start: int,
    end: int,
    fits: Callable[[int, int], bool],
    can_cut: Callable[[int], bool],
    *,
    hard: bool,
) -> list[tuple[int, int]]:
    """Cut ``[start, end)`` into ranges that ``fits``, cutting where ``can_cut`` allows.

    Each range is as long as fits and ends at an allowed cut. When no allowed
    cut lies within the fitting length: with ``hard`` the range is cut at the
    longest fitting length anyway (at least one word); without it, the range
    runs on to the next allowed cut (an entity is never split).
    """
    ranges = []
    while start < end:
        if fits(start, end):  # (fits is monotone: every shorter range fits too) the common case, asked once
            ranges.append((start, end))
            break
        limit = start + 1
        while limit < end and fits(start, limit + 1):
            limit += 1
        if limit == end:
            ranges.append((start, end))
            break
        cut = next((c for c in range(limit, start, -1) if can_cut(c)), None)
        if cut is None:
            cut = limit if hard else next((c for c in range(limit + 1, end) if can_cut(c)), end)
        ranges.append((start, cut))
        start = cut
    return ranges


@contextlib.contextmanager
def _cycle_collector_paused() -> Iterator[None]:
    """Python's cycle collector held off while units are built: they hold no reference cycles (counting frees them),
    and the collector's full passes over every object of the process, a loaded model's included, took up to a third of
    the time to build the units of bench/bench_serving.py's 5,000 sentences (0.53-0.80 s without the pause, 0.43-0.55 s
    with it, four runs each, with each distinct word tokenized once)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@_cycle_collector_paused()
def ner_units(
    sentences: Sequence[NerSentence],
    label2id: dict[str, int] | None,
    tokenizers: TokenizerPair,
    *,
    max_words: int | None,
    max_length: int,
    cut_at_entities: bool = True,
) -> tuple[list[Unit], dict[str, int]]:
    """All units of an NER file and counts of what had to be cut.

    ``max_words``: words per chunk; None keeps each sentence whole, cut only where ``max_length`` ends.
    ``cut_at_entities``: chunk boundaries avoid the gold entities (training data). Files that are
    evaluated are cut without looking at their labels, exactly as unlabelled text is at prediction
    time, so a reported score is what prediction on the same words gives.
    """
    if max_words is not None and max_words < 1:
        raise UsageError("--max-words must be at least 1")
    budget = check_max_length(max_length) - 2  # [CLS] and [SEP]
    words = [s.words for s in sentences]
    per_view = [word_pieces(shared_backend(tok, words=True), words, tokenizers.unk_id) for tok in tokenizers.views]
    units: list[Unit] = []
    stats = {"sentences": len(sentences), "chunks": 0, "split_for_length": 0, "truncated_words": 0}
    for index, sentence in enumerate(sentences):
        tags = sentence.labels
        targets = (
            np.array([label2id[t] for t in tags], dtype=np.int64)
            if tags is not None and label2id is not None
            else np.full(len(sentence.words), IGNORE, dtype=np.int64)
        )

        guide = tags if cut_at_entities else None

        def can_cut(position: int, tags: tuple[str, ...] | None = guide) -> bool:
            return tags is None or can_cut_before(tags, position)

        cums = [np.concatenate([[0], np.cumsum([len(p) for p in view[index]])]) for view in per_view]

        def fits_length(a: int, b: int, cums: list[np.ndarray] = cums) -> bool:
            return all(int(c[b] - c[a]) <= budget for c in cums)

        for chunk_start, chunk_end in split_ranges(
            0, len(sentence.words), lambda a, b: max_words is None or b - a <= max_words, can_cut, hard=False
        ):
            stats["chunks"] += 1
            pieces_ranges = split_ranges(chunk_start, chunk_end, fits_length, can_cut, hard=True)
            stats["split_for_length"] += len(pieces_ranges) - 1
            for a, b in pieces_ranges:
                ids, rows = [], []
                for view in per_view:
                    view_ids, view_rows, truncated = _assemble(view[index][a:b], tokenizers, budget)
                    stats["truncated_words"] += truncated
                    ids.append(view_ids)
                    rows.append(view_rows)
                units.append(Unit(index, a, targets[a:b], ids, [None] * len(ids), rows))
    if stats["split_for_length"] or stats["truncated_words"]:
        log.warning(
            "%d chunk(s) were longer than %d wordpieces and split; %d over-long word(s) kept only their first %d pieces",
            stats["split_for_length"],
            max_length,
            stats["truncated_words"],
            budget,
        )
    return units, stats


def _assemble(words: Sequence[Sequence[int]], tokenizers: TokenizerPair, budget: int) -> tuple[np.ndarray, np.ndarray, int]:
    ids = [tokenizers.cls_id]
    rows = []
    truncated = 0
    for pieces in words:
        rows.append(len(ids))
        if len(pieces) > budget:  # only possible for a unit of one word (split_ranges guarantees it)
            pieces = pieces[:budget]
            truncated += 1
        ids.extend(pieces)
    ids.append(tokenizers.sep_id)
    return np.asarray(ids, dtype=np.int64), np.asarray(rows, dtype=np.int64), truncated


# --------------------------------------------------------------------------
# Classification


def text_units(
    examples: Sequence[TextExample],
    label2id: dict[str, int] | None,
    tokenizers: TokenizerPair,
    *,
    max_length: int,
) -> tuple[list[Unit], dict[str, int]]:
    """One unit per example; texts longer than ``max_length`` are truncated (longest text of a pair first)."""
    has_pair = [e.pair is not None for e in examples]
    inputs = [(e.text, e.pair) if e.pair is not None else e.text for e in examples]
    encoded_views = []
    truncated = 0
    for tok in tokenizers.views:
        encodings = shared_backend(tok, max_length=max_length).encode_batch(inputs, add_special_tokens=True)
        truncated = max(truncated, sum(bool(e.overflowing) for e in encodings))
        encoded_views.append(encodings)
    units = []
    for index, example in enumerate(examples):
        target = label2id[example.label] if example.label is not None and label2id is not None else IGNORE
        ids = [np.asarray(view[index].ids, dtype=np.int64) for view in encoded_views]
        types = [np.asarray(view[index].type_ids, dtype=np.int64) if has_pair[index] else None for view in encoded_views]
        rows = [np.zeros(1, dtype=np.int64) for _ in encoded_views]
        units.append(Unit(index, 0, np.asarray([target], dtype=np.int64), ids, types, rows))
    if truncated:
        log.warning("%d example(s) longer than %d wordpieces were truncated (raise --max-length to keep more)", truncated, max_length)
    return units, {"examples": len(examples), "truncated": truncated}
