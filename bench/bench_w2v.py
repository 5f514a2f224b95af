"""`w2v` end to end vs raw gensim on the same, already pre-tokenized text.

In one run, on the same machine and with identical word2vec options
(CBOW, negative sampling, dim 384, 5 epochs, min_count 5, 2 workers by
default):

(a) ``greenadapt.adaptation.w2v.w2v_stage`` end to end with a fresh workspace and
    pre-tokenization cache: model/tokenizer loading, reading and
    decompressing the corpus, pre-tokenization with the model's
    normalizer, vocabulary, training, writing vectors.bin/counts.tsv and
    the checksummed manifests. Nothing heavy is imported before it, so it
    also pays the transformers/torch and gensim imports a CLI user pays.
(b) raw gensim: ``Word2Vec(corpus_file=<(a)'s pre-tokenized corpus.txt>)``
    with the same options (its own vocabulary scan included), gensim
    already imported.

Goal: (a)/(b) <= 1.15. Timings are wall clock and noisy on a shared
machine; run it when the machine is otherwise idle.

``--cold N`` times whole processes instead, as a shell user pays them, N times each, alternating:
``python -m greenadapt w2v`` with a fresh workspace (imports, pre-tokenization and all) against a
``python`` process that imports gensim and trains on that run's pre-tokenized text with the same
options, and against one that trains on the corpus file as it is (``--corpus`` must then be plain
text: what a user who runs gensim on their own file pays, vocabulary scan of the raw words and all).
Goal: median ratio <= 1.05.

    python bench/bench_w2v.py                       # ../shared/data/corpora/biomed-10m.txt.gz
    python bench/bench_w2v.py --corpus corpora/sample.txt.gz --out /tmp/bench-w2v
    python bench/bench_w2v.py --corpus biomed-2.9m.txt --epochs 3 --cold 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from shared_data import SHARED_DATA

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SHARED_CORPUS = SHARED_DATA / "corpora" / "biomed-10m.txt.gz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=SHARED_CORPUS, help="corpus file (default: biomed-10m)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the workspace and results (default: a temp dir)")
    parser.add_argument("--model", default=None, help="model folder (default: the bundled MiniLM)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--min-count", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cold", type=int, default=0, metavar="N", help="time N whole processes of each, alternating")
    args = parser.parse_args()
    if not args.corpus.is_file():
        sys.exit(f"corpus not found: {args.corpus} (pass --corpus PATH)")
    if args.cold:
        cold(args)
        return

    out = args.out or Path(tempfile.mkdtemp(prefix="bench-w2v-"))
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)  # a fresh pre-tokenization cache
    out.mkdir(parents=True, exist_ok=True)

    # (a) greenadapt end to end
    started = time.perf_counter()
    import greenadapt
    from greenadapt.adaptation import w2v as options  # CBOW's fixed window, negatives and sampling, as greenadapt trains them

    outcome = greenadapt.w2v([str(args.corpus)], model=args.model, dim=args.dim, epochs=args.epochs, min_count=args.min_count,
                             workers=args.workers,
                             seed=args.seed, workdir=work)
    a_seconds = time.perf_counter() - started
    stats = outcome.manifest["stats"]
    pretokenized = Path(stats["pretok_cache"]) / "corpus.txt"

    # (b) raw gensim on the same pre-tokenized text
    from gensim.models import Word2Vec

    started = time.perf_counter()
    raw = Word2Vec(
        corpus_file=str(pretokenized),
        vector_size=args.dim,
        epochs=args.epochs,
        min_count=args.min_count,
        workers=args.workers,
        seed=args.seed,
        sg=0,
        hs=0,
        negative=options.NEGATIVE,
        window=options.WINDOW,
        sample=options.SAMPLE,
    )
    b_seconds = time.perf_counter() - started
    b_train = raw.total_train_time

    ours = [line.split("\t", 1)[0] for line in (outcome.path / "counts.tsv").read_text(encoding="utf-8").splitlines()]
    result = {
        "corpus": str(args.corpus),
        "corpus_mb": round(args.corpus.stat().st_size / 1e6, 1),
        "lines": stats["lines"],
        "tokens": stats["tokens"],
        "options": {k: getattr(args, k) for k in ("dim", "epochs", "min_count", "workers", "seed")},
        "a_greenadapt_seconds": round(a_seconds, 2),
        "a_pretok_seconds": stats["pretok_seconds"],
        "a_vocab_seconds": stats["vocab_seconds"],
        "a_train_seconds": stats["train_seconds"],
        "a_other_seconds": round(a_seconds - stats["pretok_seconds"] - stats["vocab_seconds"] - stats["train_seconds"], 2),
        "a_words_per_s": stats["words_per_s"],
        "a_vocab_size": stats["vocab_size"],
        "b_gensim_seconds": round(b_seconds, 2),
        "b_train_seconds": round(b_train, 2),
        "b_words_per_s": round(stats["tokens"] * args.epochs / max(b_train, 1e-9)),
        "b_vocab_size": len(raw.wv),
        "same_vocabulary": ours == raw.wv.index_to_key,
        "ratio": round(a_seconds / b_seconds, 3),
        "goal": 1.15,
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "output": str(outcome.path),
    }
    (out / "bench_w2v.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print()
    print("| corpus | tokens | greenadapt w2v (s) | of which pretok (s) | raw gensim (s) | ratio | words/s (a / b) | vocab (a / b) |")
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.corpus.name} | {stats['tokens']:,} | {a_seconds:.1f} | {stats['pretok_seconds']:.1f} | {b_seconds:.1f} "
        f"| {result['ratio']:.3f} | {result['a_words_per_s']:,} / {result['b_words_per_s']:,} "
        f"| {result['a_vocab_size']:,} / {result['b_vocab_size']:,} |"
    )


RAW_GENSIM = """
import sys
from gensim.models import Word2Vec

