"""Answering questions over whole documents: the part of QA that ``greenadapt qa``, the Python API
(``greenadapt.load``) and QA training's dev evaluation share.

Per document and tokenizer the context is tokenized once; every question
then becomes one logit job per tokenizer (``greenadapt.inference.qa.infer``), the
context-level logits are max-pooled to words, averaged over the
tokenizers (``--pool mean``) and searched for the best span.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from greenadapt.errors import UsageError
from greenadapt.progress import NULL_PROGRESS, Progress

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.corpus.words import Words
    from greenadapt.data.squad import Document, Question
    from greenadapt.inference.qa.infer import LogitJob, SpecialIds
    from greenadapt.inference.qa.settings import AnswerSettings, AnswerSpanSettings

log = logging.getLogger(__name__)

MEMORY_VIEW = "gmap-general"  # G-MAP: the general model's own tokenization of a document


@dataclass
class TokenizedContext:
    """One document under one tokenizer: wordpiece ids and the word each piece lies in."""

    ids: np.ndarray
    piece_word: np.ndarray
    special: SpecialIds


@dataclass
class PreparedDocument:
    document: Document
    words: Words
    contexts: dict[str, TokenizedContext]
    questions: dict[str, dict[str, np.ndarray]]  # question id -> tokenizer -> question ids

    @property
    def answerable(self) -> bool:
        return len(self.words) > 0 and all(len(ctx.ids) > 0 for ctx in self.contexts.values())


@dataclass
class _Open:
    """A question waiting for the logits of its remaining tokenizers."""

    prepared: PreparedDocument
    question: Question
    word_logits: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


class DocumentPreparer:
    """Tokenizes contexts (once per document and tokenizer) and questions (truncated to fit)."""

    def __init__(self, tokenizers: dict[str, Any], max_length: int) -> None:
        from greenadapt.inference.qa.infer import SpecialIds
        from greenadapt.inference.qa.windows import max_question_length
        from greenadapt.modeling.units import shared_backend

        self.tokenizers = tokenizers
        # truncation off: a saved one (all-MiniLM-L6-v2's 128 wordpieces) would cut a whole paper to its first window
        self.backends = {name: shared_backend(tok) for name, tok in tokenizers.items()}
        self.max_question = max_question_length(max_length)
        self.truncated_questions = 0
        self.context_pieces = dict.fromkeys(tokenizers, 0)
        self.special = {
            name: SpecialIds(tok.cls_token_id, tok.sep_token_id, tok.pad_token_id if tok.pad_token_id is not None else 0)
            for name, tok in tokenizers.items()
        }

    def prepare(self, document: Document) -> PreparedDocument:
        import numpy as np

        from greenadapt.corpus.words import split_words
        from greenadapt.inference.qa.words import wordpiece_words

        words = split_words(document.context)
        contexts: dict[str, TokenizedContext] = {}
        questions: dict[str, dict[str, np.ndarray]] = {q.id: {} for q in document.questions}
        texts = [q.text for q in document.questions]
        for name, backend in self.backends.items():
            encoding = backend.encode(document.context, add_special_tokens=False)
            offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
            contexts[name] = TokenizedContext(
                np.asarray(encoding.ids, dtype=np.int64),
                wordpiece_words(words, offsets[:, 0], offsets[:, 1]),
                self.special[name],
            )
            self.context_pieces[name] += len(encoding.ids)
            for question, encoded in zip(document.questions, backend.encode_batch(texts, add_special_tokens=False), strict=True):
                ids = np.asarray(encoded.ids, dtype=np.int64)
                if len(ids) > self.max_question:
                    self.truncated_questions += 1
                    ids = ids[: self.max_question]
                questions[question.id][name] = ids
        return PreparedDocument(document, words, contexts, questions)


def answer_questions(
    runner: Any,
    documents: list[Document],
    tokenizers: dict[str, Any],
    *,
    max_length: int,
    batch_size: int,
    n_best: int,
    spans: AnswerSpanSettings,
    progress: Progress = NULL_PROGRESS,
    stats: dict[str, Any] | None = None,
) -> Iterator[tuple[Question, list[dict[str, Any]]]]:
    """Yield ``(question, n-best answers)`` for every question, in completion order.

    ``tokenizers`` maps names to tokenizers whose word logits are averaged
    (one entry: that tokenizer alone). Questions on an empty context get no
    answers. ``stats`` (when given) receives window and tokenization counts.
    """
    from greenadapt.inference.qa.answer import nbest_answers
    from greenadapt.inference.qa.infer import InferenceStats, stream_logits
    from greenadapt.inference.qa.words import word_max

    # G-MAP: the general model reads each window's text under its own tokenizer; when no
    # pooled tokenizer is that one, it is prepared as well (under a name no job uses).
    fused = getattr(runner, "fused", False)
    memory_name = None
    if fused:
        memory_name = next((name for name, tok in tokenizers.items() if tok is runner.memory_tokenizer), MEMORY_VIEW)
    prepared_tokenizers = dict(tokenizers)
    if memory_name == MEMORY_VIEW:
        prepared_tokenizers[MEMORY_VIEW] = runner.memory_tokenizer
    preparer = DocumentPreparer(prepared_tokenizers, max_length)
    open_questions: dict[str, _Open] = {}
    skipped: list[Question] = []
    inference = InferenceStats()
    jobs = _logit_jobs(documents, preparer, tokenizers, memory_name, open_questions, skipped)

    done = 0
    total = sum(len(doc.questions) for doc in documents)
    started = time.perf_counter()
    progress.start("answering", total=total, unit="questions")

    def finished(question: Question, answers: list[dict[str, Any]]) -> tuple[Question, list[dict[str, Any]]]:
        nonlocal done
        done += 1
        progress.update(done, questions_per_s=done / max(time.perf_counter() - started, 1e-9))
        return question, answers

    for job, start, end in stream_logits(runner, jobs, max_length=max_length, batch_size=batch_size, stats=inference):
        while skipped:
            yield finished(skipped.pop(), [])
        qid, name = job.key
        entry = open_questions[qid]
        words, piece_word = entry.prepared.words, entry.prepared.contexts[name].piece_word
        entry.word_logits[name] = (word_max(start, piece_word, len(words)), word_max(end, piece_word, len(words)))
        if len(entry.word_logits) < len(tokenizers):
            continue
        del open_questions[qid]
        word_start, word_end = pool_word_logits(list(entry.word_logits.values()))
        answers = nbest_answers(
            entry.prepared.document.context, words, word_start, word_end, spans=spans, n_best=n_best
        )
        yield finished(entry.question, answers)
    while skipped:
        yield finished(skipped.pop(), [])
    progress.finish()
    if preparer.truncated_questions:
        log.warning("%d question(s) longer than %d wordpieces cut to fit the windows", preparer.truncated_questions, preparer.max_question)
    if stats is not None:
        padding = round(inference.padding / inference.positions, 4) if inference.positions else 0.0
        stats.update(windows=inference.windows, batches=inference.batches, padding_fraction=padding,
                     context_wordpieces=dict(preparer.context_pieces), truncated_questions=preparer.truncated_questions)


def _logit_jobs(
    documents: list[Document],
    preparer: DocumentPreparer,
    tokenizers: dict[str, Any],
    memory_name: str | None,
    open_questions: dict[str, _Open],
    skipped: list[Question],
) -> Iterator[LogitJob]:
    """One job per question and pooled tokenizer; records each question in ``open_questions``, or in ``skipped``
    when its context has no words."""
    from greenadapt.inference.qa.infer import LogitJob, MemorySource

    for document in documents:
        if not document.questions:
            continue
        prepared = preparer.prepare(document)
        if not prepared.answerable:
            skipped.extend(document.questions)
            continue
        for question in document.questions:
            open_questions[question.id] = _Open(prepared, question)
            for name, context in prepared.contexts.items():
                if name not in tokenizers:
                    continue  # the general model's own view, read as memory only
                memory = None
                if memory_name is not None and name != memory_name:
                    general = prepared.contexts[memory_name]
                    memory = MemorySource(
                        prepared.questions[question.id][memory_name], general.ids, general.piece_word, context.piece_word, general.special
                    )
                yield LogitJob((question.id, name), prepared.questions[question.id][name], context.ids, context.special, memory)


def pool_word_logits(per_tokenizer: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Mean over tokenizers of word-level (start, end) logits; a word no piece covers (-inf) stays -inf."""
    import numpy as np

    if len(per_tokenizer) == 1:
        return per_tokenizer[0]
    start = np.asarray(np.mean([pair[0] for pair in per_tokenizer], axis=0, dtype=np.float32))
    end = np.asarray(np.mean([pair[1] for pair in per_tokenizer], axis=0, dtype=np.float32))
    return start, end


