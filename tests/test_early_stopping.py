"""Dev scoring within an epoch (--eval-every) and early stopping (--early-stopping), issue 57 point 7.

The runtime is driven with a toy task whose dev scores are scripted, so every rule is checked exactly: when dev
is scored, which weights are kept (the best scoring's, by its step) and when training stops. A fine-tuning end
to end checks the options' plumbing and refusals.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from finetune_helpers import loop_settings

from greenadapt.errors import UsageError
from greenadapt.compute.distributed import DistContext
from greenadapt.training.runtime import TrainingHooks, TrainingTask, run_training, scorings_since_best
from greenadapt.training.trainer import Trainer

torch = pytest.importorskip("torch")


class Toy(TrainingTask):
    """5 batches an epoch of a one-weight model whose loss is its weight squared."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def epoch_batches(self, epoch: int, step: int) -> Sequence[Any]:
        return [np.arange(2) for _ in range(5)]

    def loss(self, part: Any) -> Any:
        return (self.model.weight ** 2).sum()

    def weights(self) -> dict[str, Any]:
        return dict(self.model.state_dict())

    def load_weights(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state)


def _train(scores: list[float], **config: Any) -> tuple[Any, list[tuple[int, float]], Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1, bias=False)
    options = loop_settings(batch_size=2, lr=0.1, epochs=3, precision="fp32", dev=Path("dev.tsv"), **config)  # dev: scored while training
    trainer = Trainer(model, options, DistContext(device=torch.device("cpu")), total_steps=options.plan(10)[1])
    seen: list[tuple[int, float]] = []  # (the step a scoring happened after, the weight then)
    script = iter(scores)

    def evaluate(m: Any) -> tuple[float, dict[str, Any]]:
        seen.append((len(seen), float(m.weight.item())))
        return next(script), {}

    run = run_training(trainer, Toy(model), TrainingHooks(evaluate=evaluate))
    return run, seen, model


def test_dev_is_scored_every_n_steps_and_at_each_epochs_end_once() -> None:
    run, _, _ = _train([0.1] * 20, eval_every=2)
    # 15 steps (3 epochs x 5): steps 2, 4, then the epoch's end at 5, 6, 8, 10 (an end and a multiple: once), ...
    assert [h["step"] for h in run.dev_history] == [2, 4, 5, 6, 8, 10, 12, 14, 15]
    assert [h["epoch"] for h in run.dev_history] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    plain, _, _ = _train([0.1] * 20)
    assert [h["step"] for h in plain.dev_history] == [5, 10, 15]


def test_the_best_scorings_weights_are_kept_even_within_an_epoch() -> None:
    scores = [0.2, 0.9, 0.3, 0.1, 0.4, 0.5, 0.6, 0.7, 0.8]  # best: the 2nd scoring, at step 4
    run, seen, model = _train(scores, eval_every=2)
    assert (run.best_step, run.best_score, run.best_epoch) == (4, 0.9, 1) and not run.stopped_early
    assert float(model.weight.item()) == seen[1][1]  # the weights the best scoring saw
    assert run.steps == 15


def test_early_stopping_stops_after_n_scorings_without_a_better_one() -> None:
    scores = [0.2, 0.5, 0.4, 0.5, 0.3, 0.9, 0.9, 0.9]  # a tie is not better
    run, seen, model = _train(scores, eval_every=2, early_stopping=3)
    # scorings at steps 2, 4, 5, 6, 8: best 0.5 at step 4, then 0.4, 0.5 (tie), 0.3: three without a better one
    assert run.stopped_early and [h["step"] for h in run.dev_history] == [2, 4, 5, 6, 8] and run.steps == 8
    assert run.best_step == 4 and float(model.weight.item()) == seen[1][1]
    never, _, _ = _train([0.1, 0.2, 0.3], early_stopping=1)  # better every time: trains to the end
    assert not never.stopped_early and never.steps == 15
    at_an_end, seen, model = _train([0.5, 0.4, 0.9], early_stopping=1)  # scored at epochs' ends only: stops after epoch 2
    assert at_an_end.stopped_early and at_an_end.steps == 10 and at_an_end.epochs_run == 2
    assert at_an_end.best_step == 5 and float(model.weight.item()) == seen[0][1]


def test_scorings_since_best() -> None:
    history = [{"score": s} for s in (0.1, 0.5, 0.3, 0.5, 0.2)]
    assert scorings_since_best(history) == 3 and scorings_since_best([]) == 0
    assert scorings_since_best(history[:2]) == 0


def test_the_options_are_checked_before_training() -> None:
    for config, says in (({"eval_every": 0}, "eval_every must"), ({"early_stopping": 0}, "early_stopping must")):
        with pytest.raises(UsageError, match=says):
            loop_settings(**config)  # when the settings are made


def test_finetune_with_eval_every_and_early_stopping(tmp_path: Path) -> None:
    from finetune_helpers import build_tiny_expanded, write_ner_file

    from greenadapt import finetune

    model = build_tiny_expanded(tmp_path / "model")
    train, dev = write_ner_file(tmp_path / "train.tsv", 40, seed=1), write_ner_file(tmp_path / "dev.tsv", 12, seed=2)

    def options(out: str, **training: Any) -> dict[str, Any]:
        return dict(task="ner", train=train, dev=dev, model=str(model), out=tmp_path / out, device="cpu",
                               **dict(batch_size=8, lr=3e-3, epochs=3, **training))

    outcome = finetune(**options("r", eval_every=2, early_stopping=2))
    summary = outcome.manifest["stats"]["training"]["42"]
    history = summary["dev_history"]
    assert history and all(h["step"] % 2 == 0 or h["step"] % 5 == 0 for h in history)
    assert summary["best_step"] in [h["step"] for h in history]
    assert summary["stopped_early"] == (summary["steps"] < 15)
    assert outcome.manifest["config"]["train"]["eval_every"] == 2  # it changes the result: recorded
    log = [json.loads(line) for line in (outcome.path / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if r.get("event") == "dev"] == [h["step"] for h in history]
    with pytest.raises(UsageError, match=r"needs dev \(and train_on='train'\) \(pass dev=FILE"):
        finetune(**dict(task="ner", train=train, model=str(model), out=tmp_path / "x", device="cpu",
                                     **dict(batch_size=8, early_stopping=2)))
    assert not (tmp_path / "x").exists()
