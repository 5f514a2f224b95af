"""Fine-tuned models as Python objects: ``greenadapt.load(path).predict(texts)``.

What greenadapt reports is mean-pooled inference over both tokenizers; a
plain ``AutoModel`` on the folder sees only the domain tokenizer. The
objects here give the reported behaviour to Python code: they open the
folder through the same code as ``greenadapt predict`` (so the logits are
the same), split raw text into sentences (:mod:`greenadapt.corpus.words`) and words
(the model's own pre-tokenizer, as a training file's words are) and return
results with character offsets into the caller's text.

- :class:`NerModel`: ``predict(texts)`` → per text, entity spans
  ``{start, end, text, label, score}``; ``score`` is the mean over the
  entity's words of the pooled probability of the predicted tag.
- :class:`ClassifierModel`: ``predict(texts, pairs=None)`` →
  ``{label, score, scores}`` per text.
- :class:`QaModel`: ``answer(question, context)`` → the best span
  ``{text, start, end, score}`` over the whole context (any length).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from greenadapt.tasks import get_task
from greenadapt.inference.qa.settings import AnswerSettings, answering_as, qa_options_set
from greenadapt.inference.settings import DEFAULT_LOAD, LoadSettings
from greenadapt.data.metrics import chunks
from greenadapt.errors import UsageError

log = logging.getLogger(__name__)

UNTYPED_ENTITY = "ENTITY"  # the label of an entity whose tags carry no type (bare B/I)


@dataclass(frozen=True)
class Entity:
    """An entity span in the caller's text: ``text[start:end] == self.text``."""

    start: int
    end: int
    text: str
    label: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "text": self.text, "label": self.label, "score": self.score}


class _Labeller:
    """What NER and classification share: the opened folder, the pooling mode and the batch settings.

    ``opened``: one opened folder, or the members of an ensemble (a list), whose label probabilities are averaged.
    """

    def __init__(self, opened: Any, options: LoadSettings = DEFAULT_LOAD) -> None:
        from greenadapt.inference.labelling import ensemble_mode

        self.members: list[Any] = list(opened) if isinstance(opened, list | tuple) else [opened]
        opened = self.members[0]
        self.opened = opened
        self.options = options
        self.pool = options.pool
        # the ensemble's mode, whichever member comes first: a plain member pools every mode with its one view
        self.mode = ensemble_mode(options.pool, any(m.tokenizers.has_domain for m in self.members), opened.folder)
        self.labels: list[str] = list(opened.settings.labels)
        self.folder: Path = opened.folder
        self.task = str(opened.settings.task)
        self.model: Any = opened.model
        self.general_tokenizer: Any = opened.tokenizers.general

    def _probabilities(self, examples: list[Any]) -> np.ndarray:
        """Pooled label probabilities of every output row of ``examples`` (words for NER, examples otherwise)."""
        from greenadapt.data.task_files import TaskFile

        from greenadapt.inference.labelling import softmax

        if not examples:
            return np.zeros((0, len(self.labels)), dtype=np.float32)
        task_file = TaskFile(Path("<text>"), "jsonl", examples, False, {})
        total = None
        for member in self.members:  # an ensemble's output is the mean of its members' probabilities
            units, _ = member.task.units(task_file, member.settings, member.tokenizers)
            mode = self.mode if member.tokenizers.has_domain else "general"
            logits = member.logits(units, examples, mode)
            probabilities = softmax(logits.astype(np.float64))
            total = probabilities if total is None else total + probabilities
        assert total is not None
        return total / len(self.members)

    def __repr__(self) -> str:
        what = f"ensemble of {len(self.members)}: " + ", ".join(str(m.folder) for m in self.members) if len(self.members) > 1 \
            else str(self.folder)
        return f"<{type(self).__name__} {self.task} {what}; {len(self.labels)} labels, pool {self.mode}>"


