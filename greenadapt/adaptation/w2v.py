"""The ``w2v`` stage: CBOW word2vec on a domain corpus, in the model's own words.

The corpus is pre-tokenized with the target model's normalizer and
pre-tokenizer (:mod:`greenadapt.corpus.pretokenize`, cached) and fed to gensim's
``corpus_file`` mode: CBOW with negative sampling, gensim's defaults
except ``vector_size`` (the model's hidden size unless ``--dim``).

Output folder (a ``w2v`` stage)::

    vectors.bin    word2vec binary format, gensim's order (most frequent first)
    counts.tsv     word<TAB>count, same order, UTF-8, no header
    manifest.json  config, inputs, stats, library versions, cost

Equivalence with plain gensim. The vocabulary is built from the word
counts collected during pre-tokenization (in first-occurrence order, as
gensim's own scan collects them) instead of a second pass over the text,
and training is ``Word2Vec.train(corpus_file=...)`` with the same
``total_examples``/``total_words`` gensim would use: with one worker the
vectors are bit-identical to ``Word2Vec(corpus_file=<pretokenized>)``.

Long lines. gensim's ``corpus_file`` reader fills a batch with lines
until it holds *more* than 10,000 words (the line that crosses the limit
stays in the batch), and the training loop then stops after 10,000
words that survive sub-sampling and the vocabulary: the rest of the batch
is skipped silently. Measured with gensim 4.4 and no sub-sampling, lines
of 6,000 words lose 17% of their words per epoch, lines of 9,000 words 43%. Pre-tokenized
lines are therefore cut at 1,000 words (word2vec.c's sentence limit, so
the only effect is that context windows do not reach across a cut). With
ordinary text, sub-sampling of frequent words keeps a batch's trained
words well under 10,000 and nothing is lost; in the worst case (almost no
word sub-sampled, e.g. ``sample=0``) a batch can still lose up to the
length of its last line. The stage compares the words gensim trained with
the number sub-sampling predicts and logs a warning (and records
``words_dropped_estimate``) when more than 2% are missing.

Several workers: gensim's threads start at byte offsets of the file and
each stops after its share of words, so a few words near the offsets are
seen once more or once less per epoch (gensim's approximation).

Determinism. With ``workers=1`` and a fixed seed two runs give identical
``vectors.bin`` in any process: gensim seeds its vectors from ``seed``, and
the word hash it uses for per-word seeds (``hashfxn``, Python's randomized
``hash`` by default) is replaced by a stable one. With more workers thread
scheduling makes results vary slightly, which is why ``workers`` is part
of the stage's fingerprint.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.artifacts import kinds
from greenadapt.artifacts import workspace
from greenadapt.artifacts.manifest import Manifest
from greenadapt.artifacts.pretrained import hidden_size, load_backend_tokenizer, resolve_model
from greenadapt.artifacts.stage import StageOutcome, StageRun, sweep_stale_temporaries
from greenadapt.corpus.pretokenize import PRETOK_FORMAT, PretokenizedCorpus, pretokenize_corpus
from greenadapt.corpus.word_splitter import TextRules
from greenadapt.errors import CorpusError, StageError
from greenadapt.machine.cores import available_cores
from greenadapt.progress import Progress
from greenadapt.options import DEFAULT_RUN, Run

if TYPE_CHECKING:
    from greenadapt.adaptation.settings import AdaptSettings, W2vSettings, Word2vecSettings

log = logging.getLogger(__name__)

VECTORS_FILE = "vectors.bin"
COUNTS_FILE = "counts.tsv"
_GENSIM_LOGGER = "gensim.models.word2vec"
_DROP_WARNING = 0.02  # beyond sampling noise on any corpus worth training on




# CBOW's context window, negative samples and down-sampling threshold: the paper's, fixed (recorded in every fingerprint).
WINDOW = 5
NEGATIVE = 5
SAMPLE = 1e-3


def w2v_workers(settings: Word2vecSettings) -> int:
    """``--workers``, else the cores this process may use."""
    return settings.workers if settings.workers is not None else available_cores()


def stable_hash(text: str) -> int:
    """A hash that is the same in every process (unlike ``hash``), for gensim's ``hashfxn``."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def _write_vectors(
    pretok: Any, model_path: Path, settings: W2vSettings | AdaptSettings, source: str, dim: int, workers: int, dest: Path,
    progress: Progress
) -> tuple[int, dict[str, Any]]:
    """The stage's output by its vector source: word2vec vectors, the model's contextual ones, or counts only ("none")."""
    if source == "context":
        return _write_context_vectors(pretok, model_path, settings, dest, progress)
    if source == "word2vec":
        vectors, train_stats = _train(pretok, dim=dim, settings=settings, workers=workers, progress=progress)
        vectors.save_word2vec_format(str(dest / VECTORS_FILE), binary=True)
        _write_counts(vectors, dest / COUNTS_FILE)
        return len(vectors), train_stats
    vocab_size = _write_corpus_counts(pretok, settings.min_count, dest / COUNTS_FILE, max_vocab=settings.max_vocab)
    return vocab_size, {"word2vec_trained": False}


