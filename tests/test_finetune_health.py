"""Fine-tuning that does not learn is warned about, with the figures, once per kind."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.training.health import PATIENCE, WINDOW, TrainingHealth


def test_a_flat_loss_and_a_zero_dev_score_are_warned_about_after_patience() -> None:
    health = TrainingHealth()
    for _ in range(3 * WINDOW):
        health.record_loss(1.0)
    assert health.evaluated(0.0) == []  # too early: one evaluation
    new = health.evaluated(0.0)
    assert len(new) == 2 and PATIENCE == 2
    assert "dev score has stayed 0 after 2 evaluations" in new[0] and "--lr" in new[0]
    assert "has not fallen after 60 steps (mean 1.0000" in new[1]
    assert health.evaluated(0.0) == []  # each kind once


def test_a_learning_run_gets_no_warning() -> None:
    health = TrainingHealth()
    for step in range(3 * WINDOW):
        health.record_loss(2.0 / (1 + step))
    health.evaluated(0.1)
    assert health.evaluated(0.3) == [] and health.warnings == []


def test_finetune_records_the_warning_in_its_manifest(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from greenadapt.finetune.run import FinetuneOptions, run_finetune
    from greenadapt.finetune.train import TrainConfig

    model = build_tiny_expanded(tmp_path / "model")
    train = write_ner_file(tmp_path / "train.tsv", 48, seed=1)
    dev = write_ner_file(tmp_path / "dev.tsv", 16, seed=2)
    options = FinetuneOptions(task="ner", model=str(model), train=train, dev=dev, out=tmp_path / "run", device="cpu",
                              training=TrainConfig(lr=1e-12, epochs=4, batch_size=4))
    with caplog.at_level(logging.WARNING, logger="greenadapt"):
        outcome = run_finetune(options)
    warnings = next(iter(outcome.manifest["stats"]["training"].values()))["warnings"]
    assert any("training loss has not fallen" in w for w in warnings), warnings
    assert any("has not fallen" in r.getMessage() for r in caplog.records)
    json.dumps(warnings)
