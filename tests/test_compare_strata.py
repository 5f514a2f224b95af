"""Where the gain lives (issue 64, item 1): compare's difference split by the kind of test mention.

Predictions are built by hand so that the gain sits only on mentions with a new word (or only on the others), and
the table must say so; then the words' facts come from a real tiny expanded model, and a compare run shows the table
in compare.json, the terminal and ``info``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_S, REPO, build_tiny_bert
from finetune_helpers import NEW_WORDS, build_tiny_expanded, write_ner_file

from greenadapt.comparison.strata import (
    DIFFERENT_SEGMENTATION,
    FEW_PIECES,
    MANY_PIECES,
    ONE_PIECE,
    SAME_SEGMENTATION,
    WITH_NEW,
    WITHOUT_NEW,
    WordFacts,
    stratified_differences,
    word_facts,
)

# 40 sentences of 4 words: word 0 is a new word (1 general piece... no: 5 pieces), word 2 an ordinary one (1 piece).
SENTENCES = 40
FACTS = WordFacts(pieces=[[5, 1, 1, 2] for _ in range(SENTENCES)], new=[[True, False, False, False] for _ in range(SENTENCES)])
GOLD = [["B-D", "O", "B-D", "O"] for _ in range(SENTENCES)]  # one mention with the new word, one without, per sentence


def _tags(hit_new: bool, hit_other: bool, miss_every: int = 0, offset: int = 0) -> list[list[str]]:
    """Per sentence: the new-word mention found if ``hit_new``, the other if ``hit_other``; every ``miss_every``-th
    sentence (from ``offset``) misses both, so that seeds differ."""
    tags = []
    for i in range(SENTENCES):
        missed = miss_every and (i + offset) % miss_every == 0
        tags.append([("B-D" if hit_new and not missed else "O"), "O", ("B-D" if hit_other and not missed else "O"), "O"])
    return tags


def _rows(variant: list[list[list[str]]], baseline: list[list[list[str]]]) -> dict[str, dict]:
    predicted = {seed: (v, b) for seed, (v, b) in enumerate(zip(variant, baseline, strict=True), start=1)}
    return {row["stratum"]: row for row in stratified_differences("green", "base", GOLD, predicted, FACTS, replicates=300)}


def test_a_gain_only_on_new_word_mentions_shows_only_there() -> None:
    green = [_tags(True, True, 7, seed) for seed in range(3)]
    base = [_tags(False, True, 7, seed) for seed in range(3)]
    rows = _rows(green, base)
    assert rows[WITH_NEW]["difference"] > 0.5 and rows[WITH_NEW]["significant95"]
    low, _ = rows[WITH_NEW]["bootstrap_interval95"]
    assert low > 0
    assert rows[WITHOUT_NEW]["difference"] == 0 and not rows[WITHOUT_NEW]["significant95"]
    assert rows[WITH_NEW]["mentions"] == rows[WITHOUT_NEW]["mentions"] == SENTENCES
    # the pieces split follows the words: the new word takes 5 pieces, the other mention's word 1
    assert rows[MANY_PIECES]["difference"] == rows[WITH_NEW]["difference"] and rows[ONE_PIECE]["difference"] == 0
    assert rows[FEW_PIECES]["mentions"] == 0
    assert rows[WITH_NEW]["f1"]["base"] == 0 and rows[WITH_NEW]["f1"]["green"] > 0.8


def test_a_gain_only_on_the_other_mentions_shows_only_there() -> None:
    green = [_tags(True, True, 7, seed) for seed in range(3)]
    base = [_tags(True, False, 7, seed) for seed in range(3)]
    rows = _rows(green, base)
    assert rows[WITHOUT_NEW]["difference"] > 0.5 and rows[WITHOUT_NEW]["significant95"]
    assert rows[WITH_NEW]["difference"] == 0 and not rows[WITH_NEW]["significant95"]


def test_a_predicted_mention_that_is_not_gold_counts_against_its_own_stratum_only() -> None:
    gold = [["O", "O", "B-D", "O"] for _ in range(SENTENCES)]  # only the ordinary word is an entity
    spurious = [["B-D", "O", "B-D", "O"] for _ in range(SENTENCES)]  # green also tags the new word
    rows = {r["stratum"]: r for r in stratified_differences("green", "base", gold, {1: (spurious, gold)}, FACTS, replicates=100)}
    assert rows[WITH_NEW]["mentions"] == 0 and rows[WITH_NEW]["predicted"]["green"] == SENTENCES
    assert rows[WITHOUT_NEW]["difference"] == 0  # its precision in the other stratum is untouched


def test_word_facts_come_from_the_expanded_models_own_tokenizers(tmp_path: Path) -> None:
    model = build_tiny_expanded(tmp_path / "green")
    sentences = [["the", NEW_WORDS[0], "of", "cells"], [NEW_WORDS[1], "study"]]
    facts = word_facts(sentences, model, model)
    assert facts.new == [[False, True, False, False], [True, False]]
    assert facts.pieces[0][1] > 1 and facts.pieces[0][0] == 1  # the general tokenizer cuts the new word
    plain = word_facts(sentences, build_tiny_bert(tmp_path / "base", head="base"), None)
    assert plain.new is None and plain.pieces == facts.pieces
    assert facts.strata(0, 0, 1)[0] == WITH_NEW and facts.strata(0, 2, 3)[0] == WITHOUT_NEW
    import greenadapt  # a second view has two tokenizers and no new row: no split by new words

    view = greenadapt.second_view(model=str(tmp_path / "base"), drop=0.3, out=tmp_path / "view", progress=False)
    assert word_facts(sentences, view.path, view.path).new is None


def test_sentences_are_split_by_whether_both_tokenizers_cut_them_alike(tmp_path: Path) -> None:
    model = build_tiny_expanded(tmp_path / "green")
    sentences = [["the", NEW_WORDS[0], "of", "cells"], ["the", "cells"], [NEW_WORDS[1], "study"]]
    facts = word_facts(sentences, model, model)
    assert facts.same_segmentation == [False, True, False]  # a new word is one piece in T̂, several in T_LM
    assert facts.strata(1, 0, 1)[-1] == SAME_SEGMENTATION and facts.strata(0, 2, 3)[-1] == DIFFERENT_SEGMENTATION
    # a one-tokenizer pair has no such split
    plain = word_facts(sentences, build_tiny_bert(tmp_path / "base", head="base"), None)
    assert plain.same_segmentation is None and not plain.has("segmentations")


def test_a_gain_only_where_the_views_differ_shows_only_there() -> None:
    # even sentences are cut alike by both tokenizers; the gain is on the odd ones' mentions only
    facts = WordFacts(pieces=FACTS.pieces, new=FACTS.new, same_segmentation=[i % 2 == 0 for i in range(SENTENCES)])
    green = [_tags(True, True, 7, seed) for seed in range(3)]
    base = [[row if i % 2 == 0 else ["O"] * 4 for i, row in enumerate(_tags(True, True, 7, seed))] for seed in range(3)]
    predicted = {seed: (v, b) for seed, (v, b) in enumerate(zip(green, base, strict=True), start=1)}
    rows = {row["stratum"]: row for row in stratified_differences("green", "base", GOLD, predicted, facts, replicates=300)}
    assert rows[SAME_SEGMENTATION]["difference"] == 0 and not rows[SAME_SEGMENTATION]["significant95"]
    assert rows[DIFFERENT_SEGMENTATION]["difference"] > 0.5 and rows[DIFFERENT_SEGMENTATION]["significant95"]
    assert rows[SAME_SEGMENTATION]["mentions"] + rows[DIFFERENT_SEGMENTATION]["mentions"] == 2 * SENTENCES
    assert rows[SAME_SEGMENTATION]["mentions"] == SENTENCES  # every gold mention of an even sentence


@pytest.mark.slow
def test_compare_reports_the_split_in_json_the_terminal_and_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import greenadapt

    from greenadapt.comparison.display import render

    result = greenadapt.compare("ner", write_ner_file(tmp_path / "train.tsv", 24, seed=1),
                                write_ner_file(tmp_path / "test.tsv", 16, seed=2),
                                {"base": str(build_tiny_bert(tmp_path / "base", head="base")),
                                 "green": str(build_tiny_expanded(tmp_path / "green"))},
                                out=tmp_path / "cmp", seeds=[1, 2], epochs=3, lr=1e-2, batch_size=8, device="cpu", bootstrap=200,
                                progress=False)  # type: ignore[arg-type]
    (pair,) = json.loads((tmp_path / "cmp" / "compare.json").read_text())["pairs"]
    assert [row["stratum"] for row in pair["strata"]] == [WITH_NEW, WITHOUT_NEW, ONE_PIECE, FEW_PIECES, MANY_PIECES,
                                                          SAME_SEGMENTATION, DIFFERENT_SEGMENTATION]
    mentions = [row["mentions"] for row in pair["strata"]]
    assert sum(mentions[:2]) == sum(mentions[2:5]) == sum(mentions[5:]) > 0
    assert "where it lives" in render(result) and WITH_NEW in render(result)
    from greenadapt.artifacts.info import describe_folder
    from greenadapt.artifacts.info import render as render_info

    from greenadapt.reporting import collect, markdown, render_html

    assert "Where it lives" in render_html(collect([tmp_path / "cmp"])) and "### Where it lives" in markdown(collect([tmp_path / "cmp"]))
    shown = render_info(describe_folder(tmp_path / "cmp"))
    assert "where it lives" in shown and WITH_NEW in shown and pair["strata_table"][0].strip() in shown
    assert DIFFERENT_SEGMENTATION in shown and DIFFERENT_SEGMENTATION in markdown(collect([tmp_path / "cmp"]))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a GPU driver's files are Linux's")
def test_compares_own_process_imports_no_torch_where_its_runs_train_in_workers(tmp_path: Path) -> None:
    """On a machine without a GPU driver, compare's own process checks its options (--device auto), finds no GPU for its
    workers and splits the verdicts by mention without torch or transformers: their import was 3.5 of a two-worker
    compare's 24 CPU-s (the workers waited for it), and its workers import them anyway."""
    model = build_tiny_expanded(tmp_path / "green")
    program = """
import sys
from pathlib import Path
from types import SimpleNamespace
from greenadapt.machine import devices
devices.GPU_DRIVER_PATHS = ()  # this machine as one without a GPU driver, wherever the test runs
from greenadapt.comparison.dispatch import worker_devices
from greenadapt.comparison.settings import CompareSettings
from greenadapt.comparison.strata import word_facts
model, data = sys.argv[1], Path(sys.argv[2])
settings = CompareSettings(task="ner", train=data, test=data, models=(("base", model), ("green", model)))
settings.configure_process()
assert worker_devices(SimpleNamespace(devices=(), device=settings.device)) == []
assert word_facts([["the", sys.argv[3]]], Path(sys.argv[1]), Path(sys.argv[1])).new == [[False, True]]
print(sorted(name for name in ("torch", "transformers") if name in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", program, str(model), str(write_ner_file(tmp_path / "t.tsv", 4)), NEW_WORDS[0]],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=HANG_S, check=False)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
