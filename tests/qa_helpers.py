"""Tiny QA models and SQuAD files for the ``qa`` tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from conftest import build_tiny_bert

NEW_WORDS = ("tachycardias", "coronavirus", "covid", "myocarditis", "ventilation")


def build_tiny_expanded_qa(folder: Path, new_words: tuple[str, ...] = NEW_WORDS, seed: int = 0) -> Path:
    """A tiny QA model laid out like `greenadapt expand` output: T̂ on top, T_LM in general-tokenizer/."""
    import torch
    from transformers import BertForQuestionAnswering

    build_tiny_bert(folder, head="qa", seed=seed)
    general = folder / "general-tokenizer"
    general.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(folder / name, general / name)
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = spec["model"]["vocab"]
    for word in new_words:
        if word not in vocab:
            vocab[word] = len(vocab)
    (folder / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    model = BertForQuestionAnswering.from_pretrained(folder)
    old_rows = model.get_input_embeddings().weight.shape[0]
    torch.manual_seed(seed + 1)
    model.resize_token_embeddings(len(vocab))
    with torch.no_grad():
        model.get_input_embeddings().weight[old_rows:].normal_(0.0, 0.02)
    model.save_pretrained(folder)
    return folder


def squad_file(path: Path, articles: list[dict[str, Any]], **top: Any) -> Path:
    path.write_text(json.dumps({"data": articles, **top}), encoding="utf-8")
    return path


def paragraph(context: str, *qas: tuple[Any, str, list[tuple[str, int]]]) -> dict[str, Any]:
    return {
        "context": context,
        "qas": [
            {"id": qid, "question": question, "answers": [{"text": t, "answer_start": s} for t, s in answers]}
            for qid, question, answers in qas
        ],
    }


def record_runner_dtypes(monkeypatch: Any) -> list[object]:
    """The autocast dtype of every QaRunner made from here on, on a CPU faked to have native bf16 with auto at bf16
    (a user's default): None is fp32."""
    from greenadapt.compute.distributed import CPU_AUTO_PRECISION_ENV
    from greenadapt.inference.qa import infer

    monkeypatch.setenv(CPU_AUTO_PRECISION_ENV, "bf16")
    monkeypatch.setattr("greenadapt.machine.devices.cpu_has_native_bf16", lambda cpuinfo="/proc/cpuinfo": True)
    dtypes: list[object] = []
    real = infer.QaRunner.__init__

    def recorded(self: Any, *args: Any, **keywords: Any) -> None:
        real(self, *args, **keywords)
        dtypes.append(self.dtype)

    monkeypatch.setattr(infer.QaRunner, "__init__", recorded)
    return dtypes
