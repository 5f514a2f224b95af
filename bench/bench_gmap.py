"""G-MAP: step time of `finetune --gmap chunk` vs without, and F1 of no fusion vs single vs chunk on ChemProt.

Domain model: an expanded MiniLM (a `greenadapt adapt`/`expand` output
folder, T̂ + T_LM); general model: the MiniLM it was expanded from (the
default: read from the expand manifest). Both parts call the same library
function as `greenadapt finetune` (``greenadapt.finetune``) in this process.

(a) ``step``: finetune's own optimizer step (the training runtime's ``Trainer.step`` on ``FinetuneTask``: collate,
forward, loss, backward, AdamW, the row-wise added embeddings) on the same
ChemProt batches (50/50 tokenizer mixture, batch ``--batch-size``), for the
plain domain model and the same model with ``--gmap chunk``, alternating
step by step so load from other processes affects both alike. Reported: the
median over ``--steps`` steps (after ``--skip`` warm-up steps) of process CPU
seconds and of wall seconds per step, and the ratio chunk / none.

(b) ``f1``: train on ``--train-limit`` ChemProt training examples (a fixed
random subset; 0 = all 4,169), ``--epochs`` epochs, select no epoch (no dev),
and score ``--test-limit`` test examples (0 = all 3,469; examples of labels the
training subset lacks are left out first) with mean pooling over
both tokenizers; micro-F1 (= accuracy for one label per example, the usual
ChemProt number) and macro-F1 per strategy and seed.

A GPU box reruns the full-size comparison with

    python bench/bench_gmap.py f1 --domain EXPANDED --train-limit 0 --test-limit 0 \
        --epochs 3 --seeds 1,2,3,4,5 --device cuda

Results (JSON) go to ``--out``; a markdown table is printed.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import time
from pathlib import Path
from typing import Any

from shared_data import SHARED_DATA

REPO = Path(__file__).resolve().parent.parent
CHEMPROT = SHARED_DATA / "classification" / "chemprot"


def subset(source: Path, n: int, seed: int, folder: Path, labels: set[str] | None = None) -> Path:
    """The first ``n`` lines of a fixed shuffle of a JSON-lines file (all of it when n is 0).

    With ``labels``, examples of other labels are left out first (a rare label
    may be missing from a training subset, and `finetune` refuses test labels
    it never trained on).
    """
    lines = [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    if labels is not None:
        lines = [line for line in lines if json.loads(line)["label"] in labels]
    if n and n < len(lines):
        random.Random(seed).shuffle(lines)
        lines = lines[:n]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{source.stem}-{len(lines)}.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def finetune(args: argparse.Namespace, train: Path, test: Path | None, out: Path, *, gmap: str, seeds: list[int],
             **training: Any) -> dict[str, Any]:
    from greenadapt import finetune

    options = dict(
        task="classify",
        train=train,
        test=test,
        model=str(args.domain),
        out=out,
        workdir=args.out.parent / "work",
        **dict(batch_size=args.batch_size, lr=args.lr, eval_batch_size=64, **training),
        seeds=seeds,
        max_length=args.max_length,
        metric="micro_f1",
        device=args.device,
        force=True,
        both_views=False,  # the paper's recipe (and the step time measured here): one view a step, the 50/50 mixture
        gmap=gmap, **({"general_model": args.general} if gmap != "none" else {}),
    )
    started = time.perf_counter()
    outcome = finetune(**options)
    manifest = outcome.manifest
    manifest["_wall_seconds"] = time.perf_counter() - started
    return manifest


def bench_step(args: argparse.Namespace) -> dict[str, Any]:
    """Interleaved optimizer steps of finetune's own stepper, with and without --gmap chunk, on the same batches."""
    import torch
    from transformers import set_seed

    from greenadapt.artifacts.model_folder import load_tokenizers
    from greenadapt.artifacts.pretrained import quiet_transformers, resolve_model
    from greenadapt.modeling.gmap import wiring as gmap
    from greenadapt.tasks import TaskSettings, get_labelling_task
    from greenadapt.compute.distributed import DistContext
    from greenadapt.runners.finetune.settings import FinetuneSettings
    from greenadapt.training.finetuning import FinetuneTask, prepare_trainer

    train = subset(CHEMPROT / "train.txt", (args.steps + args.skip) * args.batch_size, 0, args.out.parent / "data")
    task = get_labelling_task("classify")
    ref = resolve_model(str(args.domain))
    tokenizers = load_tokenizers(ref.path)
    task_file = task.read(train, TaskSettings(task="classify", labels=[]), require_labels=True)
    labels = task.order_labels([e.label for e in task_file.examples])
    settings = TaskSettings(task="classify", labels=labels, max_length=args.max_length)
    units, _ = task.units(task_file, settings, tokenizers)
    setup = gmap.prepare(FinetuneSettings(task="classify", train=train, gmap="chunk", general_model=args.general), ref, tokenizers.general)
    assert setup is not None
    gmap.attach_memory(units, task_file.examples, setup.tokenizer, setup.max_length)
    config = task.filled(FinetuneSettings(task="classify", train=train, mix=0.5, batch_size=args.batch_size, lr=args.lr, epochs=1, seed=1))
    ctx = DistContext(device=args.device)
    steppers = {}
    for name in ("none", "chunk"):
        set_seed(1)
        with quiet_transformers():
            model = task.load_model(ref.path, labels)
        if name == "chunk":
            model = gmap.build_model(model, setup)
        longest = max(len(ids) for u in units for ids in u.ids)
        trainer = prepare_trainer(model, config, ctx, n_examples=len(units), longest=longest, n_base_rows=tokenizers.general_vocab_size)
        steppers[name] = FinetuneTask(trainer, units, 0.5, pad_id=tokenizers.pad_id)
    for stepper in steppers.values():
        batches = stepper.epoch_batches(0, 0)  # seeded: the same views and batches for both
    memory = [u.memory_ids for u in units]
    per: dict[str, dict[str, list[float]]] = {n: {"cpu": [], "wall": []} for n in steppers}
    for index, batch in enumerate(batches[: args.steps + args.skip]):
        for name, stepper in steppers.items():
            for unit, ids in zip(units, memory, strict=True):
                unit.memory_ids = ids if name == "chunk" else None
            cpu, wall = time.process_time(), time.perf_counter()
            stepper.trainer.step(stepper.parts(stepper.trainer, batch), stepper.loss)
            if index >= args.skip:
                per[name]["cpu"].append(time.process_time() - cpu)
                per[name]["wall"].append(time.perf_counter() - wall)
    result: dict[str, Any] = {"steps_measured": len(per["none"]["cpu"]), "threads": torch.get_num_threads()}
    for kind in ("cpu", "wall"):
        none, chunk = statistics.median(per["none"][kind]), statistics.median(per["chunk"][kind])
        result[kind] = {"none": none, "chunk": chunk, "ratio": chunk / none}
        print(f"| {kind} s/step | {none:.3f} | {chunk:.3f} | {chunk / none:.2f}x |", flush=True)
    result["plan"] = steppers["chunk"].trainer.model.plan.describe()
    return result


