"""The domain tokenizer T̂ of a byte-level BPE (RoBERTa/ModernBERT-style) or Unigram (DeBERTa-v3-style)
model against the plain fast tokenizer T_LM, and `align` + `expand` at 100k / 1M new words.

No such model can be downloaded here, so T_LM is trained in the run: a byte-level BPE (or Unigram) of
``--vocab`` entries on ``--train-lines`` corpus lines that the timed sentences do not include, and a
one-layer model of that family (hidden 384, as MiniLM) carries it. Then, as bench/bench_expand.py does
for MiniLM:

1. **Tokenizer throughput**: ``encode_batch`` of the same ``--sentences`` corpus sentences with T_LM and
   with T̂ built from the real new words (corpus words T_LM splits) and from those plus pronounceable
   pseudo-words up to each ``--sizes`` entry; build and ``AutoTokenizer`` load time; alternated
   ``--repeats`` times, median reported; the share of sentences T̂ tokenizes differently.
2. **align + expand**: a synthetic word2vec output (the vocabulary's whole words as a noisy linear image of
   their embeddings, plus N new words), then ``align_stage`` and ``expand_stage`` in one fresh child process
   per N: wall time and peak memory.

    python bench/bench_families.py --family bpe                 # ~10 min on 2 cores
    python bench/bench_families.py --family unigram --sizes 100000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_expand import (  # noqa: E402
    ALIGN_EXPAND_CHILD,
    SAMPLE_CORPUS,
    SHARED_CORPUS,
    pronounceable_words,
    read_sentences,
    write_synthetic_w2v,
)


def train_model(family: str, lines: list[str], vocab_size: int, folder: Path) -> Path:
    """A one-layer model of ``family`` (hidden 384) with a tokenizer of ``vocab_size`` trained on ``lines``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import DebertaV2Config, DebertaV2ForMaskedLM, PreTrainedTokenizerFast, RobertaConfig, RobertaForMaskedLM

    folder.mkdir(parents=True, exist_ok=True)
    if family == "bpe":
        backend = Tokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        backend = Tokenizer(models.Unigram())
        backend.normalizer = normalizers.NFKC()
        backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
        backend.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
        special = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=special, unk_token="[UNK]")
    backend.train_from_iterator(lines, trainer)
    torch.manual_seed(0)
    common = {"vocab_size": backend.get_vocab_size(), "hidden_size": 384, "num_hidden_layers": 1, "num_attention_heads": 6,
              "intermediate_size": 1536, "max_position_embeddings": 130}
    if family == "bpe":
        model = RobertaForMaskedLM(RobertaConfig(pad_token_id=1, **common))
        names = {"bos_token": "<s>", "eos_token": "</s>", "cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>",
                 "unk_token": "<unk>", "mask_token": "<mask>"}
    else:
        model = DebertaV2ForMaskedLM(DebertaV2Config(pad_token_id=0, **common))
        names = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]", "mask_token": "[MASK]"}
    model.save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=backend, **names).save_pretrained(folder)
    return folder


def bench_tokenizers(args: argparse.Namespace, model: Path, sentences: list[str], work: Path) -> list[dict]:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer, reachable_words, write_domain_tokenizer
    from greenadapt.corpus.word_splitter import TextRules, WordSplitter

    general = load_general_tokenizer(model)
    splitter = WordSplitter(TextRules.from_tokenizer(general.backend))
    counts: Counter[str] = Counter(w for line in splitter.split_lines(sentences) for w in line.split())
    unknown = [w for w, _ in counts.most_common() if not general.is_known(w)]
    real = [w for w, ok in zip(unknown, reachable_words(general, unknown), strict=True) if ok]
    variants: dict[str, list[str] | None] = {"T_LM": None, f"T̂ +{len(real):,} real": real}
    marker = general.family.word_token("")
    taken = set(real) | set(counts) | {token[len(marker):] for token in general.vocab if token.startswith(marker)}
    for size in args.sizes:
        variants[f"T̂ +{size:,}"] = (real + pronounceable_words(max(0, size - len(real)), taken))[:size]
    tokenizers: dict[str, Tokenizer] = {}
    rows: list[dict] = []
    for name, words in variants.items():
        info: dict = {"tokenizer": name, "family": general.family.name, "new_words": len(words or [])}
        folder = model if words is None else work / f"tok-{len(words)}"
        if words is not None:
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(model / "config.json", folder / "config.json")
            start = time.perf_counter()
            facts = write_domain_tokenizer(general, words, general.size, folder)
            info["build_s"] = round(time.perf_counter() - start, 3)
            info.update({k: v for k, v in facts.items() if k != "family"})
        start = time.perf_counter()
        AutoTokenizer.from_pretrained(str(folder))
        info["autotokenizer_load_s"] = round(time.perf_counter() - start, 3)
        tokenizers[name] = Tokenizer.from_file(str(folder / "tokenizer.json"))
        rows.append(info)
    reference = [e.ids for e in tokenizers["T_LM"].encode_batch(sentences)]
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, tokenizer in tokenizers.items():
            start = time.perf_counter()
            tokenizer.encode_batch(sentences)
            times[name].append(time.perf_counter() - start)
    for info in rows:
        encodings = tokenizers[info["tokenizer"]].encode_batch(sentences)
        median = statistics.median(times[info["tokenizer"]])
        info.update(sentences=len(sentences), seconds=round(median, 3),
                    tokens_per_sentence=round(sum(len(e.ids) for e in encodings) / len(sentences), 2),
                    sentences_changed=round(sum(e.ids != r for e, r in zip(encodings, reference, strict=True)) / len(sentences), 4))
    for info in rows:
        info["time_vs_T_LM"] = round(info["seconds"] / rows[0]["seconds"], 3)
    return rows