@dataclass(frozen=True)
class SettledQa:
    """What the answer settings mean for one model folder, settled before any weights are loaded."""

    folder: Any  # greenadapt.artifacts.model_folder.ExpandedModel
    pool: str
    max_length: int
    device: Any  # None: ONNX Runtime on the CPU, which takes the batches as numpy arrays (no torch)


@dataclass
class OpenedQa:
    """A question-answering model on its device, with the tokenizers its pooling mode runs."""

    runner: Any  # greenadapt.inference.qa.infer.QaRunner (its .model is the model)
    tokenizers: dict[str, Any]  # name -> tokenizer, the ones whose word logits are averaged
    max_length: int


def resolve_qa_settings(ref: Any, options: AnswerSettings) -> SettledQa:
    """The pooling mode, window length and device ``options`` mean for the model ``ref`` (its tokenizers read once); the
    runtime is chosen first, so that ONNX Runtime gets no torch device (None) and answering imports no torch."""
    from greenadapt.artifacts.model_folder import ExpandedModel
    from greenadapt.inference.default_runtime import chosen_runtime
    from greenadapt.machine.devices import pick_device
    from greenadapt.modeling.gmap import wiring as gmap
    from greenadapt.inference.qa.model import resolve_pool

    fused = gmap.is_gmap_folder(ref.path)
    if options.general_model is not None and not fused:
        raise UsageError("--general-model is for G-MAP models; this one has no gmap_config.json", path=ref.path,
                         hint="leave --general-model out")
    folder = ExpandedModel.open(ref, inference=True)
    pool = resolve_pool(options.pool, folder.tokenizers, ref.path)
    onnx = chosen_runtime(options.runtime, options.quantize, options.device, precision=options.precision, exportable=not fused) == "onnx"
    device = None if onnx else pick_device(options.device, allow_mps=False)
    return SettledQa(folder, pool, folder.checked_length(options.max_length), device)


