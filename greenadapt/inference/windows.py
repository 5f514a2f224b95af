"""Raw documents in windows for prediction: each window's sentences are sorted by length into inference batches, so a
bigger window leaves less padding; a window is bounded in documents and characters (memory), handed on as soon as it
is full, and, for a live input, as soon as the input pauses."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, TypeVar


class _Document(Protocol):
    @property
    def text(self) -> str: ...


D = TypeVar("D", bound=_Document)

# A window's sentences are sorted by length into inference batches: over windows of 256 one-line documents (as before)
# a third of every batch was padding, and int8 tagged the 5,000 benchmark sentences at 0.66x the speed of one sorted
# window of them all; windows of 2,048 reach 0.92x (bench/onnx_batching.py, docs/benchmarks.md "Serving on a CPU").
# The character bound keeps a window of long documents about as small in memory as one of sentences.
DOCS_PER_WINDOW = 2048
CHARS_PER_WINDOW = 1_000_000
STALL_SECONDS = 1.0  # standard input quiet this long: what it gave so far is predicted now, not when a window fills


# -- stalls: from here to its end marker this code is also copied into a served model's serve_onnx.py
class _Stalled:
    """Between two documents of a live input: none came for a while."""


STALLED = _Stalled()


class _ReadFailed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def flushed_on_stalls(items: Iterator[D], seconds: float, most_waiting: int) -> Iterator[D | _Stalled]:
    """``items``, read on a thread of their own (at most ``most_waiting`` ahead), with :data:`STALLED` wherever none
    came for ``seconds``: a slow feed's documents are answered when it pauses, not when a window of them fills. An
    error of the reading is raised here."""
    import queue
    import threading

    handoff: queue.Queue[D | _ReadFailed | None] = queue.Queue(maxsize=most_waiting)

    def read() -> None:
        try:
            for item in items:
                handoff.put(item)
        except BaseException as exc:  # (raised again in the answering thread, which reports it)
            handoff.put(_ReadFailed(exc))
        else:
            handoff.put(None)

    threading.Thread(target=read, name="greenadapt-input", daemon=True).start()
    while True:
        try:
            got = handoff.get(timeout=seconds)
        except queue.Empty:
            yield STALLED
            continue
        if got is None:
            return
        if isinstance(got, _ReadFailed):
            raise got.error
        yield got
# -- end of stalls


def windows(items: Iterator[D | _Stalled], most_documents: int, most_characters: int) -> Iterator[list[D]]:
    """``items`` in windows of at most ``most_documents`` documents and ``most_characters`` characters (a longer
    document is a window alone); a window is handed on at once where the input stalled."""
    window: list[D] = []
    characters = 0
    for item in items:
        if isinstance(item, _Stalled):
            if window:
                yield window
                window, characters = [], 0
            continue
        if window and characters + len(item.text) > most_characters:
            yield window
            window, characters = [], 0
        window.append(item)
        characters += len(item.text)
        if len(window) == most_documents or characters >= most_characters:  # a pipe's reader sees it now
            yield window
            window, characters = [], 0
    if window:
        yield window
