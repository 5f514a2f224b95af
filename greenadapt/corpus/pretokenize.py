"""Pre-tokenization with the target model's own normalizer and pre-tokenizer.

word2vec must see exactly the "words" the model's tokenizer sees before
WordPiece (lower-cased and accent-stripped for uncased models, untouched
for cased ones), or the intersection with the wordpiece vocabulary in the
align stage is wrong. So every line goes through
``backend_tokenizer.normalizer`` and then ``.pre_tokenizer``; the result is
one sentence per line, words separated by single spaces, no empty lines:
the format gensim's ``corpus_file`` mode reads.

Speed. The tokenizers Python API costs a few microseconds per word
(alignment tracking plus one Python tuple per word), which would make this
step slower than word2vec training itself. Two paths keep it cheap:

* ASCII lines (nearly all of an English corpus) take a *verified byte
  path*: the normalizer's effect on each of the 127 ASCII characters and
  the pre-tokenizer's class for each (word character, separator, isolated
  punctuation) are read off the real objects once per process, and the
  path is only enabled if it reproduces the real objects exactly on a
  probe set covering every character pair and random runs. It then runs
  as a few ``bytes.translate``/``replace`` passes per chunk.
* Other lines are joined into one string per chunk with a sentinel word
  between them, so one normalize/pre-tokenize call serves many lines. The
  sentinel is only trusted if it comes back exactly once per line break;
  otherwise (the text contains it, or something normalizes to it) that
  batch is redone one line at a time. Unusual normalizers or
  pre-tokenizers that may look across line boundaries are always run one
  line at a time.

Sentence breaks are ``\\n`` (the corpus readers split lines at LF; a CR of
CRLF is whitespace to every BERT normalizer). Words never contain ASCII
whitespace, which gensim's reader would split on. A line of more than
:data:`MAX_LINE_WORDS` words (a document without sentence breaks) is cut
into consecutive lines of that many words, as word2vec.c does; see
:mod:`greenadapt.adaptation.w2v` for why gensim needs it.

Chunks of text are processed by a process pool with a bounded number of
chunks in flight, so memory stays constant whatever the corpus size. Word
counts are collected on the way (in first-occurrence order, as gensim's
own vocabulary scan would produce them) so that word2vec need not scan
the corpus again.

The result is cached under ``<cache_root>/<key>/`` (a ``pretok`` stage
folder) keyed by the source identities, the normalizer and pre-tokenizer
JSON, the tokenizers version and :data:`PRETOK_FORMAT`.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import multiprocessing
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greenadapt.artifacts import kinds
from greenadapt.artifacts.manifest import Manifest, fingerprint
from greenadapt.artifacts.stage import StageRun, resource_errors
from greenadapt.corpus.word_splitter import TextRules, WordSplitter
from greenadapt.errors import CorpusError
from greenadapt.progress import NULL_PROGRESS, Progress

log = logging.getLogger(__name__)

# 3: tar archives' plain corpus members are read too, lines over 8 MiB are cut at spaces.
PRETOK_FORMAT = 3
CORPUS_FILE = "corpus.txt"
VOCAB_FILE = "vocab.tsv"  # word<TAB>count, first-occurrence order
# Longer lines are cut into consecutive lines of at most this many words:
# word2vec.c's MAX_SENTENCE_LENGTH. gensim's corpus_file reader batches
# lines until a batch passes 10,000 words and then trains at most 10,000
# (sub-sampled) words of it, so one long line could lose thousands of words.
MAX_LINE_WORDS = 1000
CHUNK_CHARS = 2 << 20  # text per pool task: large enough to amortise the per-task cost



# --------------------------------------------------------------------------
# Worker side: one chunk of text in, its pre-tokenized lines and counts out

_WORKER_SPLITTER: WordSplitter | None = None


@contextlib.contextmanager
def _workers_skip_main_module() -> Iterator[None]:
    """Start worker processes without importing the caller's ``__main__`` in them.

    forkserver and spawn children re-import the main script so that they can find functions defined
    there; ours need only this module. A user's script without ``if __name__ == "__main__":`` would
    otherwise run again in every worker (a second ``greenadapt.adapt`` that found the first one's lock
    and printed its traceback). Hiding where ``__main__`` came from, only while the executor starts its
    processes, makes them skip it.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    had_file, file = "__file__" in main.__dict__, main.__dict__.pop("__file__", None)
    spec, main.__spec__ = getattr(main, "__spec__", None), None
    try:
        yield
    finally:
        if had_file:
            main.__file__ = file
        main.__spec__ = spec


