"""Memory of a long ``greenadapt predict`` (a cron job's day of text) against the plain transformers pipeline.

Both read the same N sentences of a corpus (one per line) and tag them with the same fine-tuned NER run:
``greenadapt predict`` (both tokenizers, mean-pooled, JSON lines out) and transformers' token-classification
pipeline on the run folder (one view; batches of the same size, results written out as they come). Each runs as its
own process; its resident memory (VmRSS of the process and its children) is sampled every half second, and the
table gives it after a quarter, half and all of the run's wall time, the peak, and the wall time: a flat line is
what a cron job needs.

    python bench/bench_predict_memory.py --run RUN_FOLDER --corpus ../shared/data/corpora/biomed-10m.txt.gz --sentences 60000
    # greenadapt's other runtimes beside its default (the ONNX export made before, by a first predict):
    python bench/bench_predict_memory.py ... --also="--runtime onnx --quantize int8" --no-pipeline

RUN_FOLDER: a fine-tuned NER run (``greenadapt finetune --task ner``, e.g. compare's ``base/seed-1``).
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PIPELINE = r"""
import json, sys
from transformers import pipeline
tagger = pipeline("token-classification", model=sys.argv[1], aggregation_strategy="simple", device=-1)
with open(sys.argv[2], encoding="utf-8") as source, open(sys.argv[3], "w", encoding="utf-8") as out:
    batch = []
    for line in source:
        batch.append(line.rstrip("\n"))
        if len(batch) == 256:
            for text, found in zip(batch, tagger(batch, batch_size=64)):
                entities = [{k: (float(v) if k == "score" else v) for k, v in e.items()} for e in found]
                out.write(json.dumps({"text": text, "entities": entities}) + "\n")
            batch = []
    if batch:
        for text, found in zip(batch, tagger(batch, batch_size=64)):
            entities = [{k: (float(v) if k == "score" else v) for k, v in e.items()} for e in found]
            out.write(json.dumps({"text": text, "entities": entities}) + "\n")
"""


def sentences(corpus: Path, n: int, out: Path) -> Path:
    opener = gzip.open if corpus.suffix == ".gz" else open
    written = 0
    with opener(corpus, "rt", encoding="utf-8") as source, open(out, "w", encoding="utf-8") as sink:
        for line in source:
            words = line.split()
            if 5 <= len(words) <= 60:
                sink.write(" ".join(words) + "\n")
                written += 1
                if written == n:
                    break
    return out


def rss_mib(pid: int) -> float:
    total = 0.0
    for candidate in [pid, *children(pid)]:
        try:
            for line in Path(f"/proc/{candidate}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def measure(command: list[str]) -> dict[str, float]:
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "GREENADAPT_HEARTBEAT": "0"})
    samples: list[tuple[float, float]] = []
    while process.poll() is None:
        samples.append((time.monotonic() - started, rss_mib(process.pid)))
        time.sleep(0.5)
    wall = time.monotonic() - started
    if process.returncode != 0:
        raise SystemExit(f"{command[:3]} failed: {process.stderr.read().decode()[-2000:] if process.stderr else ''}")

    def at(fraction: float) -> float:
        return max((rss for t, rss in samples if t <= fraction * wall), default=0.0)

    return {"quarter": at(0.25), "half": at(0.5), "end": at(1.0), "peak": max(rss for _, rss in samples), "wall": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=60_000)
    parser.add_argument("--also", action="append", default=[], metavar="OPTIONS",
                        help="another greenadapt predict with these options, e.g. '--runtime onnx --quantize int8' (repeatable)")
    parser.add_argument("--no-pipeline", action="store_true", help="leave transformers' pipeline out")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        text = sentences(args.corpus, args.sentences, Path(tmp) / "sentences.txt")
        views = "2 views, mean-pooled" if (args.run / "general-tokenizer").is_dir() else "1 view: a plain model"
        predict = [sys.executable, "-m", "greenadapt", "predict", str(text), "-m", str(args.run), "-q"]
        rows = {f"greenadapt predict ({views})": measure([*predict, "--output", str(Path(tmp) / "greenadapt.jsonl")])}
        for number, options in enumerate(args.also):
            rows[f"greenadapt predict ({views}) {options}"] = measure([*predict, "--output", str(Path(tmp) / f"also-{number}.jsonl"),
                                                                       *options.split()])
        if not args.no_pipeline:
            rows["transformers pipeline (1 view)"] = measure([sys.executable, "-c", PIPELINE, str(args.run), str(text),
                                                              str(Path(tmp) / "pipeline.jsonl")])
    print(f"{args.sentences:,} sentences of {args.corpus.name}; resident memory (MiB) by share of the run's wall time")
    print(f"| {'program':<70} | {'1/4':>6} | {'1/2':>6} | {'end':>6} | {'peak':>6} | {'wall s':>7} |")
    print(f"|{'-' * 72}|{'-' * 8}|{'-' * 8}|{'-' * 8}|{'-' * 8}|{'-' * 9}|")
    for name, row in rows.items():
        print(f"| {name:<70} | {row['quarter']:6.0f} | {row['half']:6.0f} | {row['end']:6.0f} | {row['peak']:6.0f} | {row['wall']:7.1f} |")


if __name__ == "__main__":
    main()