class NerModel(_Labeller):
    """A fine-tuned NER model: entity spans with character offsets, from mean-pooled logits over both tokenizers."""

    finds_entities = True

    @functools.cached_property
    def _word_pre_tokenizer(self) -> Any:
        return word_pre_tokenizer_of(self.general_tokenizer)

    def predict(self, texts: str | Sequence[str]) -> Any:
        """Entities of each text (a list of :class:`Entity` per text; one list for a single string)."""
        single = isinstance(texts, str)
        batch: list[str] = [texts] if isinstance(texts, str) else list(texts)
        for i, text in enumerate(batch):
            if not isinstance(text, str):
                raise UsageError(f"text {i} is a {type(text).__name__}, not a string", hint="pass str or a list of str")
        sentences = _raw_sentences(batch, self._word_pre_tokenizer)
        tags, scores = self._tag([raw.sentence for raw in sentences])
        result: list[list[Entity]] = [[] for _ in batch]
        for raw, sentence_tags, sentence_scores in zip(sentences, tags, scores, strict=True):
            result[raw.owner] += _entities(batch[raw.owner], raw.starts, raw.ends, sentence_tags, sentence_scores)
        return result[0] if single else result

    def predict_words(self, sentences: Sequence[Sequence[str]]) -> list[list[Entity]]:
        """Entities of pre-split sentences; offsets refer to each sentence's words joined by single spaces."""
        tags, scores = self.tag_words(sentences)
        result = []
        for words, sentence_tags, sentence_scores in zip(sentences, tags, scores, strict=True):
            starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]]).tolist()
            ends = [s + len(w) for s, w in zip(starts, words, strict=True)]
            result.append(_entities(" ".join(words), starts, ends, sentence_tags, sentence_scores))
        return result

    def tag_words(self, sentences: Sequence[Sequence[str]]) -> tuple[list[list[str]], list[np.ndarray]]:
        """Pre-split sentences (lists of words) → per sentence, each word's predicted tag and its probability."""
        from greenadapt.data.task_files import NerSentence

        for i, words in enumerate(sentences):
            if isinstance(words, str) or not words:
                raise UsageError(f"sentence {i} is not a non-empty list of words")
        return self._tag([NerSentence(tuple(words), None, (i + 1,) * len(words)) for i, words in enumerate(sentences)])

    def _tag(self, examples: list[Any]) -> tuple[list[list[str]], list[np.ndarray]]:
        probabilities = self._probabilities(examples)
        best = probabilities.argmax(axis=1)
        labels = self.labels
        tags, scores, position = [], [], 0
        for example in examples:
            rows = np.arange(position, position + len(example.words))
            tags.append([labels[i] for i in best[rows]])
            scores.append(probabilities[rows, best[rows]])
            position += len(example.words)
        return tags, scores


class ClassifierModel(_Labeller):
    """A fine-tuned text (or sentence-pair) classifier, mean-pooled over both tokenizers."""

    finds_entities = False

    def predict(self, texts: str | Sequence[str], pairs: Sequence[str] | None = None) -> Any:
        """``{label, score, scores}`` per text (one dict for a single string)."""
        from greenadapt.data.task_files import TextExample

        single = isinstance(texts, str)
        batch: list[str] = [texts] if isinstance(texts, str) else list(texts)
        if pairs is not None and (isinstance(pairs, str) or len(pairs) != len(batch)):
            raise UsageError("pairs must be a list with one second text per text")
        examples = [TextExample(text, None if pairs is None else pairs[i], None, i + 1) for i, text in enumerate(batch)]
        probabilities = self._probabilities(examples)
        labels = self.labels
        results = []
        for row in probabilities:
            best = int(row.argmax())
            results.append({"label": labels[best], "score": float(row[best]), "scores": dict(zip(labels, map(float, row), strict=True))})
        return results[0] if single else results


class QaModel:
    """A fine-tuned extractive question-answering model over whole contexts (sliding windows, both tokenizers)."""

    task = "qa"

    def __init__(self, opened: Any, answering: AnswerSettings) -> None:
        self.opened = opened
        self.answering = answering

    @property
    def model(self) -> Any:
        return self.opened.runner.model

    @property
    def general_tokenizer(self) -> Any:
        return next(iter(self.opened.tokenizers.values()))

    def answer(self, question: str, context: str, *, n_best: int = 1) -> Any:
        """The best answer ``{text, start, end, score}`` (``None`` for an empty context); with ``n_best`` > 1, a list."""
        answers = self.answer_many([(question, context)], n_best=n_best)[0]
        if n_best == 1:
            return answers[0] if answers else None
        return answers

    def answer_many(self, pairs: Iterable[tuple[str, str]], *, n_best: int = 1) -> list[list[dict[str, Any]]]:
        """n-best answers for each ``(question, context)``; a context shared by several questions is read once."""
        from greenadapt.data.squad import Document, Question
        from greenadapt.inference.qa.answering import answer_questions

        if n_best < 1:
            raise UsageError(f"n_best must be at least 1, got {n_best}")
        pairs = list(pairs)
        by_context: dict[str, list[Question]] = {}
        for i, (question, context) in enumerate(pairs):
            by_context.setdefault(context, []).append(Question(str(i), question, None, False, f"[{i}]"))
        documents = [Document(context, None, f"context {j}", tuple(qs)) for j, (context, qs) in enumerate(by_context.items())]
        results: list[list[dict[str, Any]]] = [[] for _ in pairs]
        for answered, answers in answer_questions(
            self.opened.runner,
            documents,
            self.opened.tokenizers,
            max_length=self.opened.max_length,
            batch_size=self.answering.batch_size,
            n_best=n_best,
            spans=self.answering,
        ):
            results[int(answered.id)] = [
                {"text": a["text"], "start": a["start"], "end": a["end"], "score": a["probability"]} for a in answers
            ]
        return results


