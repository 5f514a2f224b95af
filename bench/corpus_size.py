#!/usr/bin/env python3
"""How much text does the method need? Held-out cosine of the map against corpus size (docs/corpus-size.md).

Takes the first N lines of a corpus for each N, trains word2vec at greenadapt's
defaults and fits the lstsq map, and prints per size: tokens, word2vec words,
shared and new words, the held-out cosine (below 0.2 align warns that the map
is close to noise) and the mean cosine between two words' vectors (above 0.5
align warns that word2vec has not trained). Each size is a w2v/align stage
in ``--workdir``, so a rerun skips finished sizes::

    python bench/corpus_size.py --corpus ../shared/data/corpora/biomed-10m.txt.gz \\
        --lines 3000,10000,30000,100000,305445 --epochs 5 --workdir bench-corpus-size
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import greenadapt

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def head(corpus: Path, lines: int, out: Path) -> Path:
    """The first ``lines`` lines of ``corpus`` as a plain file (written once)."""
    if not out.is_file():
        opener = gzip.open if corpus.suffix == ".gz" else open
        with opener(corpus, "rt", encoding="utf-8") as source, open(out.with_suffix(".part"), "w", encoding="utf-8") as sink:
            for number, line in enumerate(source):
                if number >= lines:
                    break
                sink.write(line)
        out.with_suffix(".part").replace(out)
    return out


def measure(corpus: Path, lines: int, epochs: int, model: str | None, workdir: Path, dim: int | None = None) -> dict[str, object]:
    from greenadapt.adaptation.align import align_stage

    text = head(corpus, lines, workdir / f"{corpus.name.split('.')[0]}-{lines}.txt")
    started = time.monotonic()
    w2v = greenadapt.w2v([str(text)], model=model, epochs=epochs, dim=dim, workdir=workdir)
    align = align_stage(w2v=w2v.path)
    stats, w2v_stats = align.manifest["stats"], w2v.manifest["stats"]
    return {
        "lines": lines,
        "tokens": w2v_stats.get("tokens"),
        "words": stats.get("n_w2v"),
        "shared": stats.get("n_shared"),
        "new": stats.get("n_new"),
        "heldout_cosine": stats.get("heldout_cosine"),
        "w2v_mean_cosine": stats.get("w2v_mean_cosine"),
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--lines", default="3000,10000,30000,100000,305445", help="comma-separated line counts")
    parser.add_argument("--epochs", type=int, default=5, help="word2vec epochs (greenadapt's default: 5)")
    parser.add_argument("--model", default=None, help="the model (default: the bundled MiniLM)")
    parser.add_argument("--dim", type=int, default=None, help="word2vec dimension (default: the model's hidden size)")
    parser.add_argument("--workdir", type=Path, default=Path("bench-corpus-size"))
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = []
    print("| lines | tokens | word2vec words | shared | new | held-out cosine | mean cosine of two words |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for lines in (int(n) for n in args.lines.split(",")):
        row = measure(args.corpus, lines, args.epochs, args.model, args.workdir, args.dim)
        rows.append(row)
        print(f"| {row['lines']:,} | {row['tokens'] or 0:,} | {row['words']:,} | {row['shared']:,} | {row['new']:,} | "
              f"{row['heldout_cosine']:.3f} | {row['w2v_mean_cosine']:.3f} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"corpus": str(args.corpus), "epochs": args.epochs, "dim": args.dim, "rows": rows},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
