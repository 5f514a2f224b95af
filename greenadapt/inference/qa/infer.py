"""Batched inference: context-level start/end logits for (question, tokenization) jobs.

A *job* is one question with one tokenization of its context. Its windows
(``greenadapt.inference.qa.windows``) are queued together with those of the
following jobs — other questions on the same paper, the other tokenizer,
the next papers — sorted by length in chunks and run in batches, so the
model always sees full batches with little padding. The active logits of
each window are scattered into per-job arrays; a job is yielded as soon
as its last window is done, so memory stays bounded by the chunk size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from greenadapt.machine.devices import to_device
from greenadapt.inference.qa.windows import Window, plan_windows
from greenadapt.compute.batches import pad_rows
from greenadapt.compute.distributed import autocast, autocast_dtype

if TYPE_CHECKING:
    import numpy as np
    import torch

log = logging.getLogger(__name__)

# How many batches' worth of windows are sorted by length together.
_SORT_CHUNK_BATCHES = 8


@dataclass(frozen=True)
class SpecialIds:
    cls: int
    sep: int
    pad: int


@dataclass(frozen=True)
class MemorySource:
    """G-MAP: the same question and context under the general model's tokenizer, and how its pieces map to words."""

    question_ids: np.ndarray
    context_ids: np.ndarray
    context_words: np.ndarray  # word of each general context piece (-1: none)
    job_words: np.ndarray  # word of each of the job's own context pieces
    special: SpecialIds


@dataclass(frozen=True)
class LogitJob:
    key: tuple[str, str]  # (question id, tokenizer name): what the caller matches the logits back to
    question_ids: np.ndarray
    context_ids: np.ndarray
    special: SpecialIds
    # G-MAP: where the general model's input comes from; None: the window itself (the job's tokenizer is the general one)
    memory: MemorySource | None = None


@dataclass
class InferenceStats:
    windows: int = 0
    batches: int = 0
    positions: int = 0  # model input positions processed, padding included
    padding: int = 0


@dataclass
class _JobState:
    job: LogitJob
    start: np.ndarray
    end: np.ndarray
    remaining: int


@dataclass
class _Pending:
    state: _JobState
    window: Window
    length: int = field(init=False)

    def __post_init__(self) -> None:
        self.length = self.window.input_length(len(self.state.job.question_ids))