def _init_worker(normalizer: str | None, pre_tokenizer: str | None) -> None:
    global _WORKER_SPLITTER
    _WORKER_SPLITTER = WordSplitter(TextRules(normalizer, pre_tokenizer))


@dataclass
class _ChunkResult:
    text: str  # lines joined with "\n", with a final "\n" (or "" when no words)
    lines: int
    tokens: int
    counts: dict[str, int]
    replaced_chars: int


def _process_chunk(chunk: str, splitter: WordSplitter | None = None) -> _ChunkResult:
    splitter = splitter or _WORKER_SPLITTER
    assert splitter is not None, "worker not initialised"
    before = splitter.replaced_chars
    kept = list(_cut_long_lines(line for line in splitter.split_text(chunk) if line))
    if not kept:
        return _ChunkResult("", 0, 0, {}, splitter.replaced_chars - before)
    text = "\n".join(kept)
    tokens = text.count(" ") + len(kept)
    counts = collections.Counter(text.replace("\n", " ").split(" "))
    return _ChunkResult(text + "\n", len(kept), tokens, counts, splitter.replaced_chars - before)


def _cut_long_lines(lines: Iterable[str]) -> Iterator[str]:
    for line in lines:
        # a line of fewer than 2 * MAX_LINE_WORDS characters cannot be too long
        if len(line) < 2 * MAX_LINE_WORDS or line.count(" ") < MAX_LINE_WORDS:
            yield line
        else:
            words = line.split(" ")
            for start in range(0, len(words), MAX_LINE_WORDS):
                yield " ".join(words[start : start + MAX_LINE_WORDS])


# --------------------------------------------------------------------------
# Driver: read, farm out, write in order, cache


@dataclass(frozen=True)
class PretokenizedCorpus:
    """A cached pre-tokenized corpus: ``path`` is its text, one sentence per line."""

    path: Path
    key: str
    lines: int
    tokens: int
    types: int  # distinct words
    bytes: int  # decompressed input bytes read
    output_bytes: int
    replaced_chars: int
    skipped_records: int
    seconds: float  # wall time of the run that made it
    cached: bool  # True when this call reused an existing cache entry
    skipped_members: int = 0  # archive members not read (links, devices, ../ names, other types)
    long_line_cuts: int = 0  # cuts made in lines longer than corpus.readers.MAX_LINE_BYTES
    replaced_by_source: dict[str, int] = field(default_factory=dict)  # sources that were not UTF-8: invalid sequences

    @property
    def folder(self) -> Path:
        return self.path.parent

    def word_counts(self) -> dict[str, int]:
        """Every word and its count, in first-occurrence order (gensim's scan order)."""
        counts: dict[str, int] = {}
        with open(self.folder / VOCAB_FILE, encoding="utf-8", newline="\n") as handle:
            for line in handle:
                word, _, count = line.rstrip("\n").rpartition("\t")
                counts[word] = int(count)
        return counts

    def stats(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "tokens": self.tokens,
            "types": self.types,
            "bytes": self.bytes,
            "output_bytes": self.output_bytes,
            "replaced_chars": self.replaced_chars,
            "skipped_records": self.skipped_records,
            "skipped_members": self.skipped_members,
            "long_line_cuts": self.long_line_cuts,
            "seconds": self.seconds,
        }


