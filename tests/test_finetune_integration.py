"""The real MiniLM model on slices of the real NER and GLUE data (a few steps; not an accuracy test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from greenadapt.inference.settings import LoadSettings
from greenadapt.inference.labelling import run_predict
from greenadapt import finetune


def _head(source: Path, target: Path, sentences: int) -> Path:
    """The first ``sentences`` blank-line-separated sentences of a column file (a temporary slice)."""
    blocks = source.read_text(encoding="utf-8").split("\n\n")[:sentences]
    target.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return target


@pytest.mark.integration
def test_minilm_ner_on_ncbi_slice(minilm_path: Path, shared_data: Path, tmp_path: Path) -> None:
    ncbi = shared_data / "ner" / "NCBI-disease"
    train = _head(ncbi / "train.tsv", tmp_path / "train.tsv", 64)
    test = _head(ncbi / "test.tsv", tmp_path / "test.tsv", 16)
    options = dict(
        task="ner", train=train, test=test, model=str(minilm_path), out=tmp_path / "run",
        **dict(max_steps=2, batch_size=16), device="cpu",
    )
    outcome = finetune(**options)
    assert outcome.manifest["stats"]["mix"] == 0.0  # MiniLM alone has no domain tokenizer
    metrics = json.loads((outcome.path / "metrics.json").read_text())["per_seed"]["42"]["test"]["general"]
    assert 0.0 <= metrics["f1"] <= 1.0 and metrics["gold_entities"] > 0
    result = run_predict(outcome.path, test, tmp_path / "pred.tsv", options=LoadSettings(device="cpu"))
    assert result.metrics is not None and result.metrics["f1"] == pytest.approx(metrics["f1"])


@pytest.mark.integration
def test_minilm_cola_numbered_columns(minilm_path: Path, shared_data: Path, tmp_path: Path) -> None:
    cola = shared_data / "glue" / "CoLA"
    train = tmp_path / "train.tsv"
    train.write_text("".join(cola.joinpath("train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)[:48]))
    options = dict(
        task="classify", train=train, test=cola / "dev.tsv", model=str(minilm_path), out=tmp_path / "run",
        **dict(text_field="3", label_field="1"), metric="mcc",
        **dict(max_steps=2, batch_size=16), device="cpu",
    )
    outcome = finetune(**options)
    metrics = json.loads((outcome.path / "metrics.json").read_text())["per_seed"]["42"]["test"]["general"]
    assert -1.0 <= metrics["mcc"] <= 1.0 and metrics["examples"] == 527
    predictions = (outcome.path / "predictions" / "test.tsv").read_text().splitlines()
    assert len(predictions) == 527 and all(line.split("\t")[-1] in ("0", "1") for line in predictions)