corpus, dim, epochs, min_count, workers, seed, negative, window, sample = sys.argv[1:]
Word2Vec(corpus_file=corpus, vector_size=int(dim), epochs=int(epochs), min_count=int(min_count), workers=int(workers),
         seed=int(seed), sg=0, hs=0, negative=int(negative), window=int(window), sample=float(sample))
"""


def cold(args: argparse.Namespace) -> None:
    """Whole processes, N of each, alternating: the CLI as a shell user runs it against raw gensim."""
    import statistics
    import subprocess

    from greenadapt.adaptation import w2v as options  # CBOW's fixed window, negatives and sampling, as greenadapt trains them

    out = args.out or Path(tempfile.mkdtemp(prefix="bench-w2v-cold-"))
    out.mkdir(parents=True, exist_ok=True)
    def raw_gensim(corpus: Path) -> float:
        """Seconds of a process that imports gensim and trains on ``corpus`` with the same options."""
        command = [sys.executable, "-c", RAW_GENSIM, str(corpus), str(args.dim), str(args.epochs), str(args.min_count),
                   str(args.workers), str(args.seed), str(options.NEGATIVE), str(options.WINDOW), str(options.SAMPLE)]
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        return time.perf_counter() - started

    ours, theirs, on_raw_text, pretokenized = [], [], [], None
    for run in range(args.cold):
        work = out / f"work-{run}"
        shutil.rmtree(work, ignore_errors=True)  # a fresh workspace: pre-tokenization is paid every time
        command = [sys.executable, "-m", "greenadapt", "w2v", "--corpus", str(args.corpus), "--workdir", str(work), "--dim", str(args.dim),
                   "--epochs", str(args.epochs), "--w2v-min-count", str(args.min_count), "--workers", str(args.workers),
                   "--seed", str(args.seed),
                   "--quiet", "--json"] + (["--model", args.model] if args.model else [])
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        ours.append(time.perf_counter() - started)
        pretokenized = Path(json.loads(done.stdout)["stats"]["pretok_cache"]) / "corpus.txt"
        theirs.append(raw_gensim(pretokenized))
        if args.corpus.suffix not in (".gz", ".bz2", ".xz"):  # gensim's corpus_file reads plain text only
            on_raw_text.append(raw_gensim(args.corpus))
    result = {
        "corpus": str(args.corpus), "tokens": sum(len(line.split()) for line in open(pretokenized, encoding="utf-8"))
        if pretokenized else None,
        "epochs": args.epochs, "workers": args.workers, "runs": args.cold,
        "greenadapt_cli_seconds": [round(t, 2) for t in ours], "raw_gensim_seconds": [round(t, 2) for t in theirs],
        "ratios": [round(a / b, 3) for a, b in zip(ours, theirs, strict=True)],
        "median_ratio": round(statistics.median(a / b for a, b in zip(ours, theirs, strict=True)), 3), "goal": 1.05,
        "raw_gensim_on_the_corpus_file_seconds": [round(t, 2) for t in on_raw_text],
        "ratios_to_the_corpus_file": [round(a / b, 3) for a, b in zip(ours, on_raw_text, strict=False)],
        "median_ratio_to_the_corpus_file": round(statistics.median(a / b for a, b in zip(ours, on_raw_text, strict=False)), 3)
        if on_raw_text else None,
        "cpu_count": os.cpu_count(), "load_average": os.getloadavg(),
    }
    (out / "bench_w2v_cold.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
