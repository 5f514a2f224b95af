"""How `w2v` cost grows with the corpus: 10M, 100M and 1B tokens, and 1 vs 2 workers.

The larger corpora are the real biomedical corpus streamed again and again,
each pass with its words shuffled inside every sentence (a different
permutation per pass, seeded), so word2vec cannot learn a repeated text
by heart and the vocabulary stays the real corpus's. Sizes count
whitespace-separated words of the raw text; greenadapt's tokens (the model's
pre-tokenizer splits punctuation off) come out ~20% more.

Each point is one ``greenadapt w2v`` process under ``/usr/bin/time -v`` (peak
memory is its maximum resident set) with a fresh pre-tokenization cache;
pre-tokenization, vocabulary and training seconds come from its manifest.
Defaults: 1 epoch (the cost per token of an epoch is what must stay flat),
dim 384, min_count 5, ``--max-vocab 100000``.

Resumable: each point is written to ``<out>/results.jsonl`` as it finishes
and skipped on a rerun; generated corpora are kept (delete them after).

    python bench/bench_corpus_scale.py --out /tmp/bench-scale                    # 10M, 100M, 1B
    python bench/bench_corpus_scale.py --out /tmp/bench-scale --sizes 10M --workers 1 2
    python bench/bench_corpus_scale.py --out /tmp/bench-scale --plot docs/img/w2v-scale.png
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from shared_data import SHARED_DATA

REPO = Path(__file__).resolve().parent.parent
SHARED_CORPUS = SHARED_DATA / "corpora" / "biomed-10m.txt.gz"
SIZES = {"10M": 10_000_000, "100M": 100_000_000, "1B": 1_000_000_000}


def build_corpus(source: Path, tokens: int, dest: Path, seed: int = 0) -> int:
    """Stream ``source`` repeatedly into ``dest`` until ``tokens`` words; each pass shuffles words inside lines."""
    done_marker = dest.with_suffix(".done")
    if done_marker.exists():
        return int(done_marker.read_text())
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        lines = [line.split() for line in handle]
    lines = [words for words in lines if words]
    flat = np.array([w for words in lines for w in words], dtype=object)
    lengths = np.array([len(words) for words in lines])
    line_of_word = np.repeat(np.arange(len(lines)), lengths)
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    rng = np.random.default_rng(seed)
    written = 0
    tmp = dest.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        passes = 0
        while written < tokens:
            # Sorting by (line, random key) permutes the words within each line and keeps lines in order.
            order = np.lexsort((rng.random(len(flat)), line_of_word)) if passes else np.arange(len(flat))
            shuffled = flat[order].tolist()
            text = []
            for i in range(len(lines)):
                start, end = bounds[i], bounds[i + 1]
                text.append(" ".join(shuffled[start:end]))
                written += int(end - start)
                if written >= tokens:
                    break
            out.write("\n".join(text) + "\n")
            passes += 1
    tmp.rename(dest)
    done_marker.write_text(str(written))
    return written


def run_point(corpus: Path, out: Path, *, workers: int, epochs: int, max_vocab: int | None, min_count: int) -> dict:
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)  # a fresh pre-tokenization cache
    command = [
        sys.executable, "-m", "greenadapt", "w2v", "--corpus", str(corpus), "--workdir", str(work), "--out", str(work / "w2v"),
        "--epochs", str(epochs), "--workers", str(workers), "--w2v-min-count", str(min_count), "--seed", "1", "--json", "--quiet",
    ]
    if max_vocab:
        command += ["--max-vocab", str(max_vocab)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "GREENADAPT_CODECARBON": "0"}
    started = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    peak_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    manifest = json.loads(done.stdout)
    stats = manifest["stats"]
    pretok_bytes = (Path(stats["pretok_cache"]) / "corpus.txt").stat().st_size
    shutil.rmtree(work, ignore_errors=True)  # the pre-tokenized copy of a 1B corpus is ~7 GB
    return {
        "tokens": stats["tokens"],
        "types": stats["types"],
        "vocab_size": stats["vocab_size"],
        "wall_s": round(wall, 1),
        "pretok_s": stats["pretok_seconds"],
        "vocab_s": stats["vocab_seconds"],
        "train_s": stats["train_seconds"],
        "peak_rss_mib": round(peak_kib / 1024),
        "pretok_file_mib": round(pretok_bytes / 2**20),
        "ns_per_token_pretok": round(1e9 * stats["pretok_seconds"] / stats["tokens"], 1),
        "ns_per_token_train": round(1e9 * stats["train_seconds"] / (stats["tokens"] * epochs), 1),
        "ns_per_token_total": round(1e9 * wall / stats["tokens"], 1),
    }


def plot(rows: list[dict], dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((r for r in rows if r["workers"] == max(r["workers"] for r in rows)), key=lambda r: r["tokens"])
    fig, (time_ax, mem_ax) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    tokens = [r["tokens"] for r in rows]
    for key, label in (("ns_per_token_pretok", "pre-tokenization"), ("ns_per_token_train", "word2vec (per epoch)"),
                       ("ns_per_token_total", "w2v stage, all")):
        time_ax.plot(tokens, [r[key] for r in rows], marker="o", label=label)
    time_ax.set_xscale("log")
    time_ax.set_xlabel("corpus tokens")
    time_ax.set_ylabel("ns per token")
    time_ax.set_ylim(bottom=0)
    time_ax.legend(fontsize=8)
    time_ax.set_title(f"time per token ({rows[0]['workers']} workers)", fontsize=9)
    mem_ax.plot(tokens, [r["peak_rss_mib"] for r in rows], marker="o", color="#4c9a2a")
    mem_ax.set_xscale("log")
    mem_ax.set_xlabel("corpus tokens")
    mem_ax.set_ylabel("peak memory (MiB)")
    mem_ax.set_ylim(bottom=0)
    mem_ax.set_title("peak memory of the w2v process", fontsize=9)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=100)


def markdown(rows: list[dict]) -> str:
    lines = [
        "| corpus | workers | tokens | vocabulary | pre-tokenization (s) | word2vec, 1 epoch (s) | stage wall (s) "
        "| ns/token: pre-tok. | word2vec | all | peak memory |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["tokens"], r["workers"])):
        lines.append(
            f"| {r['size']} | {r['workers']} | {r['tokens']:,} | {r['vocab_size']:,} | {r['pretok_s']:.1f} | {r['train_s']:.1f} "
            f"| {r['wall_s']:.1f} | {r['ns_per_token_pretok']:.0f} | {r['ns_per_token_train']:.0f} | {r['ns_per_token_total']:.0f} "
            f"| {r['peak_rss_mib']:,} MiB |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=SHARED_CORPUS)
    parser.add_argument("--out", type=Path, required=True, help="folder for generated corpora and results (resumable)")
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--workers", type=int, nargs="+", default=[2])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--w2v-min-count", type=int, default=5)
    parser.add_argument("--max-vocab", type=int, default=100_000, help="0: none")
    parser.add_argument("--plot", type=Path, default=None, help="write the curves to this PNG from the results so far")
    parser.add_argument("--markdown", action="store_true", help="print the results so far as a markdown table")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    if args.plot or args.markdown:
        if args.plot:
            plot(rows, args.plot)
        if args.markdown:
            print(markdown(rows))
        return
    for size in args.sizes:
        corpus = args.out / f"corpus-{size}.txt"
        started = time.perf_counter()
        words = build_corpus(args.corpus, SIZES[size], corpus)
        print(f"{size}: corpus of {words:,} words ready ({time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
        for workers in args.workers:
            key = {"size": size, "workers": workers, "epochs": args.epochs, "max_vocab": args.max_vocab or None,
                   "min_count": args.min_count}
            if any(all(r.get(k) == v for k, v in key.items()) for r in rows):
                continue
            row = {**key, "raw_words": words, **run_point(corpus, args.out, workers=workers, epochs=args.epochs,
                                                          max_vocab=args.max_vocab or None, min_count=args.min_count)}
            rows.append(row)
            with open(results, "a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
