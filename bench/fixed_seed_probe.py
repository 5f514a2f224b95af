"""Fixed-seed output probe: every training command and `adapt` on tiny models, on CPU; one hash per output file.

Run it with two versions of the code and diff the two listings: a refactoring that
changes nothing prints the same hashes (training logs are hashed without their
wall-clock seconds, metrics files as sorted JSON). The workspace folder names embed
the corpus path, so they differ between two output folders without being content.

    PYTHONPATH=.:tests python bench/fixed_seed_probe.py /tmp/probe-new > /tmp/new.txt
    git worktree add /tmp/old REVISION
    (cd /tmp/old && PYTHONPATH=.:tests python bench/fixed_seed_probe.py /tmp/probe-old > /tmp/old.txt)
    diff <(sed 's/corpus-[0-9a-f]*/corpus-X/' /tmp/old.txt) <(sed 's/corpus-[0-9a-f]*/corpus-X/' /tmp/new.txt)
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import random
import sys
from pathlib import Path

WORDS = ["the", "patients", "with", "tachycardia", "and", "leukemia", "were", "in", "study", "of", "cells", "insulin", "kinase"]
CONTEXT = "patients with covid and myocarditis needed ventilation in the study of coronavirus cells"


def cli(*args: str) -> None:
    from greenadapt.cli import main

    sys.argv = ["greenadapt", *args]
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main()
        except SystemExit as exit_:
            if exit_.code:
                raise RuntimeError(f"greenadapt {' '.join(args)} exited with {exit_.code}") from None


def make_data(folder: Path) -> None:
    from finetune_helpers import build_tiny_expanded, write_classify_file, write_ner_file
    from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file

    folder.mkdir(parents=True)
    build_tiny_expanded(folder / "model", head="mlm", dropout=0.1)
    build_tiny_expanded_qa(folder / "qa_model")
    write_ner_file(folder / "ner_train.tsv", 40, seed=1)
    write_ner_file(folder / "ner_dev.tsv", 12, seed=2)
    write_classify_file(folder / "cls_train.jsonl", 40, seed=3)
    write_classify_file(folder / "cls_dev.jsonl", 12, seed=4)
    qas = [
        {"paragraphs": [paragraph(CONTEXT, (f"a{i}", "who needed ventilation?", [("patients", 0)]),
                                  (f"b{i}", "what study?", [("coronavirus", CONTEXT.index("coronavirus"))]))]}
        for i in range(4)
    ]
    squad_file(folder / "squad.json", qas)
    rng = random.Random(0)
    (folder / "corpus.txt").write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(400)) + "\n")


def run_all(out: Path) -> None:
    d, runs, work = out / "data", out / "runs", str(out / "work")
    model = str(d / "model")
    common = ["--device", "cpu", "--workdir", work, "-q"]
    cli("finetune", "--task", "ner", "--train", str(d / "ner_train.tsv"), "--dev", str(d / "ner_dev.tsv"), "--test", str(d / "ner_dev.tsv"),
        "--model", model, "--epochs", "2", "--batch-size", "8", "--grad-accum", "2", "--lr", "1e-3", "--seeds", "1,2", "--save-every", "3",
        "--out", str(runs / "ner"), *common)
    cli("finetune", "--task", "classify", "--train", str(d / "cls_train.jsonl"), "--dev", str(d / "cls_dev.jsonl"), "--model", model,
        "--train-embeddings", "new", "--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--out", str(runs / "cls"), *common)
    cli("finetune", "--task", "qa", "--train", str(d / "squad.json"), "--test", str(d / "squad.json"), "--model", str(d / "qa_model"),
        "--max-steps", "6", "--batch-size", "4", "--grad-accum", "2", "--max-length", "48", "--doc-stride", "16", "--seed", "5",
        "--out", str(runs / "qa"), *common)
    cli("pretrain", "--corpus", str(d / "corpus.txt"), "--model", model, "--max-steps", "8", "--batch-size", "8", "--grad-accum", "2",
        "--max-length", "24", "--heldout", "8", "--mix", "0.5", "--head-warmup-steps", "2", "--eval-every", "4", "--save-every", "3",
        "--out", str(runs / "mlm"), *common)
    cli("pretrain", "--corpus", str(d / "corpus.txt"), "--model", model, "--max-steps", "5", "--batch-size", "8", "--max-length", "24",
        "--heldout", "8", "--train", "new-rows", "--out", str(runs / "mlm-rows"), *common)
    cli("multitask", "--model", model, "--task", f"name=ner,type=ner,train={d / 'ner_train.tsv'},dev={d / 'ner_dev.tsv'}",
        "--task", f"name=cls,type=classify,train={d / 'cls_train.jsonl'},dev={d / 'cls_dev.jsonl'}", "--pal-size", "12", "--pal-heads", "3",
        "--batch-size", "8", "--epochs", "2", "--steps-per-epoch", "4", "--out", str(runs / "pals"), "--device", "cpu", "-q")
    cli("adapt", "--corpus", str(d / "corpus.txt"), "--model", model, "--workers", "1", "--min-count", "1", "--min-count-new", "1",
        "--workdir", str(out / "adapt"), "-q")


def digest(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".jsonl":  # training logs: everything but the wall clock
        records = [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in data.decode().splitlines()]
        data = "\n".join(json.dumps(r, sort_keys=True) for r in records).encode()
    elif path.name == "metrics.json":
        data = json.dumps(json.loads(data), sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()[:16]


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="an empty or new folder for the probe's data and runs")
    out = parser.parse_args().out
    if out.exists() and not out.is_dir():
        parser.error(f"{out} is not a folder")
    # the tests' model builders (tests/finetune_helpers.py): on the path whether or not PYTHONPATH names tests/
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    if not (out / "data").exists():
        make_data(out / "data")
    run_all(out)
    for path in sorted([*(out / "runs").rglob("*"), *(out / "adapt").rglob("*")]):
        if path.is_file() and (path.suffix in (".safetensors", ".bin", ".npy", ".jsonl") or path.name in ("metrics.json", "vocab.txt")):
            print(digest(path), path.relative_to(out))


if __name__ == "__main__":
    main()