def pretokenize_corpus(
    sources: Sequence[Any],
    tokenizer: Any,
    cache_root: Path,
    *,
    workers: int,
    progress: Progress = NULL_PROGRESS,
    force: bool = False,
) -> PretokenizedCorpus:
    """Pre-tokenize ``sources`` (CorpusSource-like) with ``tokenizer``'s normalizer and pre-tokenizer.

    Reuses ``cache_root/<key>/`` when it holds the same sources processed
    with the same rules (without reading the sources); ``force`` redoes it.
    Raises CorpusError when the corpus yields no words at all.
    """
    import tokenizers

    from greenadapt.corpus import source_identities

    rules = TextRules.from_tokenizer(tokenizer)
    config = {
        "format": PRETOK_FORMAT,
        "normalizer": rules.normalizer,
        "pre_tokenizer": rules.pre_tokenizer,
        "tokenizers": tokenizers.__version__,
    }
    inputs = source_identities(list(sources))
    key = fingerprint("pretok", config, inputs)
    out = Path(cache_root) / key
    # wait=True: another run making the same cache entry will finish it for us.
    with StageRun(kinds.PRETOKENIZED, out, config, inputs, force=force, wait=True, libraries=("tokenizers",)) as run:
        if run.skipped:
            assert run.manifest is not None
            log.info("pre-tokenized corpus cached in %s", out)
            return _from_manifest(out, key, run.manifest, cached=True)
        started = time.perf_counter()
        with resource_errors(out.parent):
            totals = _write_pretokenized(sources, rules, run.tmp, max(1, workers), progress)
        if totals["tokens"] == 0:
            names = ", ".join(_display(s) for s in sources[:3]) + (" ..." if len(sources) > 3 else "")
            raise CorpusError(
                f"the corpus has no words ({totals['lines_read']:,} lines or records read)",
                path=names,
                hint="check that the files are not empty and, for JSON lines/CSV, that --text-field names the text",
            )
        totals["seconds"] = round(time.perf_counter() - started, 3)
        manifest = run.commit(stats=totals)
    seconds = totals["seconds"]
    log.info(
        "pre-tokenized %s lines, %s tokens in %.1f s (%.1f MB/s)",
        f"{totals['lines']:,}",
        f"{totals['tokens']:,}",
        seconds,
        totals["bytes"] / 1e6 / max(seconds, 1e-9),
    )
    return _from_manifest(out, key, manifest, cached=False)


def _display(source: Any) -> str:
    return str(getattr(source, "display", None) or getattr(source, "uri", source))


def _from_manifest(folder: Path, key: str, manifest: Mapping[str, Any], *, cached: bool) -> PretokenizedCorpus:
    s = Manifest.of(manifest, folder).stats
    return PretokenizedCorpus(
        path=folder / CORPUS_FILE,
        key=key,
        lines=int(s["lines"]),
        tokens=int(s["tokens"]),
        types=int(s["types"]),
        bytes=int(s["bytes"]),
        output_bytes=int(s["output_bytes"]),
        replaced_chars=int(s["replaced_chars"]),
        skipped_records=int(s["skipped_records"]),
        seconds=float(s["seconds"]),
        cached=cached,
        skipped_members=int(s.get("skipped_members", 0)),  # caches of older versions lack the last two
        long_line_cuts=int(s.get("long_line_cuts", 0)),
        replaced_by_source=dict(Manifest.of(manifest, folder).section("stats", "replaced_by_source")),
    )


def _iter_chunks(sources: Sequence[Any], stats: Any, replaced_by_source: dict[str, int]) -> Iterator[str]:
    """The corpus as text chunks of about CHUNK_CHARS, cut at line boundaries.

    A source that is not valid UTF-8 is still read (each invalid byte sequence
    becomes U+FFFD) but never silently: one warning per source, and its count
    in ``replaced_by_source`` for the manifest.
    """
    parts: list[str] = []
    size = 0
    for source in sources:
        before = stats.replaced_chars
        for text in source.iter_texts(stats):
            parts.append(text)
            size += len(text) + 1
            if size >= CHUNK_CHARS:
                yield "\n".join(parts)
                parts, size = [], 0
        replaced = stats.replaced_chars - before
        if replaced:
            name = _display(source)
            replaced_by_source[name] = replaced
            log.warning(
                "%s: %s invalid UTF-8 byte sequences replaced with U+FFFD; the text is not UTF-8 "
                "(convert it first, e.g. `iconv -f latin1 -t utf-8`)",
                name,
                f"{replaced:,}",
            )
    if parts:
        yield "\n".join(parts)


