"""Reading SQuAD v1.1 / v2.0-style question-answering files.

Accepted shape: ``{"data": [{"title"?: str, "paragraphs": [{"context": str,
"qas": [{"id": str|int, "question": str, "answers"?: [{"text": str,
"answer_start": int}], "is_impossible"?: bool}]}]}], "version"?: str}``
(a bare list of articles is accepted too). Covid-QA uses it with one
paragraph per whole paper and integer ids.

Gold answers whose ``answer_start`` does not point at their text are
common in hand-made sets (234 of Covid-QA's 1,380 are off by a few
characters). They are reported and counted, never fatal: the text is what
the official metrics score, and the offset is repaired to the nearest
occurrence of the text when there is one, which is what training needs.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from greenadapt.errors import DataError, InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GoldAnswer:
    text: str
    start: int | None  # a verified character offset into the context, None when the text is absent
    given_start: Any  # what the file said, kept for the report


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    # None: the file gives no gold (a test file); () with is_impossible: a v2 no-answer question.
    answers: tuple[GoldAnswer, ...] | None
    is_impossible: bool
    where: str  # JSON path, e.g. data[3].paragraphs[0].qas[2]

    @property
    def has_gold(self) -> bool:
        return self.answers is not None


@dataclass(frozen=True)
class Document:
    context: str
    title: str | None
    where: str
    questions: tuple[Question, ...]

    @property
    def is_empty(self) -> bool:
        return not self.context.strip()


@dataclass(frozen=True)
class OffsetIssue:
    question_id: str
    where: str
    text: str
    given_start: Any
    repaired_start: int | None


@dataclass
class SquadData:
    path: Path
    documents: list[Document]
    version: str | None = None
    offset_issues: list[OffsetIssue] = field(default_factory=list)
    gold_answers: int = 0

    @property
    def questions(self) -> list[Question]:
        return [q for doc in self.documents for q in doc.questions]

    @property
    def n_questions(self) -> int:
        return sum(len(doc.questions) for doc in self.documents)

    def answer_texts(self) -> dict[str, list[str]]:
        """Question id → its gold answer texts, for the questions that have gold answers."""
        return {q.id: [answer.text for answer in q.answers] for q in self.questions if q.answers is not None}

    @property
    def empty_documents(self) -> list[Document]:
        return [doc for doc in self.documents if doc.is_empty and doc.questions]

    def limited(self, limit: int | None) -> SquadData:
        """The first ``limit`` questions in file order (documents left empty are dropped)."""
        if limit is None or limit >= self.n_questions:
            return self
        kept: list[Document] = []
        left = limit
        for doc in self.documents:
            if left <= 0:
                break
            if doc.questions:
                kept.append(replace(doc, questions=doc.questions[:left]))
                left -= len(kept[-1].questions)
        ids = {q.id for doc in kept for q in doc.questions}
        issues = [issue for issue in self.offset_issues if issue.question_id in ids]
        golds = sum(len(q.answers or ()) for doc in kept for q in doc.questions)
        return SquadData(self.path, kept, self.version, issues, golds)

    def offset_summary(self) -> dict[str, int]:
        repaired = sum(1 for issue in self.offset_issues if issue.repaired_start is not None)
        return {
            "gold_answers": self.gold_answers,
            "mismatched": len(self.offset_issues),
            "repaired": repaired,
            "text_not_in_context": len(self.offset_issues) - repaired,
        }


def read_squad(path: str | os.PathLike[str]) -> SquadData:
    """Parse a SQuAD-style file; malformed files raise a one-line ``InputError``/``DataError``."""
    file = Path(path)
    if not file.is_file():
        raise InputError("question-answering file not found", path=file, hint="pass a SQuAD-style JSON file to --data")
    raw = file.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"not UTF-8 text (byte {exc.start})", path=file, line=line, hint="save the file as UTF-8") from None
    try:
        root = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"malformed JSON at column {exc.colno}: {exc.msg}",
            path=file,
            line=exc.lineno,
            hint="fix the JSON syntax there (SQuAD format: {\"data\": [{\"paragraphs\": [...]}]})",
        ) from None
    except RecursionError:
        raise InputError("JSON nested too deeply to be a SQuAD file", path=file, line=1,
                         hint="SQuAD format: {\"data\": [{\"paragraphs\": [...]}]}") from None
    return _parse(root, file)


def _parse(root: Any, file: Path) -> SquadData:
    if isinstance(root, dict):
        if "data" not in root:
            raise DataError('no "data" key at the top level', path=file, hint="expected SQuAD format {\"data\": [...]}")
        articles, version = root["data"], root.get("version")
    else:
        articles, version = root, None
    _expect(articles, list, "data", file)
    data = SquadData(file, [], str(version) if version is not None else None)
    seen: dict[str, str] = {}
    for a, article in enumerate(articles):
        where_a = f"data[{a}]"
        _expect(article, dict, where_a, file)
        title = article.get("title")
        paragraphs = _field(article, "paragraphs", list, where_a, file)
        for p, paragraph in enumerate(paragraphs):
            where_p = f"{where_a}.paragraphs[{p}]"
            _expect(paragraph, dict, where_p, file)
            context = _field(paragraph, "context", str, where_p, file)
            qas = _field(paragraph, "qas", list, where_p, file)
            questions = tuple(_question(qa, f"{where_p}.qas[{q}]", context, file, data, seen) for q, qa in enumerate(qas))
            data.documents.append(Document(context, str(title) if title is not None else None, where_p, questions))
    if not data.n_questions:
        raise DataError("no questions in this file", path=file,
                        hint='SQuAD format: {"data": [{"paragraphs": [{"context": ..., "qas": [...]}]}]}')
    _log_summary(data)
    return data


def _question(qa: Any, where: str, context: str, file: Path, data: SquadData, seen: dict[str, str]) -> Question:
    _expect(qa, dict, where, file)
    text = _field(qa, "question", str, where, file)
    if "id" not in qa or not isinstance(qa["id"], str | int) or isinstance(qa["id"], bool):
        raise DataError(f'{where}: "id" is missing or not a string/integer', path=file, hint="give every question a unique id")
    qid = str(qa["id"])
    if qid in seen:
        raise DataError(
            f"{where}: question id {qid!r} is used again (first at {seen[qid]})",
            path=file,
            hint="question ids must be unique: predictions are keyed by them",
        )
    seen[qid] = where
    is_impossible = bool(qa.get("is_impossible", False))
    if "answers" not in qa:
        return Question(qid, text, None, is_impossible, where)
    answers_raw = _field(qa, "answers", list, where, file)
    answers = []
    for i, answer in enumerate(answers_raw):
        where_ans = f"{where}.answers[{i}]"
        _expect(answer, dict, where_ans, file)
        answer_text = _field(answer, "text", str, where_ans, file)
        given = answer.get("answer_start")
        start = _verified_start(context, answer_text, given)
        if start != given:
            data.offset_issues.append(OffsetIssue(qid, where_ans, answer_text, given, start))
        answers.append(GoldAnswer(answer_text, start, given))
        data.gold_answers += 1
    return Question(qid, text, tuple(answers), is_impossible, where)


def _verified_start(context: str, text: str, given: Any) -> int | None:
    """``given`` when it points at ``text``; else the nearest occurrence of ``text``; else None."""
    if not text:
        return None
    if isinstance(given, int) and not isinstance(given, bool) and context.startswith(text, given) and given >= 0:
        return given
    anchor = given if isinstance(given, int) and not isinstance(given, bool) else 0
    best: int | None = None
    position = context.find(text)
    while position != -1:
        if best is None or abs(position - anchor) < abs(best - anchor):
            best = position
        if position > anchor:
            break  # occurrences only move further away from here on
        position = context.find(text, position + 1)
    return best


def _expect(value: Any, kind: type, where: str, file: Path) -> None:
    if not isinstance(value, kind):
        names: dict[type, str] = {list: "a list", dict: "an object", str: "a string"}
        raise DataError(
            f"{where} is {type(value).__name__}, expected {names.get(kind, kind.__name__)}",
            path=file,
            hint="the file must follow the SQuAD JSON layout",
        )


def _field(obj: dict[str, Any], key: str, kind: type, where: str, file: Path) -> Any:
    if key not in obj:
        raise DataError(f'{where}: "{key}" is missing', path=file, hint="the file must follow the SQuAD JSON layout")
    _expect(obj[key], kind, f"{where}.{key}", file)
    return obj[key]


def _log_summary(data: SquadData) -> None:
    if data.offset_issues:
        summary = data.offset_summary()
        first = data.offset_issues[0]
        log.warning(
            "%s: %d of %d gold answers have an answer_start that does not point at their text "
            "(%d repaired to the nearest occurrence, %d not in the context; first: question %s at %s)",
            data.path,
            summary["mismatched"],
            summary["gold_answers"],
            summary["repaired"],
            summary["text_not_in_context"],
            first.question_id,
            first.where,
        )
    for doc in data.empty_documents:
        log.warning(
            "%s: %s has an empty context; its %d question(s) get an empty answer", data.path, doc.where, len(doc.questions)
        )
