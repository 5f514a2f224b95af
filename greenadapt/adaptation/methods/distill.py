"""``distill``: lstsq's rows, then fitted so that the frozen model reads a new word in context as it reads its pieces.

What survives a few epochs of fine-tuning is a new row that behaves, in context, like the wordpieces it
replaces. Starting from lstsq's rows, only the new rows are trained; every weight of the model stays frozen.
On corpus windows that contain a new word, the model's hidden states under the domain tokenization (each
new word one token) are matched to its states under its own tokenization, word by word and at every layer:
the new word's state against the mean of its pieces' states, and every other word's (mean) state against
itself under the other view, so that a new row also leaves its neighbours' states as they were. The loss of
a layer is the squared error relative to the teacher states' mean square; the layers are averaged.

Budget: at most ``distill_per_word`` windows of :data:`WINDOW_WORDS` words around an occurrence of a word,
``distill_sentences`` windows in all, taken in corpus order from the pre-tokenized corpus w2v read;
:data:`HELD_OUT_FRACTION` of them (seeded) are held out, and the matching loss on them is reported before
and after. A word never seen in a window keeps lstsq's row (counted, and warned about). The fit is seeded
(window split and batch order) and checkpointed every :data:`CHECKPOINT_SECONDS` in a folder beside the
output, so an interrupted ``expand`` resumes where it stopped; expand removes the checkpoint once it commits.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.adaptation.methods.base import ROW_CHUNK, RowContext, options_for
from greenadapt.adaptation.methods.lstsq import Lstsq
from greenadapt.errors import StageError, UsageError

if TYPE_CHECKING:
    import numpy as np
    import torch

log = logging.getLogger(__name__)

WINDOW_WORDS = 32  # a sentence's worth of context, well inside MAX_WORDPIECES
MAX_WORDPIECES = 128
HELD_OUT_FRACTION = 0.1
BATCH_WINDOWS = 32
# Adam's step on the rows. On MiniLM and the biomedical corpus (1,500 windows, one epoch) the held-out matching
# loss went 0.230 -> 0.145 at 1e-3, 0.111 at 3e-3 and 0.103 at 1e-2: 3e-3 takes most of the gain with a third of
# 1e-2's step, so the rows stay nearer the scale of the model's own.
LEARNING_RATE = 3e-3
# The held-out split's random stream ("dist"), apart from the batch order's ([seed, epoch]).
HELD_OUT_STREAM = 0x64697374
CHECKPOINT_SECONDS = 120.0
CHECKPOINT_FORMAT = "greenadapt-distill-checkpoint-1"
CHECKPOINT_FILE = "distill-checkpoint.safetensors"


class Distill(Lstsq):
    name = "distill"
    summary = ("lstsq rows, then fitted so the frozen model's states under the domain tokenizer match its own on corpus windows (CPU "
               "minutes)")
    options: tuple[str, ...] = ("distill_per_word", "distill_sentences", "distill_epochs")
    seeded = True
    reads_corpus = True

    def owns_checkpoint(self, folder: Path) -> bool:
        return is_checkpoint(folder)

    def rows(self, ctx: RowContext) -> Iterator[np.ndarray]:
        import numpy as np

        start = np.empty((len(ctx.words), ctx.embeddings.shape[1]), dtype=np.float32)  # filled a chunk at a time: held once
        filled = 0
        for chunk in super().rows(ctx):
            start[filled : filled + len(chunk)] = chunk
            filled += len(chunk)
        fitted = distill_rows(start, ctx)
        for first in range(0, len(fitted), ROW_CHUNK):
            yield fitted[first : first + ROW_CHUNK]


DISTILL = Distill()


@dataclass
class Windows:
    """Corpus windows, each with the new word it was drawn for."""

    words: list[list[str]]
    target: list[int]  # index into the new words
    seen: list[int]  # windows drawn per new word


def collect_windows(corpus_file: Path, new_words: Sequence[str], *, per_word: int, budget: int) -> Windows:
    """Up to ``per_word`` windows per new word and ``budget`` in all, in corpus order; the scan stops once both are spent."""
    index = {w: i for i, w in enumerate(new_words)}
    seen = [0] * len(new_words)
    windows: list[list[str]] = []
    target: list[int] = []
    full = 0
    half = WINDOW_WORDS // 2
    if not new_words or budget <= 0:
        return Windows(windows, target, seen)
    with open(corpus_file, encoding="utf-8") as handle:
        for line in handle:
            words = line.split()
            for position, word in enumerate(words):
                i = index.get(word)
                if i is None or seen[i] >= per_word:
                    continue
                first = max(0, min(position - half, len(words) - WINDOW_WORDS))
                windows.append(words[first : first + WINDOW_WORDS])
                target.append(i)
                seen[i] += 1
                full += seen[i] == per_word
                if len(windows) >= budget or full == len(new_words):
                    return Windows(windows, target, seen)
    return Windows(windows, target, seen)


@dataclass
class Encoded:
    """One window under both views: ids and, per position, the word it belongs to (-1: a special token)."""

    general: list[int]
    general_words: list[int]
    domain: list[int]
    domain_words: list[int]
    n_words: int


def encode_windows(tokenizer: Any, windows: Sequence[Sequence[str]], index: dict[str, int], n_rows: int) -> list[Encoded | None]:
    """Both views of each window; None for one longer than :data:`MAX_WORDPIECES` under the general view.

    The domain view is the general one with each new word's pieces replaced by its own id (``n_rows + i``):
    what the domain tokenizer gives word-split input (the families' invariant, tests/test_families.py).
    """
    from greenadapt.modeling.units import word_backend, word_pieces

    unk = tokenizer.unk_token_id if tokenizer.unk_token_id is not None else 0
    cls, sep = _special_ids(tokenizer)
    encoded: list[Encoded | None] = []
    for words, pieces in zip(windows, word_pieces(word_backend(tokenizer), windows, unk), strict=True):
        general, general_words, domain, domain_words = [cls], [-1], [cls], [-1]
        for w, (word, ids) in enumerate(zip(words, pieces, strict=True)):
            general += ids
            general_words += [w] * len(ids)
            new = index.get(word)
            own = [n_rows + new] if new is not None else ids
            domain += own
            domain_words += [w] * len(own)
        general.append(sep)
        general_words.append(-1)
        domain.append(sep)
        domain_words.append(-1)
        encoded.append(Encoded(general, general_words, domain, domain_words, len(words)) if len(general) <= MAX_WORDPIECES else None)
    return encoded


def _special_ids(tokenizer: Any) -> tuple[int, int]:
    """The ids a single sequence starts and ends with (BERT's [CLS]/[SEP], RoBERTa's <s>/</s>)."""
    ids = tokenizer("", add_special_tokens=True)["input_ids"]
    if len(ids) != 2:
        raise UsageError(f"--method distill needs a model whose sequences start and end with one special token; this tokenizer adds {ids}")
    return int(ids[0]), int(ids[1])


class RowMatcher:
    """The frozen model and the matching loss of a set of trainable new rows."""

    def __init__(self, model: Any, n_rows: int, trained_ids: np.ndarray) -> None:
        import torch

        self.model = model
        self.n_rows = n_rows
        self.embeddings = model.get_input_embeddings().weight
        self.slot = torch.full((int(trained_ids.max()) + 1 if len(trained_ids) else 1,), -1, dtype=torch.long)
        self.slot[torch.from_numpy(trained_ids)] = torch.arange(len(trained_ids))

    def loss(self, batch: Sequence[Encoded], rows: torch.Tensor) -> torch.Tensor:
        """Mean over layers of the words' squared state error, relative to the teacher states' mean square."""
        import torch

        general, general_words, general_mask = _padded([e.general for e in batch], [e.general_words for e in batch])
        domain, domain_words, domain_mask = _padded([e.domain for e in batch], [e.domain_words for e in batch])
        n_words = max(e.n_words for e in batch)
        with torch.no_grad():
            teacher = self.model(input_ids=general, attention_mask=general_mask, output_hidden_states=True).hidden_states[1:]
        new = domain >= self.n_rows
        own = self.embeddings[domain.clamp(max=self.n_rows - 1)]
        added = rows[self.slot[(domain - self.n_rows).clamp(min=0)].clamp(min=0)]
        inputs = torch.where(new[..., None], added, own)
        student = self.model(inputs_embeds=inputs, attention_mask=domain_mask, output_hidden_states=True).hidden_states[1:]
        total = inputs.new_zeros(())
        for t, s in zip(teacher, student, strict=True):
            t_words, valid = _word_means(t, general_words, n_words)
            s_words, _ = _word_means(s, domain_words, n_words)
            total = total + ((s_words - t_words) ** 2).sum(-1)[valid].mean() / (t_words**2).sum(-1)[valid].mean()
        return total / len(teacher)


def _padded(ids: Sequence[list[int]], words: Sequence[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    import torch

    length = max(map(len, ids))
    tokens = torch.zeros((len(ids), length), dtype=torch.long)
    owner = torch.full((len(ids), length), -1, dtype=torch.long)
    mask = torch.zeros((len(ids), length), dtype=torch.long)
    for row, (i, w) in enumerate(zip(ids, words, strict=True)):
        tokens[row, : len(i)] = torch.tensor(i)
        owner[row, : len(w)] = torch.tensor(w)
        mask[row, : len(i)] = 1
    return tokens, owner, mask


def _word_means(states: torch.Tensor, owner: torch.Tensor, n_words: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, n_words, hidden) mean state of each word's positions, and which words exist."""
    import torch

    batch, _, hidden = states.shape
    keep = owner >= 0
    slots = (torch.arange(batch)[:, None] * n_words + owner)[keep]
    sums = states.new_zeros((batch * n_words, hidden)).index_add(0, slots, states[keep])
    counts = states.new_zeros(batch * n_words).index_add(0, slots, states.new_ones(len(slots)))
    valid = counts > 0
    return (sums / counts.clamp(min=1)[:, None]).view(batch, n_words, hidden), valid.view(batch, n_words)


def distill_rows(start: np.ndarray, ctx: RowContext) -> np.ndarray:
    """``start`` (lstsq's rows, in ``ctx.words`` order, updated in place) with the rows of the words seen in corpus windows fitted."""
    import numpy as np
    import torch
    from transformers import AutoModel

    from greenadapt.artifacts.model_weights import check_weights_load_safely
    from greenadapt.artifacts.pretrained import load_fast_tokenizer, quiet_transformers

    access = ctx.corpus_access
    if access is None:
        raise StageError("--method distill needs the base model and the corpus w2v read", hint="run it through `greenadapt expand`")
    options = ctx.options
    started, cpu_started = time.perf_counter(), time.process_time()
    windows = collect_windows(access.corpus_file(), ctx.words, per_word=options.distill_per_word, budget=options.distill_sentences)
    unseen = [w for w, n in zip(ctx.words, windows.seen, strict=True) if n == 0]
    if unseen:
        log.warning(
            "distill: %s of %s new words were not seen in a corpus window (budget %s windows, %s per word) and keep their lstsq rows (e.g. "
            "%s)",
            f"{len(unseen):,}", f"{len(ctx.words):,}", f"{options.distill_sentences:,}", options.distill_per_word, ", ".join(unseen[:5]),
        )
    tokenizer = load_fast_tokenizer(access.model_path)
    check_weights_load_safely(access.model_path)
    with quiet_transformers():
        model = AutoModel.from_pretrained(str(access.model_path), dtype=torch.float32).eval()
    model.requires_grad_(False)
    n_rows = ctx.embeddings.shape[0]
    index = {w: i for i, w in enumerate(ctx.words)}
    encoded = [e for e in encode_windows(tokenizer, windows.words, index, n_rows) if e is not None]
    rng = np.random.default_rng([ctx.seed, HELD_OUT_STREAM])
    order = rng.permutation(len(encoded))
    n_held = int(len(encoded) * HELD_OUT_FRACTION)
    held, train = [encoded[i] for i in order[:n_held]], [encoded[i] for i in order[n_held:]]
    trained_ids = np.array(sorted({i - n_rows for e in encoded for i in e.domain if i >= n_rows}), dtype=np.int64)
    stats: dict[str, Any] = {
        "windows": len(encoded), "windows_too_long": len(windows.words) - len(encoded), "held_out_windows": len(held),
        "words_seen": int(len(trained_ids)), "words_unseen": len(unseen), "epochs": options.distill_epochs,
        "window_words": WINDOW_WORDS, "lr": LEARNING_RATE, "layers": int(model.config.num_hidden_layers),
    }
    fitted = start
    if len(trained_ids) and train:
        matcher = RowMatcher(model, n_rows, trained_ids)
        rows = torch.from_numpy(start[trained_ids])  # a copy: fancy indexing
        stats["heldout_loss_before"] = _mean_loss(matcher, held, rows)
        rows, steps = _fit(matcher, train, rows, ctx, _fingerprint(ctx, windows, trained_ids), access.checkpoint_dir)
        stats["heldout_loss_after"] = _mean_loss(matcher, held, rows)
        stats["steps"] = steps
        fitted[trained_ids] = rows.numpy()
        log.info("distill: %s rows fitted on %s windows; held-out matching loss %.4f -> %.4f", f"{len(trained_ids):,}",
                 f"{len(train):,}", stats["heldout_loss_before"] or math.nan, stats["heldout_loss_after"] or math.nan)
    stats["seconds"] = round(time.perf_counter() - started, 3)
    stats["cpu_seconds"] = round(time.process_time() - cpu_started, 3)
    ctx.method_stats.update(distill=stats)
    return fitted


def _mean_loss(matcher: RowMatcher, windows: list[Encoded], rows: torch.Tensor) -> float | None:
    import torch

    if not windows:
        return None
    with torch.no_grad():
        losses = [(matcher.loss(windows[i : i + BATCH_WINDOWS], rows).item(), len(windows[i : i + BATCH_WINDOWS]))
                  for i in range(0, len(windows), BATCH_WINDOWS)]
    return round(sum(loss * n for loss, n in losses) / len(windows), 6)


def _fit(
    matcher: RowMatcher, train: list[Encoded], rows: torch.Tensor, ctx: RowContext, fingerprint: str, checkpoint_dir: Path
) -> tuple[torch.Tensor, int]:
    """torch's Adam on ``rows`` alone, epoch by epoch in a seeded order, resuming from and saving to ``checkpoint_dir``."""
    import numpy as np
    import torch

    per_epoch = math.ceil(len(train) / BATCH_WINDOWS)
    total = ctx.options.distill_epochs * per_epoch
    step = 0
    resumed = _load_checkpoint(checkpoint_dir, fingerprint)
    if resumed is not None:
        step, rows, moments = resumed
        log.info("distill: resuming at step %d of %d from %s", step, total, checkpoint_dir)
    rows.requires_grad_(True)
    optimizer = torch.optim.Adam([rows], lr=LEARNING_RATE)
    if resumed is not None:
        optimizer.state[rows] = {"step": torch.tensor(float(step)), **moments}
    last_saved = time.perf_counter()
    ctx.progress.start("distilling rows", total=total, unit="steps")
    while step < total:
        epoch, batch = divmod(step, per_epoch)
        order = np.random.default_rng([ctx.seed, epoch]).permutation(len(train))
        chosen = [train[i] for i in order[batch * BATCH_WINDOWS : (batch + 1) * BATCH_WINDOWS]]
        optimizer.zero_grad(set_to_none=True)
        loss = matcher.loss(chosen, rows)
        loss.backward()
        optimizer.step()
        step += 1
        ctx.progress.update(step, loss=f"{loss.item():.4f}")
        if step < total and time.perf_counter() - last_saved >= CHECKPOINT_SECONDS:
            state = optimizer.state[rows]
            _save_checkpoint(checkpoint_dir, fingerprint, step, rows.detach(), state["exp_avg"], state["exp_avg_sq"])
            last_saved = time.perf_counter()
        _after_step(step)
    ctx.progress.finish()
    return rows.detach(), step


def _after_step(step: int) -> None:
    """Called after every update (tests interrupt the fit here)."""


def _fingerprint(ctx: RowContext, windows: Windows, trained_ids: np.ndarray) -> str:
    """What a checkpoint must match to be resumed: the options, the seed, the rows' start and the windows."""
    digest = hashlib.sha256(json.dumps({"options": options_for(DISTILL, ctx.options), "seed": ctx.seed, "words": list(ctx.words)}).encode())
    for words in windows.words:
        digest.update(" ".join(words).encode() + b"\n")
    digest.update(trained_ids.tobytes())
    return digest.hexdigest()


def is_checkpoint(folder: Path) -> bool:
    """Whether ``folder`` holds a distill checkpoint (so expand may replace or remove it)."""
    return _checkpoint_metadata(folder) is not None


def _checkpoint_metadata(folder: Path) -> dict[str, str] | None:
    from safetensors import safe_open

    try:
        with safe_open(str(folder / CHECKPOINT_FILE), framework="pt") as handle:
            metadata = handle.metadata() or {}
    except Exception:  # noqa: BLE001 - absent, truncated or foreign: not a checkpoint of ours
        return None
    return metadata if metadata.get("format") == CHECKPOINT_FORMAT else None


def _save_checkpoint(folder: Path, fingerprint: str, step: int, rows: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> None:
    """One file, replaced atomically: the step, the fingerprint and the tensors always belong together."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{CHECKPOINT_FILE}.tmp"
    metadata = {"format": CHECKPOINT_FORMAT, "fingerprint": fingerprint, "step": str(step)}
    save_file({"rows": rows.contiguous(), "m": m.contiguous(), "v": v.contiguous()}, str(tmp), metadata=metadata)
    os.replace(tmp, folder / CHECKPOINT_FILE)


def _load_checkpoint(folder: Path, fingerprint: str) -> tuple[int, torch.Tensor, dict[str, torch.Tensor]] | None:
    from safetensors.torch import load_file

    metadata = _checkpoint_metadata(folder)
    if metadata is None:
        return None
    if metadata.get("fingerprint") != fingerprint:
        log.info("distill: the checkpoint in %s was made with other options or windows; starting from lstsq's rows", folder)
        return None
    tensors = load_file(str(folder / CHECKPOINT_FILE))
    return int(metadata["step"]), tensors["rows"], {"exp_avg": tensors["m"], "exp_avg_sq": tensors["v"]}