def w2v_stage(settings: W2vSettings | AdaptSettings, run: Run = DEFAULT_RUN, *, source: str = "word2vec") -> StageOutcome:
    """Train word2vec on ``settings.corpus`` in ``settings.model``'s words; skip when an up-to-date output exists.

    ``source``: word2vec (CBOW, the paper), context (the model's own contextual vectors) or none (the corpus counts alone,
    for methods that read no vectors); ``w2v`` takes it from ``--source``/``--no-vectors``, ``adapt`` from the method."""
    workdir, out, force, wait, progress = run.workdir, run.out, run.force, run.wait, run.progress
    from greenadapt.adaptation.settings import W2vSettings
    from greenadapt.artifacts.destination import check_destination, corpus_reads, protected
    from greenadapt.corpus import resolve_corpus, source_identities

    corpus, text_fields = list(settings.corpus), list(settings.text_fields or ()) or None
    sources = resolve_corpus(corpus, text_fields=text_fields)
    model_ref = resolve_model(settings.model)
    if source == "context":  # a layer the model lacks, said before the corpus is read
        from greenadapt.adaptation.context_vectors import check_context_layer

        check_context_layer(settings.context_layer, int(model_ref.config().get("num_hidden_layers") or 0))
    tokenizer = load_backend_tokenizer(model_ref.path)
    rules = TextRules.from_tokenizer(tokenizer)
    dim = settings.dim or hidden_size(model_ref)
    workers = w2v_workers(settings)
    root = workspace.workdir(workdir)
    # Counts alone are another output than trained vectors: they must not replace each other in the workspace.
    default_name = {"none": "w2v-counts", "context": "w2v-context"}.get(source, "w2v")
    config = _stage_config(settings, source, dim, workers, text_fields, model_ref.identity(), rules.flags())
    if out is not None:
        out_dir = Path(out)
    else:  # a second configuration goes beside the first (w2v+epochs-10), never over it
        # The context options' own defaults: a second --context-layer must name its own folder, not "+defaults".
        defaults = W2vSettings(corpus=settings.corpus)
        out_dir = workspace.stage_variant_dir(
            workspace.stage_dir(root, corpus, workspace.model_folder_name(root, corpus, model_ref), default_name), config, force=force,
            defaults=lambda: _stage_config(defaults, source, hidden_size(model_ref), w2v_workers(defaults), text_fields,
                                           model_ref.identity(),
                                           rules.flags()),
        )
    check_destination(
        out_dir, kind="w2v", force=force, workspace=root,
        reads=[*protected("the base --model", model_ref.path), *corpus_reads(corpus)],
    )
    inputs = source_identities(sources)
    # A killed pre-tokenization leaves its temporary in the shared cache; this run may never reach that stage.
    sweep_stale_temporaries(root / "cache" / "pretok")
    with StageRun(kinds.W2V, out_dir, config, inputs, force=force, wait=wait, libraries=_libraries(source)) as stage:
        if stage.skipped:
            assert stage.manifest is not None
            return StageOutcome(stage.out, stage.manifest, skipped=True, skip_reason=stage.skip_reason)
        _import_gensim_beside(source)  # after the skip: a run that is up to date never pays the import
        pretok = pretokenize_corpus(
            sources, tokenizer, root / "cache" / "pretok", workers=workers, progress=progress, force=force
        )
        vocab_size, train_stats = _write_vectors(pretok, model_ref.path, settings, source, dim, workers, stage.tmp, progress)
        manifest = stage.commit(stats={**_corpus_stats(pretok), "vocab_size": vocab_size, **train_stats})
    log.info("w2v: %s words%s -> %s", f"{vocab_size:,}", f" x {dim} dims ({source})" if source != "none"
             else " counted (no vectors)", stage.out)
    return StageOutcome(stage.out, manifest, skipped=False)


