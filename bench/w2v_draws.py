#!/usr/bin/env python3
"""How much the new rows depend on the word2vec draw, with one draw and with rows averaged over K draws.

The fine-tuned gain's spread over draws needs a GPU (bench/quality_controls.sh, docs/study.md); this measures its
cause on the CPU: two independent adaptations made by the same command (different ``--seed``) give each new word
two rows, and the closer those are, the less a user's one run depends on luck. Compared side by side:

- one draw: ``adapt --seed A`` against ``adapt --seed B`` (A, B = 1, 1 + K);
- K draws averaged: ``adapt --w2v-draws K --seed 1`` (draws 1..K) against ``--seed 1+K`` (draws K+1..2K).

Reported: the mean and the 10th percentile over new words of the cosine between the two rows of a word, and
their mean distance relative to the rows' norm. Resumable (every stage is reused on a rerun).

    python bench/w2v_draws.py --corpus ../shared/data/corpora/biomed-10m.txt.gz --draws 3 --workdir bench-draws
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def new_rows(folder: Path) -> tuple[list[str], np.ndarray]:
    from safetensors.numpy import load_file

    weights = load_file(str(folder / "model.safetensors"))
    key = next(k for k in weights if k.endswith("word_embeddings.weight"))
    stats = json.loads((folder / "manifest.json").read_text())["stats"]
    words = [line.split("\t")[0] for line in (folder / "new_words.tsv").read_text(encoding="utf-8").splitlines()]
    return words, weights[key][stats["first_new_id"]:].astype(np.float64)


def agreement(first: Path, second: Path) -> dict[str, float]:
    words_a, a = new_rows(first)
    words_b, b = new_rows(second)
    if words_a != words_b:
        raise SystemExit(f"{first} and {second} added different words: not draws of one command")
    cosine = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    relative = np.linalg.norm(a - b, axis=1) / ((np.linalg.norm(a, axis=1) + np.linalg.norm(b, axis=1)) / 2)
    return {"words": len(words_a), "cosine_mean": float(cosine.mean()), "cosine_p10": float(np.percentile(cosine, 10)),
            "relative_distance_mean": float(relative.mean())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--model", default=None, help="default: the bundled MiniLM")
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("bench-draws"))
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args(argv)
    from greenadapt.api import adapt

    common = {"model": args.model, "workdir": args.workdir / "work", "epochs": args.epochs, "min_count": 5}
    started = time.perf_counter()
    made = {}
    for label, seed, draws in (("one draw, seed 1", 1, 1), (f"one draw, seed {1 + args.draws}", 1 + args.draws, 1),
                               (f"{args.draws} draws from seed 1", 1, args.draws),
                               (f"{args.draws} draws from seed {1 + args.draws}", 1 + args.draws, args.draws)):
        out = args.workdir / f"expand-seed{seed}-draws{draws}"
        made[label] = adapt([args.corpus], seed=seed, w2v_draws=draws, out=out, **common).expand.path
        print(f"{label}: {made[label]} ({time.perf_counter() - started:.0f} s so far)", file=sys.stderr)
    labels = list(made)
    rows = {"one draw": agreement(made[labels[0]], made[labels[1]]),
            f"{args.draws} draws averaged": agreement(made[labels[2]], made[labels[3]])}
    (args.workdir / "agreement.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("| rows | words | cosine between two runs (mean) | 10th percentile | distance / norm |")
    print("|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['words']:,} | {row['cosine_mean']:.3f} | {row['cosine_p10']:.3f} | {row['relative_distance_mean']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
