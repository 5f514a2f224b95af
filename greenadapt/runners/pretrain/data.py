"""The masked-LM data: tokenized corpus cache, packed sequences, held-out split, BERT masking.

Corpus → tokens. The corpus is first pre-tokenized exactly as for ``w2v``
(:func:`greenadapt.corpus.pretokenize.pretokenize_corpus`: the model's normalizer
and pre-tokenizer, one sentence per line, cached under
``<workdir>/cache/pretok`` and shared with ``w2v``). Its lines are then
encoded with the training tokenizer's WordPiece model (normalizing again
is a no-op: BERT normalizers are idempotent) and appended to one flat file
of token ids, ``tokens.bin`` (uint16 when the vocabulary fits, else int32),
cached under ``<workdir>/cache/mlm-tokens/<key>`` (a ``mlm-tokens`` stage
folder keyed by the pre-tokenized corpus and the tokenizer). Both passes
stream in constant memory; training reads the file through ``np.memmap``,
so a corpus of billions of tokens costs disk, not RAM.

Packing. The token stream is cut into consecutive blocks of
``max_length − 2`` ids, each wrapped as ``[CLS] block [SEP]``; sentences
run on across block boundaries (no separator between them, as in
RoBERTa's FULL-SENTENCES packing without document breaks: the
pre-tokenized corpus keeps sentence, not document, boundaries). Only the
last block may be shorter. A word cut by a block boundary is two words for
whole-word masking.

Held-out split: the first ``heldout`` sequences (default 256, at most a
tenth of the corpus, at least 1) are never trained on; evaluation masks
them with a fixed seed (:data:`EVAL_SEED`, independent of ``--seed``) per
sequence index, so held-out losses compare across runs and models that
use the same tokenizer and ``--max-length``.

Masking (BERT): of the positions that are not special tokens ([CLS],
[SEP], [PAD], [MASK], [UNK] never become targets), ``round(0.15 · n)``
(at least 1) are chosen uniformly without replacement; with
``whole_word``, whole words (a piece plus its following ``##`` pieces) are
taken in random order while the count stays within that budget (as BERT's
``create_pretraining_data.py`` does; the first word in the order is taken
even if it alone exceeds it). Each chosen position independently becomes
[MASK] with probability 0.8, a random non-special token with 0.1, and
stays unchanged with 0.1. The draws of sequence ``i`` in epoch ``e`` come
from their own generator seeded with ``(seed, e, i)``, so masking does
not depend on the batch order, the number of processes or resuming.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from greenadapt.artifacts import kinds
from greenadapt.artifacts.manifest import fingerprint
from greenadapt.artifacts.stage import StageRun, resource_errors
from greenadapt.defaults import check_max_length
from greenadapt.errors import CorpusError, UsageError
from greenadapt.progress import NULL_PROGRESS, Progress

log = logging.getLogger(__name__)

TOKENS_FILE = "tokens.bin"
TOKENS_FORMAT = 1
TOKENS_KIND = kinds.MLM_TOKENS
EVAL_SEED = 20201109  # held-out masking: the same for every run, whatever --seed
MASK_PROBABILITY = 0.15
IGNORE = -100
_MASK_STREAM = 0x6D6C6D
_LINES_PER_BATCH = 4096


# --------------------------------------------------------------------------
# Corpus -> flat token file (cached)


@dataclass(frozen=True)
class TokenCache:
    """A corpus as one flat array of token ids on disk."""

    path: Path
    key: str
    n_tokens: int
    dtype: str
    lines: int
    cached: bool

    def array(self) -> np.ndarray:
        if self.n_tokens == 0:
            return np.zeros(0, dtype=self.dtype)
        return np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.n_tokens,))


def tokenizer_digest(tokenizer: Any) -> str:
    """sha256 of the tokenizer's full definition (vocabulary, normalizer, pre-tokenizer)."""
    return hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode("utf-8")).hexdigest()


def token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= np.iinfo(np.uint16).max + 1 else "int32"