def _corpus_stats(pretok: Any) -> dict[str, Any]:
    """What pre-tokenization saw of the corpus, for the manifest."""
    return {
        "lines": pretok.lines, "tokens": pretok.tokens, "types": pretok.types, "bytes": pretok.bytes,
        "replaced_chars": pretok.replaced_chars, "replaced_by_source": pretok.replaced_by_source,
        "skipped_records": pretok.skipped_records, "skipped_members": pretok.skipped_members, "long_line_cuts": pretok.long_line_cuts,
        "pretok_seconds": pretok.seconds, "pretok_cached": pretok.cached, "pretok_cache": str(pretok.folder.absolute()),
    }


def _libraries(source: str) -> tuple[str, ...]:
    """The libraries the manifest records: word vectors from the model's own hidden states (``--source
    context``) run it with torch and transformers; word2vec reads the model's tokenizer with tokenizers alone."""
    return ("gensim", "numpy", "tokenizers", *(("torch", "transformers") if source == "context" else ()))


def _import_gensim_beside(source: str) -> None:
    """Start importing gensim on a thread when word2vec will train: pre-tokenization's main thread mostly
    waits on its worker processes, and the import (about a second, scipy included) would otherwise follow
    it on the critical path."""
    if source == "word2vec":
        _import_beside("gensim.models")


def _import_beside(module: str) -> None:
    import importlib
    import threading

    def load() -> None:
        try:
            importlib.import_module(module)
        except Exception as error:  # the main thread's own import reports it
            log.debug("importing %s beside pre-tokenization failed: %s", module, error)

    threading.Thread(target=load, name=f"greenadapt-import-{module}", daemon=True).start()


def _train(
    pretok: PretokenizedCorpus, *, dim: int, settings: Word2vecSettings, workers: int, progress: Progress
) -> tuple[Any, dict[str, Any]]:
    from gensim.models import Word2Vec

    model = Word2Vec(
        vector_size=dim,
        window=WINDOW,
        min_count=settings.min_count,
        max_final_vocab=settings.max_vocab,
        workers=workers,
        sg=0,
        hs=0,
        negative=NEGATIVE,
        sample=SAMPLE,
        seed=settings.seed,
        epochs=settings.epochs,
        hashfxn=stable_hash,
    )
    started = time.perf_counter()
    model.build_vocab_from_freq(pretok.word_counts(), corpus_count=pretok.lines)
    vocab_seconds = time.perf_counter() - started
    if len(model.wv) == 0:
        raise CorpusError(
            f"no word occurs at least {settings.min_count} times in the corpus ({pretok.tokens:,} tokens)",
            hint="lower --w2v-min-count or use a larger corpus",
        )
    started = time.perf_counter()
    with _training_progress(progress, pretok.tokens, settings.epochs) as callbacks:
        trained, raw = model.train(
            corpus_file=str(pretok.path),
            total_examples=model.corpus_count,
            total_words=pretok.tokens,
            epochs=settings.epochs,
            start_alpha=model.alpha,
            end_alpha=model.min_alpha,
            callbacks=callbacks,
        )
    seconds = time.perf_counter() - started
    expected = settings.epochs * _expected_trained_words(model.wv)
    dropped = max(0.0, 1.0 - trained / expected) if expected else 0.0
    if dropped > _DROP_WARNING:
        log.warning(
            "gensim trained %.1f%% fewer words than sub-sampling predicts (%s of about %s): its corpus_file "
            "reader skips the end of a batch once 10,000 words are trained; expect this only with sample=0 "
            "or a corpus of almost only rare words",
            100 * dropped,
            f"{trained:,}",
            f"{expected:,.0f}",
        )
    return model.wv, {
        "words_trained": int(trained),
        "words_expected": round(expected),
        "words_dropped_estimate": round(dropped, 4),
        "raw_words": int(raw),
        "words_per_s": round(raw / max(seconds, 1e-9)),
        "vocab_seconds": round(vocab_seconds, 3),
        "train_seconds": round(seconds, 3),
    }