def bench_f1(args: argparse.Namespace) -> dict[str, Any]:
    data = args.out.parent / "data"
    train = subset(CHEMPROT / "train.txt", args.train_limit, 0, data)
    seen = {json.loads(line)["label"] for line in train.read_text(encoding="utf-8").splitlines() if line.strip()}
    test = subset(CHEMPROT / "test.txt", args.test_limit, 0, data, labels=seen)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows: dict[str, Any] = {}
    for gmap in args.strategies.split(","):
        manifest = finetune(args, train, test, args.out.parent / f"f1-{gmap}", gmap=gmap, seeds=seeds, epochs=args.epochs)
        metrics = json.loads((args.out.parent / f"f1-{gmap}" / "metrics.json").read_text())
        per_seed = {
            seed: {k: metrics["per_seed"][seed]["test"]["mean"][k] for k in ("micro_f1", "macro_f1")} for seed in metrics["per_seed"]
        }
        rows[gmap] = {"per_seed": per_seed, "wall_seconds": round(manifest["_wall_seconds"], 1),
                      "gmap": manifest["stats"].get("gmap", {}).get("plan")}
        micro = [v["micro_f1"] for v in per_seed.values()]
        macro = [v["macro_f1"] for v in per_seed.values()]
        rows[gmap]["micro_f1_mean"], rows[gmap]["macro_f1_mean"] = statistics.mean(micro), statistics.mean(macro)
        print(
            f"| {gmap} | {100 * statistics.mean(micro):.2f} | {100 * statistics.mean(macro):.2f} | "
            f"{', '.join(f'{100 * m:.2f}' for m in micro)} | {manifest['_wall_seconds']:.0f} |",
            flush=True,
        )
        args.out.write_text(json.dumps({"f1": rows}, indent=2))
    return {"train": str(train), "test": str(test), "seeds": seeds, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=("step", "f1", "all"))
    parser.add_argument("--domain", type=Path, required=True, help="Expanded MiniLM folder (greenadapt expand output).")
    parser.add_argument("--general", default=None, help="General model (default: the model the domain model was expanded from).")
    parser.add_argument("--out", type=Path, default=Path("/tmp/gmapbench/results.json"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20, help="step: measured optimizer steps per configuration")
    parser.add_argument("--skip", type=int, default=2, help="step: warm-up steps left out")
    parser.add_argument("--train-limit", type=int, default=1000, help="f1: training examples (0 = all)")
    parser.add_argument("--test-limit", type=int, default=1000, help="f1: test examples (0 = all)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--strategies", default="none,single,chunk")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING)
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    if args.part in ("step", "all"):
        results["step"] = bench_step(args)
        args.out.write_text(json.dumps(results, indent=2))
    if args.part in ("f1", "all"):
        results["f1"] = bench_f1(args)
    args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