def build_batch(items: list[tuple[LogitJob, Window]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """input_ids, token_type_ids (0 for [CLS] Q [SEP], 1 after) and attention_mask, right-padded."""
    import numpy as np

    lengths = [window.input_length(len(job.question_ids)) for job, window in items]
    width = max(lengths)
    input_ids = np.empty((len(items), width), dtype=np.int64)
    token_types = np.zeros((len(items), width), dtype=np.int64)
    attention = np.zeros((len(items), width), dtype=np.int64)
    for row, ((job, window), length) in enumerate(zip(items, lengths, strict=True)):
        q = len(job.question_ids)
        input_ids[row, :] = job.special.pad
        input_ids[row, 0] = job.special.cls
        input_ids[row, 1 : 1 + q] = job.question_ids
        input_ids[row, 1 + q] = job.special.sep
        input_ids[row, 2 + q : length - 1] = job.context_ids[window.span_start : window.span_stop]
        input_ids[row, length - 1] = job.special.sep
        token_types[row, 2 + q : length] = 1
        attention[row, :length] = 1
    return input_ids, token_types, attention


def memory_batch(
    items: list[tuple[LogitJob, Window]], inputs: tuple[np.ndarray, np.ndarray, np.ndarray], max_length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """G-MAP: the general model's input per window: [CLS] question [SEP] the window's words [SEP] under its tokenizer.

    A job without a :class:`MemorySource` reads its own window (same tokenizer).
    The words of a window are those its context pieces lie in; the general
    context is cut to ``max_length`` (the general model's limit).
    """
    import numpy as np

    rows: list[tuple[np.ndarray, np.ndarray]] = []
    input_ids, token_types, attention = inputs
    for row, (job, window) in enumerate(items):
        source = job.memory
        if source is None:
            n = int(attention[row].sum())
            rows.append((input_ids[row, :n], token_types[row, :n]))
            continue
        words = source.job_words[window.span_start : window.span_stop]
        words = words[words >= 0]
        context = source.context_ids[:0]
        if len(words):
            inside = np.flatnonzero((source.context_words >= words.min()) & (source.context_words <= words.max()))
            if len(inside):
                context = source.context_ids[inside[0] : inside[-1] + 1]
        question = source.question_ids[: max(0, max_length - 3)]
        context = context[: max(0, max_length - 3 - len(question))]
        ids = np.concatenate([[source.special.cls], question, [source.special.sep], context, [source.special.sep]]).astype(np.int64)
        types = np.zeros(len(ids), dtype=np.int64)
        types[2 + len(question) :] = 1
        rows.append((ids, types))
    pad = items[0][0].memory.special.pad if items[0][0].memory is not None else items[0][0].special.pad
    return pad_rows(rows, pad)


class QaRunner:
    """Owns the model and device; turns batches of inputs into start/end logits.

    A G-MAP model (``GmapModel``) also gets the general model's input per
    window; ``memory_tokenizer`` is the general model's tokenizer (T_LM when
    it is the same) and ``memory_length`` its input limit.
    """

    def __init__(self, model: Any, device: torch.device | None, *, precision: str = "auto", memory_tokenizer: Any = None,
                 memory_length: int = 512) -> None:

        self.model = model
        self.device = device
        self.fused = hasattr(model, "general_memory")
        if self.fused and memory_tokenizer is None:
            raise ValueError("a G-MAP model needs the general model's tokenizer (memory_tokenizer)")
        self.memory_tokenizer = memory_tokenizer
        self.memory_length = memory_length
        # --precision's autocast dtype (auto: bf16 on CUDA and on a CPU with native bf16); device None: ONNX Runtime's
        # fp32 graph, numpy in and out (no torch)
        self.dtype = autocast_dtype(precision, device) if device is not None else None

    def logits(
        self,
        input_ids: np.ndarray,
        token_types: np.ndarray,
        attention: np.ndarray,
        memory: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        inputs = {
            "input_ids": to_device(input_ids, self.device),
            "token_type_ids": to_device(token_types, self.device),
            "attention_mask": to_device(attention, self.device),
        }
        if memory is not None:
            for name, array in zip(("general_input_ids", "general_token_type_ids", "general_attention_mask"), memory, strict=True):
                inputs[name] = to_device(array, self.device)
        if self.device is None:
            output = self.model(**inputs)
            return output.start_logits, output.end_logits
        import torch

        with torch.inference_mode(), autocast(self.device, self.dtype):
            output = self.model(**inputs)
        start = output.start_logits.float().cpu().numpy()
        end = output.end_logits.float().cpu().numpy()
        return start, end


def stream_logits(
    runner: QaRunner,
    jobs: Iterable[LogitJob],
    *,
    max_length: int,
    batch_size: int,
    stats: InferenceStats | None = None,
) -> Iterator[tuple[LogitJob, np.ndarray, np.ndarray]]:
    """Yield ``(job, start_logits, end_logits)`` with one logit per context wordpiece, as jobs finish."""
    import numpy as np

    stats = stats if stats is not None else InferenceStats()
    chunk_size = batch_size * _SORT_CHUNK_BATCHES
    queue: list[_Pending] = []

    def drain(limit: int) -> Iterator[tuple[LogitJob, np.ndarray, np.ndarray]]:
        while len(queue) >= limit and queue:
            chunk = queue[:chunk_size]
            del queue[:chunk_size]
            chunk.sort(key=lambda pending: pending.length, reverse=True)
            for first in range(0, len(chunk), batch_size):
                yield from _run_batch(runner, chunk[first : first + batch_size], stats)

    for job in jobs:
        n_context = len(job.context_ids)
        state = _JobState(job, np.empty(n_context, np.float32), np.empty(n_context, np.float32), 0)
        if n_context == 0:
            yield job, state.start, state.end
            continue
        windows = plan_windows(n_context, len(job.question_ids), max_length)
        state.remaining = len(windows)
        queue.extend(_Pending(state, window) for window in windows)
        yield from drain(chunk_size)
    yield from drain(1)


def _run_batch(runner: QaRunner, batch: list[_Pending], stats: InferenceStats) -> Iterator[tuple[LogitJob, np.ndarray, np.ndarray]]:
    items = [(p.state.job, p.window) for p in batch]
    input_ids, token_types, attention = build_batch(items)
    memory = memory_batch(items, (input_ids, token_types, attention), runner.memory_length) if getattr(runner, "fused", False) else None
    fusion = () if memory is None else (memory,)  # a runner without G-MAP is called as it always was, without the memory
    start, end = runner.logits(input_ids, token_types, attention, *fusion)
    stats.windows += len(batch)
    stats.batches += 1
    stats.positions += input_ids.size
    stats.padding += int(input_ids.size - attention.sum())
    for row, pending in enumerate(batch):
        window, state = pending.window, pending.state
        offset = window.active_offset(len(state.job.question_ids))
        width = window.active_stop - window.active_start
        state.start[window.active_start : window.active_stop] = start[row, offset : offset + width]
        state.end[window.active_start : window.active_stop] = end[row, offset : offset + width]
        state.remaining -= 1
        if state.remaining == 0:
            yield state.job, state.start, state.end
