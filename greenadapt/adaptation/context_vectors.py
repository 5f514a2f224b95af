"""Word vectors from the base model itself, for ``--method context-mean``.

Instead of training word2vec, run the base model over the pre-tokenized corpus
(one forward pass, streamed, in batches of lines, no gradients) and give each
word the mean of its contextual representations: at hidden layer ``layer``
(0 = the embedding output, L = the last layer), the mean over the word's
wordpieces, averaged over up to ``cap`` occurrences (in the order the length-sorted
batches read them). The result is written
like word2vec's (``vectors.bin``, ``counts.tsv``), so ``align``'s least-squares
fit on the shared words maps it into the input-embedding space exactly as it
maps word2vec vectors: the paper's method with contextual vectors in place of
word2vec.

The pass stops early once every word of the vocabulary (corpus count at least
``min_count``) has ``cap`` occurrences, or after ``max_tokens`` corpus tokens;
words never seen by then get no vector and are left out (their count is in the
manifest).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.progress import NULL_PROGRESS, Progress

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.adaptation.settings import ContextSettings

log = logging.getLogger(__name__)

LINES_PER_BATCH = 32
MAX_WORDPIECES = 128
SORT_WINDOW = 64  # batches whose lines are sorted by length together
HEARTBEAT_SECONDS = 60.0


def check_context_layer(given: int, n_layers: int) -> int:
    """The hidden-state index ``--context-layer`` names in an ``n_layers``-layer model (0: the embeddings), or the refusal."""
    layer = given if given >= 0 else n_layers + 1 + given
    if not 0 <= layer <= n_layers:
        from greenadapt.errors import UsageError

        raise UsageError(f"--context-layer {given} is not a layer of this {n_layers}-layer model",
                         hint=f"use 0..{n_layers} or -1 for the last")
    return layer


def context_vectors(
    corpus_file: Path,
    counts: dict[str, int],
    model_path: Path,
    *,
    settings: ContextSettings,
    device: str = "cpu",
    progress: Progress = NULL_PROGRESS,
) -> tuple[list[str], np.ndarray, dict[str, Any]]:
    """(words with a vector, their vectors (float32), statistics) for the words of ``counts``."""
    import numpy as np
    import torch
    from transformers import AutoModel

    from greenadapt.artifacts.model_weights import check_weights_load_safely
    from greenadapt.artifacts.pretrained import load_fast_tokenizer

    tokenizer = load_fast_tokenizer(model_path)
    check_weights_load_safely(model_path)
    model = AutoModel.from_pretrained(str(model_path), dtype=torch.float32).to(device).eval()
    n_layers = int(model.config.num_hidden_layers)
    layer = check_context_layer(settings.context_layer, n_layers)
    index = {w: i for i, w in enumerate(counts)}
    sums = np.zeros((len(index), model.config.hidden_size), dtype=np.float64)
    seen = np.zeros(len(index), dtype=np.int64)
    todo = len(index)
    tokens_read = 0
    started = time.perf_counter()
    last_heartbeat = 0.0
    progress.start("contextual vectors", total=settings.context_max_tokens, unit="tokens")
    with torch.inference_mode():
        for lines in _batches(corpus_file, LINES_PER_BATCH):
            words_per_line = [line.split() for line in lines]
            tokens_read += sum(len(w) for w in words_per_line)
            encoded = tokenizer(words_per_line, is_split_into_words=True, truncation=True, max_length=MAX_WORDPIECES,
                                padding=True, return_tensors="pt")
            hidden = model(**{k: v.to(device) for k, v in encoded.items()}, output_hidden_states=True).hidden_states[layer]
            hidden = hidden.float().cpu().numpy()
            for row, words in enumerate(words_per_line):
                todo -= _accumulate(hidden[row], encoded.word_ids(row), words, index, sums, seen, settings.context_cap)
            elapsed = max(time.perf_counter() - started, 1e-9)
            progress.update(tokens_read, tokens_per_s=tokens_read / elapsed)
            if elapsed - last_heartbeat >= HEARTBEAT_SECONDS:  # a sign of life where no bar is shown (cron, nohup)
                last_heartbeat = elapsed
                log.info("contextual vectors: %s tokens read (%.0f/s), %s of %s words at cap", f"{tokens_read:,}",
                         tokens_read / elapsed, f"{int((seen >= settings.context_cap).sum()):,}", f"{len(index):,}")
            if todo <= 0 or (settings.context_max_tokens is not None and tokens_read >= settings.context_max_tokens):
                break
    progress.finish()
    found = np.flatnonzero(seen)
    words = list(index)
    vectors = (sums[found] / seen[found, None]).astype(np.float32)
    stats = {
        "layer": layer,
        "n_layers": n_layers,
        "cap": settings.context_cap,
        "tokens_read": tokens_read,
        "words_with_vectors": int(len(found)),
        "words_without_vectors": int(len(words) - len(found)),
        "words_at_cap": int((seen >= settings.context_cap).sum()),
        "seconds": round(time.perf_counter() - started, 3),
    }
    log.info("contextual vectors: %s words from %s tokens (layer %d) in %.0f s", f"{len(found):,}", f"{tokens_read:,}", layer,
             stats["seconds"])
    return [words[i] for i in found], vectors, stats


def _accumulate(hidden: np.ndarray, word_ids: list[int | None], words: list[str], index: dict[str, int],
                sums: np.ndarray, seen: np.ndarray, cap: int) -> int:
    """Add each word's mean wordpiece state to its sum (up to ``cap`` occurrences); how many words reached cap."""
    import numpy as np

    pieces: dict[int, list[int]] = {}
    for position, word_id in enumerate(word_ids):
        if word_id is not None:
            pieces.setdefault(word_id, []).append(position)
    reached = 0
    for word_id, positions in pieces.items():  # words cut off by MAX_WORDPIECES are simply not counted
        slot = index.get(words[word_id])
        if slot is None or seen[slot] >= cap:
            continue
        sums[slot] += hidden[positions].astype(np.float64).mean(axis=0)
        seen[slot] += 1
        reached += int(seen[slot] == cap)
    return reached


def _batches(corpus_file: Path, size: int) -> Iterator[list[str]]:
    """Batches of ``size`` lines; within each window of :data:`SORT_WINDOW` batches the lines are sorted by
    length (stably), so a batch pads little: about twice the speed of file order on real text."""
    window: list[str] = []
    with open(corpus_file, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                window.append(line)
                if len(window) == size * SORT_WINDOW:
                    yield from _sorted_batches(window, size)
                    window = []
    yield from _sorted_batches(window, size)


def _sorted_batches(lines: list[str], size: int) -> Iterator[list[str]]:
    lines = sorted(lines, key=lambda line: line.count(" "))
    for start in range(0, len(lines), size):
        yield lines[start : start + size]