@dataclass(frozen=True)
class _RawSentence:
    sentence: Any  # NerSentence of the words
    starts: tuple[int, ...]  # character offsets of the words in the caller's text
    ends: tuple[int, ...]
    owner: int  # index of the text it came from


def word_pre_tokenizer_of(tokenizer: Any) -> Any:
    """The pre-tokenizer that makes the model's words from raw text (:func:`greenadapt.families.word_pre_tokenizer`:
    the model's own for WordPiece; for byte-level BPE and Metaspace, one whose words carry no space)."""
    import json

    from greenadapt.families import pre_tokenizer_from_spec, word_pre_tokenizer

    backend = tokenizer.backend_tokenizer
    own = backend.pre_tokenizer
    if own is None:
        return None
    spec = json.loads(own.__getstate__())
    words = word_pre_tokenizer(type(backend.model).__name__, spec)
    return own if words is spec else pre_tokenizer_from_spec(words)


def _raw_sentences(texts: Sequence[str], pre_tokenizer: Any = None) -> list[_RawSentence]:
    """Every sentence of every text, as words with their offsets.

    Words are what the model's own pre-tokenizer (BERT's: whitespace, then each
    punctuation character) makes of the sentence, as the words of a training
    file are; without one, :func:`greenadapt.corpus.words.split_words`.
    """
    from greenadapt.corpus.words import split_sentences, split_words
    from greenadapt.data.task_files import NerSentence

    sentences = []
    for owner, text in enumerate(texts):
        for start, end in split_sentences(text):
            if pre_tokenizer is not None:
                spans = [(a, b) for _, (a, b) in pre_tokenizer.pre_tokenize_str(text[start:end]) if b > a]
            else:
                words = split_words(text[start:end])
                spans = list(zip(words.starts.tolist(), words.ends.tolist(), strict=True))
            if not spans:
                continue
            starts = tuple(a + start for a, _ in spans)
            ends = tuple(b + start for _, b in spans)
            tokens = tuple(text[s:e] for s, e in zip(starts, ends, strict=True))
            sentences.append(_RawSentence(NerSentence(tokens, None, (owner + 1,) * len(tokens)), starts, ends, owner))
    return sentences


def _entities(text: str, starts: Sequence[int], ends: Sequence[int], tags: Sequence[str], scores: np.ndarray) -> list[Entity]:
    """The entities of one sentence's word tags (conlleval chunks, as scored), with offsets into ``text``."""
    return [
        Entity(starts[first], ends[last], text[starts[first] : ends[last]], kind or UNTYPED_ENTITY,
               float(np.mean(scores[first : last + 1])))
        for first, last, kind in chunks(tags)
    ]


def open_ensemble(founds: Sequence[tuple[Path, Any]], *, options: LoadSettings = DEFAULT_LOAD) -> NerModel | ClassifierModel | QaModel:
    """One fine-tuned folder (as :func:`open_model`), or several as one model: the mean of their probabilities."""
    from greenadapt.inference.labelling import check_ensemble, open_finetuned

    options.configure_process()  # once, for every kind of model (QA's too)
    if len(founds) == 1:
        return open_model(*founds[0], options=options)
    check_ensemble(founds)
    refuse_qa_options(options, "an ensemble")
    options.check()
    members = [open_finetuned(folder, settings, options) for folder, settings in founds]
    kind = NerModel if get_task(founds[0][1].task).finds_entities else ClassifierModel
    return kind(members, options)


def open_model(folder: Path, settings: Any, *, options: LoadSettings = DEFAULT_LOAD) -> NerModel | ClassifierModel | QaModel:
    """The object for a fine-tuned folder as :func:`greenadapt.inference.labelling.find_model_folder` found it.

    ``options``: :class:`~greenadapt.inference.qa.settings.LoadOptions` (``greenadapt.load``'s) or any command's
    :class:`LoadSettings`; a QA folder answers by what they declare alike (:func:`answering_as`)."""
    from greenadapt.inference.labelling import open_finetuned

    task = get_task(settings.task)
    if task.answers_questions:
        from greenadapt.artifacts.pretrained import resolve_model
        from greenadapt.inference.qa.answering import open_qa, resolve_qa_settings

        qa = answering_as(options)
        return QaModel(open_qa(resolve_qa_settings(resolve_model(str(folder)), qa), qa), qa)
    refuse_qa_options(options, f"{settings.task} models")
    options.check()
    opened = open_finetuned(folder, settings, options)
    kind = NerModel if task.finds_entities else ClassifierModel
    return kind(opened, options)


def refuse_qa_options(options: LoadSettings, what: str) -> None:
    given = qa_options_set(options)
    if given:
        raise UsageError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for question-answering models, not {what}",
                         hint="leave it out" if len(given) == 1 else "leave them out")
