"""SQuAD fine-tuning: answer positions in windows, the tokenizer mixture, a loadable result."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file

from greenadapt.data.squad import read_squad
from greenadapt.errors import UsageError
from greenadapt.runners.qa.features import featurize
from greenadapt import finetune

CONTEXT = (
    "The heart rate of covid patients was high. Myocarditis was associated with tachycardias. "
    "Ventilation was the main treatment for the disease in most patients. "
) * 3


@pytest.fixture(scope="module")
def expanded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_expanded_qa(tmp_path_factory.mktemp("qa-train") / "model")


@pytest.fixture(scope="module")
def train_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    late = CONTEXT.rindex("Ventilation")
    return squad_file(
        tmp_path_factory.mktemp("qa-train-data") / "train.json",
        [
            {
                "paragraphs": [
                    paragraph(
                        CONTEXT,
                        ("t1", "What was high?", [("heart rate", 4)]),
                        ("t2", "What was the main treatment?", [("Ventilation", late)]),
                        ("t3", "What was associated with tachycardias?", [("Myocarditis", 43)]),
                        ("t4", "Where is the moon?", [("not in the text", 0)]),
                    )
                ]
            }
        ],
    )


def test_answer_positions_point_at_the_answer_or_cls(expanded: Path, train_file: Path) -> None:
    from transformers import AutoTokenizer

    data = read_squad(train_file)
    for folder in (expanded, expanded / "general-tokenizer"):
        tokenizer = AutoTokenizer.from_pretrained(folder)
        features, dropped = featurize(data, tokenizer, max_length=40, doc_stride=12)
        assert dropped == 1  # t4's answer is not in the context
        answers = {0: "heart rate", 1: "ventilation", 2: "myocarditis"}
        positive = 0
        for ids, start, end, owner in zip(
            features.input_ids, features.start_positions, features.end_positions, features.question_index, strict=True
        ):
            assert len(ids) <= 40
            if start == 0:
                assert end == 0
                continue
            positive += 1
            decoded = tokenizer.decode(ids[start : end + 1]).replace(" ##", "").replace("##", "")
            assert decoded == answers[int(owner)]
        # t2's answer is in the last occurrence, so only windows holding it are positive.
        assert positive >= 3 and len(features.input_ids) > positive


def test_finetune_mixes_tokenizers_learns_and_loads(expanded: Path, train_file: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    import greenadapt

    options = dict(task="qa", train=train_file, model=str(expanded), max_length=48, doc_stride=16, batch_size=4, lr=3e-3, max_steps=40,
                   warmup=0.1, seed=3)
    outcome = finetune(**options, out=tmp_path / "ft", dev=train_file)
    stats = outcome.manifest["stats"]
    assert stats["steps"] == 40 and stats["mix"] == 0.5 and stats["questions_left_out"] == 1
    assert stats["last_loss"] < 0.5 * stats["first_loss"]
    log_lines = [json.loads(line) for line in (outcome.path / "train_log.jsonl").read_text().splitlines()]
    shares = [line["domain_windows"] / line["windows"] for line in log_lines]
    assert len(log_lines) == 40 and 0.0 < sum(shares) / len(shares) < 1.0
    assert AutoModelForQuestionAnswering.from_pretrained(outcome.path) is not None
    assert len(AutoTokenizer.from_pretrained(outcome.path)) > len(AutoTokenizer.from_pretrained(outcome.path / "general-tokenizer"))
    assert stats["dev"]["pool"] == "mean" and 0.0 <= stats["dev"]["f1"] <= 100.0
    answered = greenadapt.qa(train_file, model=str(outcome.path), max_length=48, out=tmp_path / "qa")
    assert answered.manifest["config"]["pool"] == "mean"

    again = finetune(**options, out=tmp_path / "ft2")
    assert (again.path / "model.safetensors").read_bytes() == (outcome.path / "model.safetensors").read_bytes()


def test_mix_needs_a_domain_tokenizer(train_file: Path, tmp_path: Path) -> None:
    from conftest import build_tiny_bert

    plain = build_tiny_bert(tmp_path / "plain", head="mlm")
    with pytest.raises(UsageError, match="domain tokenizer"):
        finetune(task="qa", train=train_file, model=str(plain), out=tmp_path / "x", mix=0.5)
    with pytest.raises(UsageError, match="doc_stride=400 leaves no room"):
        finetune(task="qa", train=train_file, model=str(plain), out=tmp_path / "x", doc_stride=400)


def _run(model: Path, data: Path, out: Path, **training: object) -> tuple[dict, list[dict]]:
    outcome = finetune(task="qa", train=data, model=str(model), out=out, max_length=48, doc_stride=16, batch_size=4, lr=3e-3, force=True,
                       **training)
    return outcome.manifest["stats"], [json.loads(line) for line in (outcome.path / "train_log.jsonl").read_text().splitlines()]


def test_mix_zero_and_one_train_one_tokenizer_each(expanded: Path, train_file: Path, tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    n_base = len(json.loads((expanded / "general-tokenizer" / "tokenizer.json").read_text())["model"]["vocab"])
    key = "bert.embeddings.word_embeddings.weight"
    added_before = load_file(str(expanded / "model.safetensors"))[key][n_base:]
    general, general_log = _run(expanded, train_file, tmp_path / "mix0", max_steps=3, mix=0.0)
    assert general["domain_fraction"] == 0.0 and set(general["windows"]) == {"general"}  # T̂ is not even featurised
    assert all(line["domain_windows"] == 0 for line in general_log)
    # T̂'s added rows are never looked up, so, as under dense AdamW, they only decay: all by one factor.
    ratio = load_file(str(tmp_path / "mix0" / "model.safetensors"))[key][n_base:] / added_before
    assert np.allclose(ratio, ratio.flat[0], rtol=1e-5) and 0.999 < ratio.flat[0] < 1.0
    domain, domain_log = _run(expanded, train_file, tmp_path / "mix1", max_steps=3, mix=1.0)
    assert domain["domain_fraction"] == 1.0 and all(line["domain_windows"] == line["windows"] for line in domain_log)
    moved = load_file(str(tmp_path / "mix1" / "model.safetensors"))[key][n_base:] / added_before
    assert not np.allclose(moved, moved.flat[0], rtol=1e-5)  # looked up: trained, not only decayed


def test_gradient_accumulation_gives_the_same_gradient(train_file: Path, tmp_path: Path) -> None:
    from finetune_helpers import set_dropout

    model = build_tiny_expanded_qa(tmp_path / "nodrop")
    set_dropout(model, 0.0)
    whole = _run(model, train_file, tmp_path / "a1", max_steps=1, grad_accum=1)[1][0]
    split = _run(model, train_file, tmp_path / "a2", max_steps=1, grad_accum=2)[1][0]
    assert whole["windows"] == split["windows"] == 4
    # The loss is the mean over the global batch and the gradient its gradient, however many micro-batches.
    assert split["loss"] == pytest.approx(whole["loss"], rel=1e-5)
    assert split["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-4)


def test_the_answer_length_is_declared_once_and_reaches_qa_training_its_scoring_and_compare(expanded: Path, train_file: Path,
                                                                                         tmp_path: Path) -> None:
    """Issue 93, item 1: --max-answer-chars was qa's alone while QA training scored with a fixed 500."""
    from finetune_helpers import comparison

    from greenadapt.comparison.recipe import finetune_arguments

    options = dict(task="qa", train=train_file, test=train_file, model=str(expanded), max_length=48, doc_stride=16, batch_size=4, lr=3e-3,
                   max_steps=30, seed=3)
    short = finetune(**options, out=tmp_path / "short", max_answer_chars=4)
    plain = finetune(**options, out=tmp_path / "plain")
    answers = [json.loads((run.path / "predictions" / "test.json").read_text()) for run in (short, plain)]
    assert all(len(answer) <= 4 for answer in answers[0].values()) and max(len(answer) for answer in answers[1].values()) > 4
    # the stage records it when set: a run scored with another length is not the same stage (and runs made before keep theirs)
    assert short.manifest["config"]["train"]["max_answer_chars"] == 4 and "max_answer_chars" not in plain.manifest["config"]["train"]
    assert short.manifest["fingerprint"] != plain.manifest["fingerprint"]
    plan = comparison(tmp_path / "cmp", task="qa", train=train_file, test=train_file, models=(("a", str(expanded)), ("b", str(expanded))),
                      max_answer_chars=40)
    plan.check()
    assert finetune_arguments(plan, str(expanded), 1, tmp_path / "run")["max_answer_chars"] == 40
    with pytest.raises(UsageError, match="max_answer_chars does not apply to task ner"):
        finetune(task="ner", train=train_file, model=str(expanded), max_answer_chars=40, out=tmp_path / "ner")