def _write_pretokenized(
    sources: Sequence[Any], rules: TextRules, folder: Path, workers: int, progress: Progress
) -> dict[str, Any]:
    from greenadapt.corpus import ReadStats

    stats = ReadStats()
    hints = [s.size_hint() for s in sources]
    known = [h for h in hints if h is not None]
    progress.start("pre-tokenizing", total=sum(known) / 1e6 if len(known) == len(hints) else None, unit="MB")
    totals = {"lines": 0, "tokens": 0, "output_bytes": 0, "replaced": 0}
    counts: dict[str, int] = {}
    started = time.perf_counter()
    replaced_by_source: dict[str, int] = {}
    with open(folder / CORPUS_FILE, "wb") as handle:
        for result in _run_chunks(_iter_chunks(sources, stats, replaced_by_source), rules, workers):
            data = result.text.encode("utf-8")
            handle.write(data)
            totals["output_bytes"] += len(data)
            totals["lines"] += result.lines
            totals["tokens"] += result.tokens
            totals["replaced"] += result.replaced_chars
            get = counts.get
            for word, count in result.counts.items():
                counts[word] = get(word, 0) + count
            elapsed = max(time.perf_counter() - started, 1e-9)
            progress.update(stats.raw_bytes_read / 1e6, tokens_per_s=totals["tokens"] / elapsed)
    with open(folder / VOCAB_FILE, "w", encoding="utf-8", newline="\n") as vocab:
        vocab.writelines(f"{word}\t{count}\n" for word, count in counts.items())
    progress.finish()
    return {
        "lines": totals["lines"],
        "tokens": totals["tokens"],
        "types": len(counts),
        "bytes": stats.bytes_read,
        "output_bytes": totals["output_bytes"],
        "replaced_chars": stats.replaced_chars + totals["replaced"],
        "replaced_by_source": replaced_by_source,
        "skipped_records": stats.skipped_records,
        "skipped_members": stats.skipped_members,
        "long_line_cuts": stats.long_line_cuts,
        "lines_read": stats.units,
        "workers": workers,
    }


def _run_chunks(chunks: Iterable[str], rules: TextRules, workers: int) -> Iterator[_ChunkResult]:
    """Process chunks in order; in ``workers`` processes when there is more than one chunk.

    At most ``2 * workers`` chunks are in flight, so the reader never runs
    ahead of the workers by more than that (unlike ``Pool.imap``, whose
    feeder thread would read the whole corpus into the task queue). If the
    worker processes cannot run (e.g. a ``__main__`` read from stdin that
    children cannot re-import), the work continues in this process.
    """
    from concurrent.futures import Future, ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    iterator = iter(chunks)
    head = list(itertools.islice(iterator, 2))
    pending: collections.deque[tuple[str, Future[_ChunkResult]]] = collections.deque()
    if workers > 1 and len(head) > 1:
        # Not fork: the caller may hold threads (progress bars, torch), and a
        # forked child can inherit a lock held by one of them.
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        executor = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context(method),
            initializer=_init_worker,
            initargs=(rules.normalizer, rules.pre_tokenizer),
        )
        try:
            for chunk in itertools.chain(head, iterator):
                with _workers_skip_main_module():
                    future = executor.submit(_process_chunk, chunk)
                pending.append((chunk, future))
                while len(pending) >= 2 * workers:
                    yield pending[0][1].result()
                    pending.popleft()
            while pending:
                yield pending[0][1].result()
                pending.popleft()
            return
        except BrokenProcessPool as exc:
            log.warning("pre-tokenizing in one process: the worker processes failed (%s)", exc)
            head = [chunk for chunk, _ in pending]
        finally:
            executor.shutdown(wait=True, cancel_futures=True)
    splitter = WordSplitter(rules)
    for chunk in itertools.chain(head, iterator):
        yield _process_chunk(chunk, splitter)
