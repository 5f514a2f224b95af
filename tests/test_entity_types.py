"""NER scores per entity type (seqeval's report) reach the user: over seeds, in the summary, info and the report."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from finetune_helpers import DISEASE_WORDS, OTHER_WORDS, build_tiny_expanded

from greenadapt.data.metrics import entity_scores, summarize_seeds

CHEMICALS = ("insulin", "kinase")  # tagged Chemical; the disease words Disease; the rest O


def _two_type_file(path: Path, n_sentences: int, seed: int) -> Path:
    rng = random.Random(seed)
    others = [w for w in OTHER_WORDS if w not in CHEMICALS]
    lines = []
    for _ in range(n_sentences):
        for _ in range(rng.randint(3, 8)):
            word = rng.choice([*DISEASE_WORDS, *CHEMICALS, *others, *others])
            label = "B-Disease" if word in DISEASE_WORDS else "B-Chemical" if word in CHEMICALS else "O"
            lines += [f"{word}\t{label}", f"{rng.choice(others)}\tO"]
        lines.append("")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_per_type_scores_are_averaged_over_seeds_and_a_missing_type_counts_as_zero() -> None:
    gold = [["B-Dis", "O", "B-Chem"], ["B-Chem", "I-Chem", "O"]]
    seed_1 = entity_scores(gold, [["B-Dis", "O", "B-Chem"], ["B-Chem", "I-Chem", "O"]])  # both types right
    seed_2 = entity_scores(gold, [["O", "O", "B-Chem"], ["B-Chem", "O", "O"]])  # no Dis predicted; 1 of 2 Chem right
    summary = summarize_seeds({"1": {"test": {"mean": seed_1}}, "2": {"test": {"mean": seed_2}}})
    by_type = summary["test"]["mean"]["per_type"]
    assert set(by_type) == {"Chem", "Dis"}
    assert by_type["Dis"]["f1"]["mean"] == pytest.approx(0.5) and by_type["Dis"]["f1"]["n"] == 2  # 1.0 and 0.0
    chem_f1_seed_2 = 2 * (1 / 2) * (1 / 2) / (1 / 2 + 1 / 2)
    assert by_type["Chem"]["f1"]["mean"] == pytest.approx((1.0 + chem_f1_seed_2) / 2)
    assert by_type["Chem"]["gold"] == 2 and by_type["Dis"]["gold"] == 1
    # The overall figures are unchanged by the per-type ones.
    assert summary["test"]["mean"]["f1"]["mean"] == pytest.approx((seed_1["f1"] + seed_2["f1"]) / 2)


def test_a_typed_ner_run_shows_f1_by_entity_type_in_its_summary_info_and_report(tmp_path: Path) -> None:
    from greenadapt.artifacts.info import describe_folder, render
    from greenadapt.cli.finetune import _summary
    from greenadapt.reporting.collection import collect
    from greenadapt.reporting.render import html_page, markdown
    from greenadapt import finetune

    model = build_tiny_expanded(tmp_path / "model")
    train = _two_type_file(tmp_path / "train.tsv", 30, seed=1)
    test = _two_type_file(tmp_path / "test.tsv", 12, seed=2)
    out = tmp_path / "runs" / "ner"
    outcome = finetune(**dict(task="ner", model=str(model), train=train, test=test, out=out, device="cpu",
                                           seeds=(1, 2), **dict(epochs=2, batch_size=8, lr=5e-3)))
    per_type = outcome.manifest["stats"]["per_type"]["test"]
    assert set(per_type) == {"Chemical", "Disease"}
    gold = {kind: sum(1 for line in test.read_text().splitlines() if line.endswith(f"B-{kind}")) for kind in per_type}
    assert {kind: value["gold"] for kind, value in per_type.items()} == gold
    assert all(value["f1"]["n"] == 2 and 0.0 <= value["f1"]["mean"] <= 1.0 for value in per_type.values())

    summary = _summary(outcome)
    line = next(line for line in summary.splitlines() if line.startswith("test f1 by entity type"))
    assert f"Chemical {100 * per_type['Chemical']['f1']['mean']:.2f}" in line and f"({gold['Disease']} gold)" in line

    text = render(describe_folder(out))
    assert any(row.strip().startswith("test types") and "Disease" in row and "Chemical" in row for row in text.splitlines())

    data = collect([tmp_path / "runs"])
    assert {(row["split"], row["type"]) for row in data["entity_types"]} >= {("test", "Chemical"), ("test", "Disease")}
    assert "### F1 by entity type" in markdown(data) and "<h3>F1 by entity type</h3>" in html_page(data, {})
