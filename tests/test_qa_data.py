"""Reading SQuAD v1/v2 files: layouts, bad offsets, empty contexts, malformed JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from qa_helpers import paragraph, squad_file

from greenadapt.data.squad import read_squad
from greenadapt.errors import EXIT_BAD_INPUT, DataError, InputError

CONTEXT = "Fever is common. Fever and cough are the main symptoms."


def test_v1_with_title_and_version(tmp_path: Path) -> None:
    file = squad_file(
        tmp_path / "v1.json",
        [{"title": "Flu", "paragraphs": [paragraph(CONTEXT, ("a1", "What is common?", [("Fever", 0)]))]}],
        version="1.1",
    )
    data = read_squad(file)
    assert data.version == "1.1" and data.documents[0].title == "Flu"
    question = data.questions[0]
    assert (question.id, question.text, question.answers[0].start) == ("a1", "What is common?", 0)
    assert data.offset_issues == [] and data.gold_answers == 1


def test_v2_no_answer_and_bare_layout_with_integer_ids(tmp_path: Path) -> None:
    articles = [
        {
            "paragraphs": [
                {
                    "context": CONTEXT,
                    "qas": [
                        {"id": 7, "question": "Who?", "answers": [], "is_impossible": True, "plausible_answers": []},
                        {"id": 8, "question": "Test-only question"},
                    ],
                }
            ]
        }
    ]
    file = tmp_path / "bare.json"
    file.write_text(json.dumps(articles), encoding="utf-8")
    data = read_squad(file)
    impossible, no_gold = data.questions
    assert impossible.id == "7" and impossible.is_impossible and impossible.answers == ()
    assert no_gold.id == "8" and not no_gold.has_gold and data.version is None


def test_bad_answer_start_is_counted_and_repaired_to_nearest_occurrence(tmp_path: Path) -> None:
    second = CONTEXT.index("Fever", 1)
    file = squad_file(
        tmp_path / "off.json",
        [
            {
                "paragraphs": [
                    paragraph(
                        CONTEXT,
                        ("ok", "q", [("Fever", 0)]),
                        ("near-second", "q", [("Fever", second + 2)]),
                        ("absent", "q", [("malaria", 3)]),
                        ("no-start", "q", [("cough", None)]),
                    )
                ]
            }
        ],
    )
    data = read_squad(file)
    by_id = {q.id: q.answers[0] for q in data.questions}
    assert by_id["ok"].start == 0
    assert by_id["near-second"].start == second and by_id["near-second"].given_start == second + 2
    assert by_id["absent"].start is None
    assert by_id["no-start"].start == CONTEXT.index("cough")
    assert data.offset_summary() == {"gold_answers": 4, "mismatched": 3, "repaired": 2, "text_not_in_context": 1}
    assert [issue.where for issue in data.offset_issues][0] == "data[0].paragraphs[0].qas[1].answers[0]"


def test_empty_context_is_flagged_not_fatal(tmp_path: Path) -> None:
    file = squad_file(tmp_path / "e.json", [{"paragraphs": [paragraph("  \n", ("q1", "Why?", []))]}])
    data = read_squad(file)
    assert [doc.where for doc in data.empty_documents] == ["data[0].paragraphs[0]"]


def test_malformed_json_reports_line_and_column(tmp_path: Path) -> None:
    file = tmp_path / "broken.json"
    file.write_text('{"data": [\n  {"paragraphs": [\n    {"context": "x", "qas": [}\n  ]}\n]}\n', encoding="utf-8")
    with pytest.raises(InputError) as caught:
        read_squad(file)
    error = caught.value
    assert error.line == 3 and "column" in error.message and error.exit_code == EXIT_BAD_INPUT
    assert "\n" not in error.one_line() and str(file) in error.one_line()


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ({"version": "1.1"}, '"data"'),
        ({"data": [{"paragraphs": [{"qas": []}]}]}, 'data[0].paragraphs[0]: "context" is missing'),
        ({"data": [{"paragraphs": [{"context": "c", "qas": [{"id": "1"}]}]}]}, '"question" is missing'),
        ({"data": [{"paragraphs": "nope"}]}, "data[0].paragraphs is str"),
    ],
)
def test_structural_errors_name_the_json_path(tmp_path: Path, content: object, fragment: str) -> None:
    file = tmp_path / "s.json"
    file.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(DataError, match=None) as caught:
        read_squad(file)
    assert fragment in caught.value.one_line()


def test_duplicate_ids_and_missing_or_non_utf8_files(tmp_path: Path) -> None:
    file = squad_file(tmp_path / "d.json", [{"paragraphs": [paragraph(CONTEXT, (1, "a", []), ("1", "b", []))]}])
    with pytest.raises(DataError, match="used again"):
        read_squad(file)
    with pytest.raises(InputError, match="not found"):
        read_squad(tmp_path / "none.json")
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"data": [\n"caf\xe9"]}')
    with pytest.raises(InputError) as caught:
        read_squad(latin)
    assert caught.value.line == 2


def test_limited_keeps_file_order(tmp_path: Path) -> None:
    file = squad_file(
        tmp_path / "l.json",
        [
            {"paragraphs": [paragraph(CONTEXT, ("a", "q", [("Fever", 0)]), ("b", "q", [("Fever", 9)]))]},
            {"paragraphs": [paragraph(CONTEXT, ("c", "q", []))]},
        ],
    )
    data = read_squad(file)
    limited = data.limited(1)
    assert [q.id for q in limited.questions] == ["a"] and limited.offset_issues == []
    assert [q.id for q in data.limited(3).questions] == ["a", "b", "c"]
    assert len(data.limited(2).offset_issues) == 1


@pytest.mark.integration
def test_reads_covid_qa_as_it_is(shared_data: Path) -> None:
    data = read_squad(shared_data / "qa" / "covid-qa-200423.json")
    assert len(data.documents) == 98 and data.n_questions == 1380
    assert sum(len(doc.context) for doc in data.documents) / len(data.documents) > 20_000  # whole papers
    summary = data.offset_summary()
    assert summary["mismatched"] > 0 and summary["mismatched"] == summary["repaired"]
    for doc in data.documents:
        for question in doc.questions:
            for answer in question.answers or ():
                assert doc.context[answer.start : answer.start + len(answer.text)] == answer.text