def tokenize_corpus(
    sources: Sequence[Any],
    tokenizer: Any,
    cache_root: Path,
    *,
    workers: int = 1,
    force: bool = False,
    progress: Progress = NULL_PROGRESS,
) -> TokenCache:
    """The corpus ``sources`` as token ids of ``tokenizer`` (pre-tokenized and tokenized once, then cached)."""
    import tokenizers

    from greenadapt.corpus.pretokenize import pretokenize_corpus
    from greenadapt.modeling.units import plain_backend

    pretok = pretokenize_corpus(sources, tokenizer, cache_root / "pretok", workers=workers, progress=progress, force=force)
    vocab_size = len(tokenizer)
    dtype = token_dtype(vocab_size)
    config = {
        "format": TOKENS_FORMAT,
        "tokenizer": tokenizer_digest(tokenizer),
        "dtype": dtype,
        "tokenizers": tokenizers.__version__,
    }
    inputs = [{"pretok": pretok.key}]
    key = fingerprint(TOKENS_KIND, config, inputs)
    out = cache_root / TOKENS_KIND / key
    with StageRun(TOKENS_KIND, out, config, inputs, force=force, wait=True, libraries=("tokenizers",)) as run:
        if run.skipped:
            assert run.manifest is not None
            stats = run.manifest["stats"]
            return TokenCache(out / TOKENS_FILE, key, int(stats["tokens"]), dtype, int(stats["lines"]), cached=True)
        backend = plain_backend(tokenizer)
        n_tokens = lines = 0
        progress.start("tokenizing", total=pretok.lines, unit="lines")
        with resource_errors(out.parent), open(run.tmp / TOKENS_FILE, "wb") as handle:
            with open(pretok.path, encoding="utf-8", newline="\n") as text:
                batch: list[str] = []
                for line in text:
                    batch.append(line.rstrip("\n"))
                    if len(batch) >= _LINES_PER_BATCH:
                        n_tokens += _write_batch(backend, batch, handle, dtype)
                        lines += len(batch)
                        batch = []
                        progress.update(lines)
                if batch:
                    n_tokens += _write_batch(backend, batch, handle, dtype)
                    lines += len(batch)
        progress.finish()
        if n_tokens == 0:
            raise CorpusError("the corpus has no tokens", path=sources[0].display if sources else None)
        run.commit(stats={"tokens": n_tokens, "lines": lines, "vocab_size": vocab_size})
    log.info("tokenized %s lines into %s tokens (%s)", f"{lines:,}", f"{n_tokens:,}", out)
    return TokenCache(out / TOKENS_FILE, key, n_tokens, dtype, lines, cached=False)


def _write_batch(backend: Any, lines: list[str], handle: Any, dtype: str) -> int:
    encodings = backend.encode_batch(lines, add_special_tokens=False)
    ids = [np.asarray(e.ids, dtype=dtype) for e in encodings if e.ids]
    if not ids:
        return 0
    flat = np.concatenate(ids)
    handle.write(flat.tobytes())
    return int(flat.size)


# --------------------------------------------------------------------------
# Packing and the held-out split