def synthetic_w2v(model: Path, folder: Path, n_new: int) -> Path:
    """A w2v stage folder: the model's whole words as a noisy linear image of its embeddings + n_new random words."""
    import numpy as np

    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer
    from greenadapt.artifacts.model_weights import read_input_embeddings
    from greenadapt.artifacts.pretrained import ModelRef

    general = load_general_tokenizer(model)
    embeddings = read_input_embeddings(model)
    marker = general.family.word_token("")
    # whole-word entries whose word maps back to them (a byte-mapped non-ASCII entry's characters are not its word)
    candidates = (t[len(marker):] for t in general.vocab if t.startswith(marker) and t[len(marker):].isalpha())
    ids = {w: general.word_id(w) for w in candidates}
    shared = sorted((w for w, i in ids.items() if i is not None), key=ids.__getitem__)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((384, embeddings.shape[1])).astype(np.float32)
    shared_vectors = embeddings[[general.word_id(w) for w in shared]] @ A.T
    shared_vectors += 0.1 * shared_vectors.std() * rng.standard_normal(shared_vectors.shape).astype(np.float32)
    config = {"model": ModelRef(model.name, model).identity(), **general.normalization(), "dim": 384}
    return write_synthetic_w2v(folder, config, shared, shared_vectors, pronounceable_words(n_new, set(shared), seed=1), rng)


def bench_expand(args: argparse.Namespace, model: Path, work: Path) -> list[dict]:
    rows = []
    for size in args.sizes:
        w2v = synthetic_w2v(model, work / f"w2v-{size}", size)
        align, out = work / f"align-{size}", work / f"expand-{size}"
        env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "GREENADAPT_CODECARBON": "0"}
        done = subprocess.run([sys.executable, "-c", ALIGN_EXPAND_CHILD, str(w2v), str(align), str(out)],
                              stdout=subprocess.PIPE, env=env, check=True, cwd="/")
        result = json.loads(done.stdout)
        rows.append({"new_words": result["stats"]["n_new"], "align_s": round(result["align_s"], 2),
                     "expand_s": round(result["expand_s"], 2),
                     "peak_rss_mib": round(result["peak_rss_mib"]),
                     "model_safetensors_mib": round((out / "model.safetensors").stat().st_size / 2**20)})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        for folder in (w2v, align, out):
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=("bpe", "unigram"), default="bpe")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--train-lines", type=int, default=100_000)
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-expand", action="store_true")
    parser.add_argument("--skip-tokenizers", action="store_true")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    corpus = SHARED_CORPUS if SHARED_CORPUS.is_file() else SAMPLE_CORPUS
    lines = read_sentences(corpus, args.sentences + args.train_lines)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-families-"))
    start = time.perf_counter()
    model = train_model(args.family, lines[args.sentences:], args.vocab, work / "model")
    print(json.dumps({"corpus": corpus.name, "tokenizer_training_s": round(time.perf_counter() - start, 1)}), file=sys.stderr, flush=True)
    result: dict = {"family": args.family, "corpus": corpus.name}
    if not args.skip_tokenizers:
        result["tokenizers"] = bench_tokenizers(args, model, lines[: args.sentences], work)
        print(json.dumps(result["tokenizers"], indent=1), file=sys.stderr, flush=True)
    if not args.skip_expand:
        result["expand"] = bench_expand(args, model, work)
    print(json.dumps(result, indent=1))
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    from shared_data import run_bench

    run_bench(main)
