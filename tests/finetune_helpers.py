"""Builders for the finetune tests: a tiny "expanded" model folder and small task files.

An expanded folder mimics what ``greenadapt expand`` writes: the domain
tokenizer T̂ (the general WordPiece vocabulary plus new whole words, ids from
the old vocabulary size on) at the top, the general tokenizer in
``general-tokenizer/``, and an embedding matrix with one extra row per new word.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conftest import build_tiny_bert

# Words the tiny general vocabulary splits into pieces; T̂ keeps them whole.
NEW_WORDS = ("tachycardia", "leukemia", "melanoma", "insulin", "apoptosis", "glioma", "kinase", "sepsis")

DISEASE_WORDS = ("tachycardia", "leukemia", "melanoma", "glioma", "sepsis", "cancer", "tumor", "infection")
OTHER_WORDS = ("the", "of", "patients", "with", "and", "study", "cells", "insulin", "kinase", "was", "in", "high")


def build_tiny_expanded(
    folder: Path,
    *,
    new_words: Sequence[str] = NEW_WORDS,
    head: str = "base",
    extra_rows: int = 0,
    seed: int = 0,
    dropout: float | None = None,
) -> Path:
    """A tiny BERT with a domain tokenizer; ``extra_rows`` more added rows with no tokenizer entry beyond ``new_words``."""
    import torch
    from transformers import AutoModel, AutoModelForMaskedLM

    build_tiny_bert(folder, head=head, seed=seed)
    general = folder / "general-tokenizer"
    general.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(folder / name, general / name)

    spec = json.loads((folder / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    old_size = len(vocab)
    added = [w for w in new_words if w not in vocab]
    added += [f"zzfiller{i}" for i in range(extra_rows)]
    for word in added:
        vocab[word] = len(vocab)
    (folder / "tokenizer.json").write_text(json.dumps(spec))

    cls = AutoModelForMaskedLM if head == "mlm" else AutoModel
    model = cls.from_pretrained(str(folder))
    if dropout is not None:
        model.config.hidden_dropout_prob = dropout
        model.config.attention_probs_dropout_prob = dropout
    torch.manual_seed(seed + 1)
    model.resize_token_embeddings(old_size + len(added), mean_resizing=False)
    with torch.no_grad():
        rows = model.get_input_embeddings().weight
        rows[old_size:] = torch.randn(len(added), rows.shape[1]) * 0.02
    model.save_pretrained(str(folder))
    return folder


def set_dropout(folder: Path, value: float) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["hidden_dropout_prob"] = value
    config["attention_probs_dropout_prob"] = value
    (folder / "config.json").write_text(json.dumps(config))


def write_ner_file(path: Path, n_sentences: int, *, seed: int = 0, typed: bool = False, scheme: str = "BIO") -> Path:
    """Synthetic NER sentences, word<TAB>label, where disease words (and the word after 'of' a disease) are entities."""
    import random

    rng = random.Random(seed)
    lines = []
    for _ in range(n_sentences):
        length = rng.randint(3, 12)
        words, labels = [], []
        while len(words) < length:
            if rng.random() < 0.3:
                span = [rng.choice(DISEASE_WORDS) for _ in range(rng.randint(1, 2))]
                kind = "-Disease" if typed else ""
                if scheme == "BIOES" and len(span) == 1:
                    tags = [f"S{kind}"]
                elif scheme == "BIOES":
                    tags = [f"B{kind}"] + [f"I{kind}"] * (len(span) - 2) + [f"E{kind}"]
                else:
                    tags = [f"B{kind}"] + [f"I{kind}"] * (len(span) - 1)
                words += span + [rng.choice(OTHER_WORDS)]  # an O word after each entity keeps boundaries learnable
                labels += tags + ["O"]
            else:
                words.append(rng.choice(OTHER_WORDS))
                labels.append("O")
        lines += [f"{w}\t{t}" for w, t in zip(words, labels, strict=True)] + [""]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_classify_file(path: Path, n: int, *, seed: int = 0, pairs: bool = False, fmt: str = "jsonl") -> Path:
    """Synthetic texts labelled 'disease' when they mention a disease word, else 'other'."""
    import random

    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.choice(["disease", "other"])
        words = [rng.choice(OTHER_WORDS) for _ in range(rng.randint(3, 8))]
        if label == "disease":
            words.insert(rng.randrange(len(words)), rng.choice(DISEASE_WORDS))
        text = " ".join(words)
        pair = " ".join(rng.choice(OTHER_WORDS) for _ in range(3)) if pairs else None
        rows.append((text, pair, label))
    if fmt == "jsonl":
        lines = [json.dumps({"text": t, **({"text_b": p} if pairs else {}), "label": lab}) for t, p, lab in rows]
    else:
        header = "sentence1\tsentence2\tlabel" if pairs else "sentence\tlabel"
        lines = [header] + [f"{t}\t{p}\t{lab}" if pairs else f"{t}\t{lab}" for t, p, lab in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def tiny_comparison(root: Path) -> dict[str, Path]:
    """What a compare of tiny models needs: a plain model (base), an expanded one (green), NER train and test files."""
    return {
        "base": build_tiny_bert(root / "base", head="base"),
        "green": build_tiny_expanded(root / "green"),
        "train": write_ner_file(root / "train.tsv", 32, seed=1),
        "test": write_ner_file(root / "test.tsv", 40, seed=2),
    }


def loop_settings(**values: Any) -> Any:
    """What finetune's training loop receives: finetune's settings as made, the NER task's defaults filled in."""
    from greenadapt.runners.finetune.settings import FinetuneSettings
    from greenadapt.tasks import get_task

    return get_task("ner").filled(FinetuneSettings(task="ner", train=Path("train.tsv"), **values))


def comparison(out: Path, **values: Any) -> Any:
    """One comparison as compare runs it: its settings as made, its folder ``out``."""
    from greenadapt.comparison.recipe import Comparison
    from greenadapt.comparison.settings import CompareSettings
    from greenadapt.options import Run

    return Comparison(CompareSettings(**values), Run(out=out))