def _expected_trained_words(vectors: Any) -> float:
    """Words per epoch that survive sub-sampling, in expectation: sum of count x keep probability."""
    import numpy as np

    keep = vectors.expandos["sample_int"].astype(np.float64) / 2**32  # gensim's keep threshold
    return float(np.dot(vectors.expandos["count"].astype(np.float64), np.minimum(keep, 1.0)))


def _stage_config(
    settings: W2vSettings | AdaptSettings, source: str, dim: int, workers: int, text_fields: Sequence[str] | None, model: dict[str, Any],
    rules: dict[str, Any],
) -> dict[str, Any]:
    """What the w2v stage's fingerprint records: every option that changes its output."""
    config: dict[str, Any] = {
        "algorithm": "cbow",
        "hs": 0,
        "dim": dim,
        "epochs": settings.epochs,
        "min_count": settings.min_count,
        "workers": workers,
        "seed": settings.seed,
        "window": WINDOW,
        "negative": NEGATIVE,
        "sample": SAMPLE,
        "text_fields": list(text_fields) if text_fields else None,
        "model": model,
        **rules,
        "pretok_format": PRETOK_FORMAT,
    }
    if settings.max_vocab is not None:  # recorded only when set, so earlier outputs keep their fingerprints
        config["max_vocab"] = settings.max_vocab
    if source != "word2vec":
        # Recorded only when not word2vec, so the outputs of word2vec runs keep their fingerprints.
        config.update(dim=None, epochs=None, workers=None, seed=None, window=None, negative=None, sample=None)
        config["vectors"] = False if source == "none" else "context"
        if source == "context":
            from greenadapt.adaptation.context_vectors import LINES_PER_BATCH

            config["context"] = {"layer": settings.context_layer, "cap": settings.context_cap, "max_tokens": settings.context_max_tokens,
                                 "batch_lines": LINES_PER_BATCH}
    return config


def _write_context_vectors(
    pretok: PretokenizedCorpus, model_path: Path, settings: W2vSettings | AdaptSettings, dest: Path, progress: Progress
) -> tuple[int, dict[str, Any]]:
    """vectors.bin and counts.tsv from the base model's contextual representations (same words in both)."""
    from greenadapt.adaptation.context_vectors import context_vectors
    from greenadapt.adaptation.vectors import write_counts, write_word2vec_binary

    _write_corpus_counts(pretok, settings.min_count, dest / COUNTS_FILE, max_vocab=settings.max_vocab)
    from greenadapt.adaptation.vectors import read_counts

    counts = read_counts(dest / COUNTS_FILE)
    words, vectors, stats = context_vectors(pretok.path, counts, model_path, settings=settings, progress=progress)
    write_word2vec_binary(dest / VECTORS_FILE, words, vectors)
    write_counts(dest / COUNTS_FILE, [(w, counts[w]) for w in words])
    return len(words), {"vector_source": "context", "context": stats}


def effective_min_count(counts: dict[str, int], min_count: int, max_vocab: int | None) -> int:
    """gensim's rule for ``max_final_vocab``: the smallest count that keeps at most ``max_vocab`` words
    (all words tied at the cut go, so the vocabulary may come out smaller), never below ``min_count``."""
    if max_vocab is None or max_vocab >= len(counts):
        return min_count
    ranked = sorted(counts.values(), reverse=True)
    return max(min_count, ranked[max_vocab] + 1)


def _write_corpus_counts(pretok: PretokenizedCorpus, min_count: int, path: Path, *, max_vocab: int | None = None) -> int:
    """counts.tsv of the words seen at least ``min_count`` times (raised for ``max_vocab``), most frequent first (gensim's order)."""
    all_counts = pretok.word_counts()
    floor = effective_min_count(all_counts, min_count, max_vocab)
    counts = [(w, c) for w, c in all_counts.items() if c >= floor]
    if not counts:
        raise CorpusError(
            f"no word occurs at least {min_count} times in the corpus ({pretok.tokens:,} tokens)",
            hint="lower --w2v-min-count or use a larger corpus",
        )
    counts.sort(key=lambda wc: (-wc[1], wc[0]))
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(f"{word}\t{count}\n" for word, count in counts)
    return len(counts)


def _write_counts(vectors: Any, path: Path) -> None:
    counts = vectors.expandos["count"]
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        handle.writelines(f"{word}\t{int(count)}\n" for word, count in zip(vectors.index_to_key, counts, strict=True))


