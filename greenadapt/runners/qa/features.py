"""QA training windows: ``[CLS] question [SEP] context [SEP]`` with a stride, and where the answer is in each.

The usual transformers SQuAD recipe: windows of at most ``max_length``
wordpieces overlapping by ``doc_stride``, the question cut to
``max_question_tokens`` (and to what the stride leaves room for); a window
whose context does not hold the whole gold answer (and a SQuAD v2 no-answer
question) is labelled with the [CLS] position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from greenadapt.data.squad import SquadData


@dataclass
class Features:
    """The training windows of every question under one tokenizer."""

    input_ids: list[np.ndarray]
    token_type_ids: list[np.ndarray]
    start_positions: np.ndarray
    end_positions: np.ndarray
    question_index: np.ndarray  # which question each window belongs to
    # G-MAP: the general model's input per window (the same question and context span under its tokenizer)
    memory_ids: list[np.ndarray] | None = None
    memory_type_ids: list[np.ndarray] | None = None


def featurize(
    squad: SquadData,
    tokenizer: Any,
    *,
    max_length: int,
    doc_stride: int,
    max_question_tokens: int = 64,
    memory_tokenizer: Any = None,
    memory_length: int = 512,
) -> tuple[Features, int]:
    """Windows and answer positions for every usable question; also how many questions were left out.

    With ``memory_tokenizer`` (G-MAP), each window also gets the general
    model's input: the window itself when ``memory_tokenizer`` is
    ``tokenizer``, else the (cut) question and the window's context span
    (by characters) under ``memory_tokenizer``, at most ``memory_length`` long.
    """
    questions: list[str] = []
    contexts: list[str] = []
    answers: list[tuple[int, int] | None] = []
    for document in squad.documents:
        for question in document.questions:
            gold = next(((a.start, a.text) for a in question.answers or () if a.start is not None), None)
            questions.append(question.text)
            contexts.append(document.context)
            answers.append(None if gold is None else (gold[0], gold[0] + len(gold[1])))
    usable = [i for i, q in enumerate(squad.questions) if answers[i] is not None or q.is_impossible]
    dropped = len(questions) - len(usable)
    if not usable:
        return Features([], [], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)), dropped
    # Cut long questions in the text, at a wordpiece boundary, so the pair encoding below keeps room
    # for doc_stride + 1 context pieces (window_lengths guarantees at least one question piece).
    budget = min(max_question_tokens, max_length - 4 - doc_stride)
    question_offsets = tokenizer([questions[i] for i in usable], add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    cut_questions = [
        questions[i][: offsets[budget - 1][1]] if len(offsets) > budget else questions[i]
        for offsets, i in zip(question_offsets, usable, strict=True)
    ]
    encoded = tokenizer(
        cut_questions, [contexts[i] for i in usable], truncation="only_second", max_length=max_length, stride=doc_stride,
        return_overflowing_tokens=True, return_offsets_mapping=True, return_token_type_ids=True, padding=False,
    )
    features, spans = _windows(encoded, usable, cut_questions, contexts, answers)
    if memory_tokenizer is tokenizer:
        features.memory_ids, features.memory_type_ids = features.input_ids, features.token_type_ids
    elif memory_tokenizer is not None:
        memory = memory_tokenizer(
            [q for q, _ in spans], [c for _, c in spans], truncation="only_second", max_length=memory_length,
            return_token_type_ids=True, padding=False,
        )
        features.memory_ids = [np.asarray(ids, dtype=np.int64) for ids in memory["input_ids"]]
        features.memory_type_ids = [np.asarray(types, dtype=np.int64) for types in memory["token_type_ids"]]
    return features, dropped


def _windows(
    encoded: Any, usable: list[int], cut_questions: list[str], contexts: list[str], answers: list[tuple[int, int] | None]
) -> tuple[Features, list[tuple[str, str]]]:
    """The features of the encoded windows, and each window's (question, context span) for G-MAP's memory."""
    input_ids: list[np.ndarray] = []
    token_types: list[np.ndarray] = []
    starts, ends, owners = [], [], []
    spans: list[tuple[str, str]] = []
    for row, owner in enumerate(encoded["overflow_to_sample_mapping"]):
        sequence = encoded.sequence_ids(row)
        offsets = encoded["offset_mapping"][row]
        context_positions = [k for k, s in enumerate(sequence) if s == 1]
        if context_positions:
            span_text = contexts[usable[owner]][offsets[context_positions[0]][0] : offsets[context_positions[-1]][1]]
        else:
            span_text = ""
        spans.append((cut_questions[owner], span_text))
        span = answers[usable[owner]]
        start = end = 0  # [CLS]: no answer in this window
        if span is not None and context_positions:
            first, last = context_positions[0], context_positions[-1]
            if offsets[first][0] <= span[0] and offsets[last][1] >= span[1]:
                start = next(k for k in context_positions if offsets[k][1] > span[0])
                end = next(k for k in reversed(context_positions) if offsets[k][0] < span[1])
        input_ids.append(np.asarray(encoded["input_ids"][row], dtype=np.int64))
        token_types.append(np.asarray(encoded["token_type_ids"][row], dtype=np.int64))
        starts.append(start)
        ends.append(end)
        owners.append(usable[owner])
    features = Features(
        input_ids,
        token_types,
        start_positions=np.asarray(starts, dtype=np.int64),
        end_positions=np.asarray(ends, dtype=np.int64),
        question_index=np.asarray(owners, dtype=np.int64),
    )
    return features, spans