def heldout_count(n_sequences: int, requested: int) -> int:
    """How many of the first sequences are held out: ``requested``, at most a tenth, at least 1."""
    if n_sequences < 2:
        raise CorpusError(
            f"the corpus packs into {n_sequences} sequence(s); at least 2 are needed (one held out, one to train on)",
            hint="use a larger corpus or a smaller --max-length",
        )
    return max(1, min(requested, n_sequences // 10))


@dataclass
class PackedCorpus:
    """Token ids cut into ``[CLS] block [SEP]`` sequences of at most ``max_length`` ids."""

    tokens: np.ndarray
    max_length: int
    cls_id: int
    sep_id: int
    n_heldout: int = 0

    def __post_init__(self) -> None:
        check_max_length(self.max_length)

    @classmethod
    def build(cls, tokens: np.ndarray, max_length: int, cls_id: int, sep_id: int, heldout: int) -> PackedCorpus:
        corpus = cls(tokens, max_length, cls_id, sep_id)
        corpus.n_heldout = heldout_count(len(corpus), heldout)
        return corpus

    @property
    def body(self) -> int:
        return self.max_length - 2

    def __len__(self) -> int:
        return math.ceil(len(self.tokens) / self.body)

    def sequence(self, index: int) -> np.ndarray:
        block = np.asarray(self.tokens[index * self.body : (index + 1) * self.body], dtype=np.int64)
        return np.concatenate([[self.cls_id], block, [self.sep_id]]).astype(np.int64)

    def sequence_length(self, index: int) -> int:
        return min(self.body, len(self.tokens) - index * self.body) + 2

    @property
    def train_indices(self) -> np.ndarray:
        return np.arange(self.n_heldout, len(self), dtype=np.int64)

    @property
    def heldout_indices(self) -> np.ndarray:
        return np.arange(self.n_heldout, dtype=np.int64)


@dataclass
class MixedCorpus:
    """One corpus read through two tokenizers: each training sequence, drawn once per seed, comes from
    the domain packing with probability ``share`` and from the general packing otherwise.

    This is the fine-tuning's tokenizer mixture applied to masked-LM training, so that continued
    pretraining of an expanded model sees both segmentations of every domain word. Sequence ``i`` of
    the general packing stands in for the part of the text that domain sequence ``i`` covers (indices
    scaled by the ratio of the two lengths). The held-out sequences are the domain packing's, and the
    general packing holds out the same share of the text, so no held-out text is trained on in
    either view.
    """

    domain: PackedCorpus
    general: PackedCorpus
    share: float
    seed: int

    def __post_init__(self) -> None:
        scale = len(self.general) / len(self.domain)
        self.general.n_heldout = min(len(self.general) - 1, max(self.general.n_heldout, math.ceil(self.domain.n_heldout * scale)))
        rng = np.random.default_rng([self.seed, 0x6D6978])
        self._from_domain = rng.random(len(self.domain)) < self.share
        self._from_domain[: self.domain.n_heldout] = True

    @property
    def n_heldout(self) -> int:
        return self.domain.n_heldout

    @property
    def max_length(self) -> int:
        return self.domain.max_length

    def __len__(self) -> int:
        return len(self.domain)

    def _source(self, index: int) -> tuple[PackedCorpus, int]:
        """The packing sequence ``index`` is read from, and its index there."""
        if self._from_domain[index]:
            return self.domain, index
        d_train = len(self.domain) - self.domain.n_heldout
        g_train = len(self.general) - self.general.n_heldout
        offset = (index - self.domain.n_heldout) * g_train // max(1, d_train)
        return self.general, self.general.n_heldout + min(offset, g_train - 1)

    def from_domain(self, index: int) -> bool:
        return bool(self._from_domain[index])

    def sequence(self, index: int) -> np.ndarray:
        corpus, i = self._source(index)
        return corpus.sequence(i)

    def sequence_length(self, index: int) -> int:
        corpus, i = self._source(index)
        return corpus.sequence_length(i)

    @property
    def train_indices(self) -> np.ndarray:
        return self.domain.train_indices

    @property
    def heldout_indices(self) -> np.ndarray:
        return self.domain.heldout_indices


# --------------------------------------------------------------------------
# Masking


@dataclass(frozen=True)
class Masker:
    """BERT masking for one tokenizer (see the module docstring)."""

    mask_id: int
    special: np.ndarray  # bool per vocabulary id: never a target
    continuation: np.ndarray  # bool per vocabulary id: a "##" piece
    replacements: np.ndarray  # ids a randomly replaced token is drawn from
    probability: float = MASK_PROBABILITY
    whole_word: bool = False

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, vocab_rows: int, *, whole_word: bool = False, probability: float = MASK_PROBABILITY) -> Masker:
        """``vocab_rows``: rows of the model's embedding matrix (random replacements stay below it)."""
        if not 0 < probability < 1:
            raise UsageError(f"--mask-probability {probability} is not in (0, 1)")
        if tokenizer.mask_token_id is None:
            raise UsageError("the tokenizer has no [MASK] token", hint="masked-LM training needs a BERT-style tokenizer")
        size = max(vocab_rows, len(tokenizer))
        special = np.zeros(size, dtype=bool)
        special[[i for i in tokenizer.all_special_ids if i is not None and 0 <= i < size]] = True
        continuation = np.zeros(size, dtype=bool)
        for piece, index in tokenizer.get_vocab().items():
            if piece.startswith("##") and index < size:
                continuation[index] = True
        replacements = np.flatnonzero(~special[:vocab_rows]).astype(np.int64)
        return cls(int(tokenizer.mask_token_id), special, continuation, replacements, probability, whole_word)

    def mask(self, ids: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, labels) for one sequence; labels are :data:`IGNORE` except at the chosen positions."""
        candidates = np.flatnonzero(~self.special[ids])
        inputs, labels = ids.copy(), np.full(ids.shape, IGNORE, dtype=np.int64)
        if candidates.size == 0:
            return inputs, labels
        budget = max(1, int(round(self.probability * candidates.size)))
        if self.whole_word:
            chosen = self._whole_words(ids, candidates, budget, rng)
        else:
            chosen = np.sort(rng.choice(candidates, size=budget, replace=False))
        labels[chosen] = ids[chosen]
        draws = rng.random(chosen.size)
        inputs[chosen[draws < 0.8]] = self.mask_id
        swap = chosen[(draws >= 0.8) & (draws < 0.9)]
        if swap.size:
            inputs[swap] = self.replacements[rng.integers(0, self.replacements.size, size=swap.size)]
        return inputs, labels

    def _whole_words(self, ids: np.ndarray, candidates: np.ndarray, budget: int, rng: np.random.Generator) -> np.ndarray:
        starts = ~self.continuation[ids[candidates]]
        # A piece continues the previous word only if it directly follows a candidate position.
        starts[0] = True
        starts[1:] |= np.diff(candidates) != 1
        words = np.split(candidates, np.flatnonzero(starts)[1:])
        taken: list[np.ndarray] = []
        count = 0
        for index in rng.permutation(len(words)):
            word = words[index]
            if count + word.size > budget:
                if taken:
                    continue
            taken.append(word)
            count += word.size
            if count >= budget:
                break
        return np.sort(np.concatenate(taken))


def sequence_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, _MASK_STREAM, epoch, index])


@dataclass
class MaskedBatch:
    input_ids: np.ndarray  # (B, T), padded
    attention_mask: np.ndarray
    labels: np.ndarray  # IGNORE outside the targets

    @property
    def n_targets(self) -> int:
        return int((self.labels != IGNORE).sum())

    @property
    def n_tokens(self) -> int:
        return int(self.attention_mask.sum())


# What the masked-LM loop reads sequences from: one packed corpus, or two mixed (``pretrain --mix``).
TrainingCorpus = PackedCorpus | MixedCorpus


def masked_batch(
    corpus: TrainingCorpus, indices: Sequence[int] | np.ndarray, masker: Masker, *, seed: int, epoch: int, pad_id: int
) -> MaskedBatch:
    """The sequences ``indices``, masked with their own generators, padded to the longest."""
    sequences = [corpus.sequence(int(i)) for i in indices]
    width = max(len(s) for s in sequences)
    input_ids = np.full((len(sequences), width), pad_id, dtype=np.int64)
    attention = np.zeros((len(sequences), width), dtype=np.int64)
    labels = np.full((len(sequences), width), IGNORE, dtype=np.int64)
    for row, (index, ids) in enumerate(zip(indices, sequences, strict=True)):
        inputs, targets = masker.mask(ids, sequence_rng(seed, epoch, int(index)))
        input_ids[row, : len(ids)] = inputs
        attention[row, : len(ids)] = 1
        labels[row, : len(ids)] = targets
    return MaskedBatch(input_ids, attention, labels)


def epoch_order(indices: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """The training sequences of ``epoch`` in a random order that depends only on (seed, epoch)."""
    return indices[np.random.default_rng([seed, epoch]).permutation(len(indices))]