def _open_qa_onnx(settings: SettledQa, options: AnswerSettings) -> OpenedQa:
    """A question-answering folder run by ONNX Runtime on the CPU: the same windows and views as the torch path."""
    from greenadapt.inference.onnx_runtime import onnx_model
    from greenadapt.inference.qa.infer import QaRunner
    from greenadapt.inference.qa.model import load_qa_model
    from greenadapt.machine.devices import pick_device

    folder = settings.folder
    model = onnx_model(folder.path, lambda: load_qa_model(folder.ref, pick_device("cpu", allow_mps=False)), quantize=options.quantize)
    folder.check_rows(model.get_input_embeddings().num_embeddings)
    return OpenedQa(QaRunner(model, None), folder.tokenizers.for_pool(settings.pool), settings.max_length)


def open_qa(settings: SettledQa, options: AnswerSettings) -> OpenedQa:
    """Load a question-answering model folder (plain, expanded or G-MAP) for answering: the one opener
    ``greenadapt qa`` and the Python API share."""
    from greenadapt.modeling.gmap import wiring as gmap
    from greenadapt.inference.qa.infer import QaRunner
    from greenadapt.inference.qa.model import load_qa_model

    folder, device = settings.folder, settings.device
    if device is None:
        return _open_qa_onnx(settings, options)
    tokenizers = folder.tokenizers
    if gmap.is_gmap_folder(folder.path):
        qa_model, memory_tokenizer, memory_length = gmap.load_fused(folder.path, general_model=options.general_model)
        qa_model.to(device)
        runner = QaRunner(qa_model, device, precision=options.precision, memory_tokenizer=memory_tokenizer or tokenizers.general,
                          memory_length=memory_length)
    else:
        qa_model = load_qa_model(folder.ref, device)
        runner = QaRunner(qa_model, device, precision=options.precision)
    folder.check_rows(qa_model.get_input_embeddings().num_embeddings)
    return OpenedQa(runner, tokenizers.for_pool(settings.pool), settings.max_length)
