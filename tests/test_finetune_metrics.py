"""Metrics: conlleval entity scores on hand-made cases, classification scores against hand computation."""

from __future__ import annotations

import math

import pytest

from greenadapt.data.metrics import (
    can_cut_before,
    chunks,
    classification_scores,
    default_positive_label,
    entity_scores,
    matthews_corrcoef,
    mean_std,
    summarize_seeds,
)


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        (["O", "B", "I", "O", "B"], [(1, 2, ""), (4, 4, "")]),
        (["B", "B", "I"], [(0, 0, ""), (1, 2, "")]),
        # conlleval: an I after O starts an entity, I after another type starts a new one
        (["O", "I", "I", "O"], [(1, 2, "")]),
        (["B-PER", "I-LOC", "I-LOC"], [(0, 0, "PER"), (1, 2, "LOC")]),
        (["I-PER"], [(0, 0, "PER")]),
        # BIOES
        (["S-Chem", "B-Dis", "I-Dis", "E-Dis", "O", "S-Dis"], [(0, 0, "Chem"), (1, 3, "Dis"), (5, 5, "Dis")]),
        (["B-X", "E-X", "B-X", "E-X"], [(0, 1, "X"), (2, 3, "X")]),
        (["E-X", "I-X"], [(0, 0, "X"), (1, 1, "X")]),
        (["O", "O"], []),
    ],
)
def test_chunks_follow_conlleval(tags: list[str], expected: list[tuple[int, int, str]]) -> None:
    assert chunks(tags) == expected


def test_entity_scores_exact_span_and_type() -> None:
    gold = [["B-Dis", "I-Dis", "O", "B-Chem"], ["O", "B-Dis"]]
    pred = [["B-Dis", "O", "O", "B-Chem"], ["O", "B-Chem"]]
    # gold: (0-1 Dis), (3 Chem), (1 Dis) = 3; pred: (0 Dis), (3 Chem), (1 Chem) = 3; correct: (3 Chem) only
    scores = entity_scores(gold, pred)
    assert scores["correct_entities"] == 1
    assert scores["precision"] == pytest.approx(1 / 3)
    assert scores["recall"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx(1 / 3)
    assert scores["accuracy"] == pytest.approx(4 / 6)
    assert scores["per_type"]["Chem"]["precision"] == pytest.approx(1 / 2)
    assert scores["per_type"]["Chem"]["recall"] == pytest.approx(1.0)
    assert scores["per_type"]["Dis"]["f1"] == 0.0


def test_entity_scores_bioes_equals_bio_of_same_spans() -> None:
    bio = [["B", "I", "I", "O", "B"], ["B", "O"]]
    bioes = [["B", "I", "E", "O", "S"], ["S", "O"]]
    pred_bio = [["B", "I", "O", "O", "B"], ["B", "O"]]
    pred_bioes = [["B", "E", "O", "O", "S"], ["S", "O"]]
    a, b = entity_scores(bio, pred_bio), entity_scores(bioes, pred_bioes)
    assert (a["precision"], a["recall"], a["f1"]) == (b["precision"], b["recall"], b["f1"])
    assert a["correct_entities"] == 2 and a["gold_entities"] == 3


def test_i_after_o_in_prediction_counts_as_entity() -> None:
    scores = entity_scores([["O", "B", "I"]], [["O", "I", "I"]])
    assert scores["f1"] == 1.0  # I I after O is one entity spanning 1-2, exactly the gold one


def test_no_entities_gives_zero_not_nan() -> None:
    scores = entity_scores([["O", "O"]], [["O", "O"]])
    assert scores["f1"] == 0.0 and scores["accuracy"] == 1.0


def test_can_cut_before_never_inside_an_entity() -> None:
    tags = ["O", "B", "I", "I", "O", "B", "B", "I-X"]
    allowed = [p for p in range(len(tags) + 1) if can_cut_before(tags, p)]
    assert allowed == [0, 1, 4, 5, 6, 7, 8]
    for start, end, _ in chunks(tags):
        for inside in range(start + 1, end + 1):
            assert inside not in allowed


def test_classification_scores_by_hand() -> None:
    gold = ["a", "a", "b", "b", "c", "c"]
    pred = ["a", "b", "b", "b", "c", "a"]
    scores = classification_scores(gold, pred)
    assert scores["accuracy"] == pytest.approx(4 / 6)
    assert scores["micro_f1"] == pytest.approx(4 / 6)
    # per-class F1: a: P 1/2 R 1/2 → .5; b: P 2/3 R 1 → .8; c: P 1 R 1/2 → 2/3
    assert scores["macro_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert "f1" not in scores


def test_binary_f1_and_mcc() -> None:
    gold = ["1", "1", "1", "0", "0", "0", "1", "0"]
    pred = ["1", "1", "0", "0", "1", "0", "1", "0"]
    scores = classification_scores(gold, pred, positive="1")
    tp, fp, fn, tn = 3, 1, 1, 3
    assert scores["f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    expected_mcc = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert scores["mcc"] == pytest.approx(expected_mcc)


def test_mcc_edge_cases() -> None:
    assert matthews_corrcoef([[5, 0], [0, 0]]) == 0.0  # one class only: undefined → 0
    assert matthews_corrcoef([[3, 0], [0, 4]]) == pytest.approx(1.0)
    assert matthews_corrcoef([[0, 3], [4, 0]]) == pytest.approx(-1.0)


def test_default_positive_label() -> None:
    assert default_positive_label(["0", "1"]) == "1"
    assert default_positive_label(["entailment", "not_entailment"]) == "entailment"
    assert default_positive_label(["a", "b", "c"]) is None


def test_mean_std_and_summary() -> None:
    assert mean_std([1.0]) == {"mean": 1.0, "std": 0.0, "n": 1}
    result = mean_std([1.0, 2.0, 3.0])
    assert result["mean"] == 2.0 and result["std"] == pytest.approx(1.0)
    per_seed = {
        "1": {"test": {"mean": {"f1": 0.5, "per_type": {}}}},
        "2": {"test": {"mean": {"f1": 0.7, "per_type": {}}}},
    }
    summary = summarize_seeds(per_seed)
    assert summary["test"]["mean"]["f1"]["mean"] == pytest.approx(0.6)
    assert "per_type" not in summary["test"]["mean"]
