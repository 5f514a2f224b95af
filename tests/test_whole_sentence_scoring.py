"""Scored and predicted NER sentences stay whole where the window holds them (issue 38, part 1).

The BioBERT recipe cuts training sentences into chunks of 30 words. Cutting
test sentences that way too cost every model about 1.5 F1 on NCBI-disease (283
of 940 test sentences were cut, 21 gold entities straddled a cut), and it is not
how the paper scores. A sentence the window holds is one sequence; only what does
not fit is cut, at the window, without looking at its labels.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from finetune_helpers import build_tiny_expanded

from greenadapt.artifacts.model_folder import TokenizerPair, load_tokenizers
from greenadapt.data.task_files import NerSentence, TaskFile
from greenadapt.tasks import TaskSettings, get_task

WORDS = "patients with tachycardia and leukemia were treated".split()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> TokenizerPair:
    return load_tokenizers(build_tiny_expanded(tmp_path_factory.mktemp("whole") / "model"))


def _file(n_words: int) -> TaskFile:
    words = tuple(WORDS[i % len(WORDS)] for i in range(n_words))
    tags = tuple("B" if w == "leukemia" else "O" for w in words)
    return TaskFile(Path("test.tsv"), "columns", [NerSentence(words, tags, tuple(range(1, n_words + 1)))], True, {})


def test_a_sentence_the_window_holds_is_scored_whole(pair: TokenizerPair) -> None:
    task = get_task("ner")
    settings = TaskSettings(task="ner", labels=["O", "B", "I"], max_words=30, max_length=128)
    forty = _file(40)
    scored, _ = task.units(forty, settings, pair)
    trained, _ = task.units(forty, settings, pair, training=True)
    assert all(len(view) < 128 for view in scored[0].ids)  # the window holds it
    assert len(scored) == 1 and len(scored[0].targets) == 40  # one sequence: the sentence as the paper scores it
    assert [len(u.targets) for u in trained] == [30, 10]  # training keeps the 30-word chunks of the recipe


def test_only_what_the_window_cannot_hold_is_cut_there_without_the_labels(pair: TokenizerPair) -> None:
    task = get_task("ner")
    settings = TaskSettings(task="ner", labels=["O", "B", "I"], max_words=30, max_length=16)
    long = _file(45)
    scored, _ = task.units(long, settings, pair)
    assert len(scored) >= 3 and sum(len(u.targets) for u in scored) == 45
    assert all(len(view) <= 16 for unit in scored for view in unit.ids)  # each piece fills the window, no more
    unlabelled = TaskFile(long.path, "columns", [NerSentence(long.examples[0].words, None, long.examples[0].lines)], False, {})
    assert [u.first_word for u in task.units(unlabelled, settings, pair)[0]] == [u.first_word for u in scored]  # labels play no part


@pytest.mark.slow
def test_finetune_reports_what_predict_gives_on_the_same_long_sentences(tmp_path: Path) -> None:
    """A test file of sentences longer than 30 words: finetune's F1 is predict's F1 on the same words."""
    import random

    import greenadapt
    from greenadapt.inference.labelling import run_predict
    from greenadapt.inference.settings import LoadSettings

    rng = random.Random(3)
    lines = []
    for _ in range(12):
        for _ in range(rng.randint(35, 60)):
            word = rng.choice(WORDS)
            lines.append(f"{word}\t{'B' if word == 'leukemia' else 'O'}")
        lines.append("")
    test = tmp_path / "test.tsv"
    test.write_text("\n".join(lines) + "\n")
    model = build_tiny_expanded(tmp_path / "model")
    run = greenadapt.finetune("ner", test, test=test, model=str(model), out=tmp_path / "run", epochs=3, batch_size=4, lr=3e-3,
                              device="cpu", seed=1)
    reported = json.loads((run.path / "metrics.json").read_text())["per_seed"]["1"]["test"]["mean"]["f1"]
    predicted = run_predict(run.path, test, tmp_path / "pred.tsv", options=LoadSettings(device="cpu"))
    assert predicted.metrics is not None and predicted.metrics["f1"] == pytest.approx(reported)
    assert reported > 0  # a model that learned something: equal scores of 0 would say nothing