@contextlib.contextmanager
def _training_progress(progress: Progress, tokens: int, epochs: int) -> Iterator[list[Any]]:
    """Feed gensim's progress into ``progress``: per epoch from a callback, within one from its log.

    gensim reports within-epoch progress only through its logger
    (``EPOCH n - PROGRESS: at p% examples, w words/s``). A logger filter
    reads those records; the logger is opened to INFO only for the
    duration and the filter passes on just what the caller's logging
    configuration would have shown, so the console is no noisier.
    """
    from gensim.models.callbacks import CallbackAny2Vec

    total = tokens * epochs
    state = {"epochs_done": 0, "started": time.perf_counter()}

    def report(position: float, words_per_s: float | None = None) -> None:
        if words_per_s is None:
            words_per_s = position / max(time.perf_counter() - state["started"], 1e-9)
        progress.update(min(position, total), words_per_s=words_per_s)

    class EpochCounter(CallbackAny2Vec):
        def on_epoch_end(self, model: Any) -> None:
            state["epochs_done"] += 1
            report(state["epochs_done"] * tokens)

    logger = logging.getLogger(_GENSIM_LOGGER)
    shown_from = logger.getEffectiveLevel()

    def observe(record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        if "PROGRESS: at" in message and message.startswith("EPOCH") and isinstance(record.args, tuple):
            with contextlib.suppress(TypeError, ValueError, IndexError):
                args: Any = record.args
                # gensim's own words/s counts the words left after subsampling and the vocabulary cut (a quarter
                # of the corpus' tokens on biomed-10m): against a position in corpus tokens it made the ETA 4x too
                # long. The rate is the position's own, tokens over time.
                report((state["epochs_done"] + float(args[1]) / 100) * tokens)
        return record.levelno >= shown_from

    old_level = logger.level
    logger.addFilter(observe)
    logger.setLevel(min(shown_from, logging.INFO))
    progress.start("word2vec", total=total, unit="words")
    try:
        yield [EpochCounter()]
    finally:
        logger.removeFilter(observe)
        logger.setLevel(old_level)
        progress.finish()


def summary_line(outcome: StageOutcome) -> str:
    """The one-line result the CLI prints."""
    if outcome.skipped:
        return f"w2v: up to date ({outcome.skip_reason.removeprefix('up to date: ')}) -> {outcome.path}"
    manifest = Manifest.of(outcome.manifest, outcome.path)
    stats = manifest.stats
    dim = manifest.config.get("dim") or "no"
    seconds = manifest.cost.get("wall_seconds", 0.0)
    return (
        f"w2v: {stats.get('vocab_size', 0):,} words x {dim} dims from {_human(stats.get('tokens', 0))} tokens "
        f"in {seconds:.0f} s -> {outcome.path}"
    )


def _human(n: int) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.1f}{suffix}"
    return str(n)


def pretokenized_corpus_of(w2v_dir: Path, w2v_manifest: Manifest, corpus: list[str], model_path: Path) -> Path:
    """The pre-tokenized text a w2v output was trained on: the cache entry its manifest names, as long as that
    is a finished entry (exactly the text w2v read, even if the corpus file was touched since), else made
    again from the corpus (its cache entry found again by sources and rules)."""
    from greenadapt.artifacts import kinds
    from greenadapt.artifacts.manifest import load_stage
    from greenadapt.corpus import resolve_corpus
    from greenadapt.corpus.pretokenize import CORPUS_FILE

    cache = w2v_manifest.stats.get("pretok_cache")
    if not cache:
        raise StageError("the w2v manifest does not say where its pre-tokenized corpus is", path=w2v_dir,
                         hint="rerun `greenadapt w2v ... --force`")
    try:
        load_stage(cache, kinds.PRETOKENIZED, checksums=False)  # a full checksum would read the corpus once more
        return Path(cache) / CORPUS_FILE
    except StageError:
        log.info("the pre-tokenized corpus %s is gone or unfinished: pre-tokenizing the corpus again", cache)
    sources = resolve_corpus(corpus, text_fields=w2v_manifest.config.get("text_fields"))
    return pretokenize_corpus(sources, load_backend_tokenizer(model_path), Path(cache).parent, workers=available_cores()).path


def run_w2v(settings: W2vSettings, run: Run) -> StageOutcome:
    """``greenadapt w2v``: the stage from its settings."""
    return w2v_stage(settings, run, source="none" if settings.no_vectors else settings.source)
