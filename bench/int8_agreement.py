"""int8 against fp32, and int8 against itself in other batches: the same sentences, greenadapt's own entry points.

For a fine-tuned NER run: the share of sentences whose entities (offsets, labels) under ``--runtime onnx --quantize
int8`` are fp32's (ONNX fp32, whose entities are torch fp32's), and whether int8 gives every sentence the same
entities and scores alone, in shuffled batches of 7 and at predict's default batch (issue 85, items 1 and 2). With
``--test``, entity F1 of fp32 and int8 on the labelled set (``greenadapt evaluate``).

    python bench/int8_agreement.py --run RUN --corpus ../shared/data/corpora/biomed-10m.txt.gz --sentences 5000 \\
        --test ../shared/data/ner/NCBI-disease/test.tsv --json int8-agreement.json
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "bench"))

from bench_serving import corpus_lines  # noqa: E402


def entities(model: Any, texts: list[str], batch: int, order: list[int] | None = None) -> list[list[tuple[Any, ...]]]:
    """Each text's entities (start, end, label, score), predicted ``batch`` texts a call in ``order``."""
    order = order if order is not None else list(range(len(texts)))
    found: dict[int, list[tuple[Any, ...]]] = {}
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        for index, predicted in zip(chunk, model.predict([texts[i] for i in chunk]), strict=True):
            found[index] = [(e.start, e.end, e.label, float(e.score)) for e in predicted]
    return [found[i] for i in range(len(texts))]


def same_spans(one: list[tuple[Any, ...]], other: list[tuple[Any, ...]]) -> bool:
    return [e[:3] for e in one] == [e[:3] for e in other]


def score_gap(one: list[list[tuple[Any, ...]]], other: list[list[tuple[Any, ...]]]) -> float:
    gaps = [abs(a[3] - b[3]) for x, y in zip(one, other, strict=True) if same_spans(x, y) for a, b in zip(x, y, strict=True)]
    return max(gaps, default=0.0)


def f1(run: Path, test: Path, int8: bool) -> float:
    """Entity F1 (%) of ``run`` on ``test`` under ONNX Runtime, fp32 or int8: ``greenadapt evaluate``, its headline pooling."""
    command = [sys.executable, "-m", "greenadapt", "evaluate", str(test), "-m", str(run), "--runtime", "onnx", "--json", "--quiet"]
    done = subprocess.run(command + (["--quantize", "int8"] if int8 else []), capture_output=True, text=True, check=True, cwd=HERE)
    result = json.loads(done.stdout)
    return 100 * float(result["scores"][result["headline_pool"]][result["metric"]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=5000)
    parser.add_argument("--test", type=Path, action="append", default=[], help="labelled NER test files (F1); repeatable")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import greenadapt

    texts = corpus_lines(args.corpus, args.sentences)
    fp32 = entities(greenadapt.load(args.run, runtime="onnx"), texts, 64)
    int8_model = greenadapt.load(args.run, runtime="onnx", quantize="int8")
    int8 = entities(int8_model, texts, 64)
    alone = entities(int8_model, texts, 1)
    shuffled = list(range(len(texts)))
    random.Random(0).shuffle(shuffled)
    sevens = entities(int8_model, texts, 7, shuffled)
    result: dict[str, Any] = {
        "run": str(args.run), "sentences": len(texts),
        "int8 = fp32 (sentences)": sum(same_spans(a, b) for a, b in zip(int8, fp32, strict=True)) / len(texts),
        "int8 in batches of 64 = alone (sentences)": sum(same_spans(a, b) for a, b in zip(int8, alone, strict=True)) / len(texts),
        "int8 shuffled in 7s = alone (sentences)": sum(same_spans(a, b) for a, b in zip(sevens, alone, strict=True)) / len(texts),
        "largest score difference, batches vs alone": max(score_gap(int8, alone), score_gap(sevens, alone)),
    }
    for test in args.test:
        result[f"F1 {test.parent.name} fp32"] = f1(args.run, test, False)
        result[f"F1 {test.parent.name} int8"] = f1(args.run, test, True)
    for key, value in result.items():
        print(f"{key}: {value:.4f}" if isinstance(value, float) else f"{key}: {value}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
