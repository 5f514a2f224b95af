"""Official SQuAD normalisation, EM, F1 and the substring match."""

from __future__ import annotations

import pytest

from greenadapt.data.squad_metrics import evaluate, exact_match, f1_score, normalize_answer, substring_match


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("The Cat!", "cat"),
        ("  a  quick,  brown-fox. ", "quick brownfox"),
        ("An apple and the pear", "apple and pear"),
        ("theory of anthems", "theory of anthems"),  # articles only as whole words
        ("Mother-to-child (MTCT)", "mothertochild mtct"),
        ("Café—2.5%", "café—25"),  # only ASCII punctuation is removed, as in the official script
    ],
)
def test_normalize_answer(raw: str, normalised: str) -> None:
    assert normalize_answer(raw) == normalised


def test_exact_match_and_f1_known_values() -> None:
    assert exact_match("The HIV-1 virus.", "hiv1 virus") == 1.0
    assert exact_match("HIV virus", "HIV-1 virus") == 0.0
    # pred: hiv1 infection children (3); gold: main cause of hiv1 infection in children (7)
    assert f1_score("HIV-1 infection children", "the main cause of HIV-1 infection in children") == pytest.approx(
        2 * (3 / 3) * (3 / 7) / (3 / 3 + 3 / 7)
    )
    assert f1_score("x y y", "y y y z") == pytest.approx(2 * (2 / 3) * (2 / 4) / (2 / 3 + 2 / 4))
    assert f1_score("", "") == 1.0 and f1_score("x", "") == 0.0 and f1_score("the", "an") == 1.0


def test_substring_match_both_ways() -> None:
    assert substring_match("mother-to-child transmission is the main cause", "Mother-to-child transmission") == 1.0
    assert substring_match("transmission", "mother-to-child transmission") == 1.0
    assert substring_match("fever", "cough") == 0.0
    assert substring_match("", "cough") == 0.0 and substring_match("", "") == 1.0


def test_evaluate_takes_the_best_gold_and_scores_missing_as_empty() -> None:
    golds = {"1": ["Paris", "the city of Paris"], "2": ["blue"], "3": [], "4": ["x y"]}
    predictions = {"1": "city of Paris", "2": "red", "3": ""}
    result = evaluate(predictions, golds)
    assert result["scored_questions"] == 4
    # 1: EM via gold 2 (articles dropped); 2: wrong; 3: v2 no-answer, empty prediction right; 4: missing
    assert result["exact_match"] == pytest.approx(50.0)
    assert result["f1"] == pytest.approx(50.0)
    assert result["substring_match"] == pytest.approx(50.0)
    assert evaluate({}, {})["f1"] is None