def test_qa_training_scores_in_its_own_precision(expanded: Path, train_file: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A run trained at --precision fp32 is scored in fp32, where auto would be bf16 (it was scored at auto before)."""
    from qa_helpers import record_runner_dtypes

    dtypes = record_runner_dtypes(monkeypatch)
    finetune(task="qa", train=train_file, test=train_file, model=str(expanded), max_length=48, doc_stride=16, batch_size=4, max_steps=2,
             precision="fp32", out=tmp_path / "fp32")
    assert dtypes and all(dtype is None for dtype in dtypes)  # None: autocast off, fp32


def test_scoring_the_test_file_shows_its_progress_and_says_when_it_starts_and_ends(expanded: Path, train_file: Path, tmp_path: Path,
                                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """Answering a test file of whole papers takes minutes on a CPU (Covid-QA: 100 questions on three papers were not
    done after 8.5 silent minutes): it is a phase of the progress shown, question by question, and said in the log."""
    import logging

    class Recorded:
        def __init__(self) -> None:
            self.calls: list[tuple[str, object]] = []

        def start(self, description: str, total: float | None = None, unit: str = "") -> None:
            self.calls.append((description, (total, unit)))

        def update(self, completed: float, **info: object) -> None:
            self.calls.append(("update", completed))

        def finish(self, **info: object) -> None:
            self.calls.append(("finish", None))

    recorded = Recorded()
    data = read_squad(train_file)
    questions = data.n_questions
    with caplog.at_level(logging.INFO, logger="greenadapt"):
        finetune(task="qa", train=train_file, test=train_file, model=str(expanded), out=tmp_path / "run", max_length=48, doc_stride=16,
                 batch_size=4, max_steps=1, progress=recorded)
    answering = [i for i, (what, _) in enumerate(recorded.calls) if what == "answering"]
    assert answering and recorded.calls[answering[-1]][1] == (questions, "questions"), recorded.calls
    assert ("update", questions) in recorded.calls[answering[-1]:], recorded.calls
    said = [r.getMessage() for r in caplog.records]
    assert len(data.documents) == 1 and f"scoring test: {questions} questions on 1 document" in said, said
    assert any(m.startswith("scored test in ") for m in said), said
