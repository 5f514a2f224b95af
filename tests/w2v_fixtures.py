"""Hand-made w2v stage folders for the align/expand tests.

The w2v vectors of vocabulary words are an exact linear image of the
model's own embeddings (plus optional noise), so the correct least-squares
map is known; new domain words get vectors of their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from pathlib import Path

import numpy as np

from greenadapt.adaptation.vectors import write_counts, write_word2vec_binary
from greenadapt.artifacts.model_weights import read_input_embeddings
from greenadapt.artifacts.pretrained import ModelRef
from greenadapt.artifacts.stage import StageRun

DOMAIN_WORDS = [
    "tachycardia",
    "cardiomyopathy",
    "myocarditis",
    "hypertension",
    "thrombosis",
    "arrhythmia",
    "sleeplessness",
    "covid",
    "sars",
    "ace2",
]


def write_w2v_folder(
    folder: Path,
    model_path: Path,
    words: Sequence[str],
    vectors: np.ndarray,
    counts: Sequence[int],
    *,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    inputs: Sequence[dict[str, object]] = (),
) -> Path:
    """Write a finished ``w2v`` stage folder holding exactly these words, vectors and counts (read from ``inputs``)."""
    config = {
        "model": ModelRef(str(model_path), model_path).identity(),
        "lowercase": lowercase,
        "strip_accents": strip_accents,
        "dim": int(vectors.shape[1]),
    }
    with StageRun("w2v", folder, config, list(inputs), force=True) as run:
        write_word2vec_binary(run.tmp / "vectors.bin", words, vectors)
        write_counts(run.tmp / "counts.tsv", list(zip(words, counts)))
        run.commit(stats={"n_words": len(words)})
    return folder


def linear_w2v(
    folder: Path,
    model_path: Path,
    *,
    dim: int = 40,
    noise: float = 0.0,
    seed: int = 0,
    new_words: Sequence[str] = DOMAIN_WORDS,
    new_counts: Sequence[int] | None = None,
    lowercase: bool = True,
) -> tuple[Path, np.ndarray]:
    """A w2v folder whose shared-word vectors are ``A @ e + noise``; returns it and the true map ``pinv(A)``.

    Shared words are the vocabulary's whole-word entries (no ``##`` pieces,
    no ``[special]`` tokens); counts fall with the position, new words after.
    """
    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer

    rng = np.random.default_rng(seed)
    general = load_general_tokenizer(model_path)
    embeddings = read_input_embeddings(model_path).astype(np.float64)
    shared = sorted(
        (t for t in general.vocab if not t.startswith("##") and not (t.startswith("[") and t.endswith("]"))),
        key=general.vocab.__getitem__,
    )
    A = rng.standard_normal((dim, embeddings.shape[1]))
    shared_vectors = embeddings[[general.vocab[t] for t in shared]] @ A.T
    shared_vectors += noise * rng.standard_normal(shared_vectors.shape) * shared_vectors.std()
    new_vectors = rng.standard_normal((len(new_words), dim)) * shared_vectors.std()
    words = list(shared) + list(new_words)
    counts = list(range(1000 + len(shared), 1000, -1))
    counts += list(new_counts) if new_counts is not None else [100 - i for i in range(len(new_words))]
    vectors = np.vstack([shared_vectors, new_vectors]).astype(np.float32)
    write_w2v_folder(folder, model_path, words, vectors, counts, lowercase=lowercase)
    return folder, np.linalg.pinv(A)


def saved_tensors(folder: Path) -> dict[str, Any]:
    """Every tensor of ``folder``'s model.safetensors, by name."""
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), framework="pt") as reader:
        return {name: reader.get_tensor(name) for name in reader.keys()}


def listed_new_words(folder: Path) -> list[str]:
    """The new words of an expanded folder, in id order (new_words.tsv)."""
    return [line.split("\t")[0] for line in (folder / "new_words.tsv").read_text(encoding="utf-8").splitlines()]
