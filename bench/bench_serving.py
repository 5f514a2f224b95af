"""Serving on a CPU: transformers' pipeline against greenadapt's torch (fp32, bf16) and ONNX Runtime (fp32, int8) runtimes.

One run, side by side, each arm in fresh processes: predicting the same raw sentences (one per line) gives
sentences/s and peak memory (``/usr/bin/time -v``'s maximum resident set), predicting one sentence gives the cold
start; ``greenadapt evaluate`` on a labelled test set gives F1 (paired with torch fp32: the same words, the same
model). transformers' pipeline is the field's baseline: fp32, one view (the folder's own tokenizer, the domain one),
``aggregation_strategy="first"``.

    python bench/bench_serving.py --run runs/ncbi-green --corpus ../shared/data/corpora/biomed-10m.txt.gz --sentences 5000 \\
        --test ../shared/data/ner/NCBI-disease/test.tsv --out bench-serving
    # a CPU without bf16, as far as greenadapt is concerned: auto precision stays fp32
    GREENADAPT_CPU_AUTO_PRECISION=fp32 python bench/bench_serving.py ... --out bench-serving-fp32cpu
    # and torch as an earlier greenadapt ran it, in the same run: a checkout of that commit
    git worktree add ../greenadapt-before COMMIT && python bench/bench_serving.py ... --before ../greenadapt-before

``--repeats N`` runs N rounds, each timing every arm once in turn: the table gives each arm's median, and a second
table each ONNX arm's sentences/s over each torch arm's, paired round by round (mean ± sd, lowest).

Prints the Markdown tables (and writes them with the raw figures to --out). The ONNX exports are made once, before the
timed runs (the model folder's cache), so cold start is what a cron job pays every day after the first.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
TORCH_ARMS = ("greenadapt torch fp32", "greenadapt torch auto (bf16 where the CPU has it)")  # what --before times again
ARMS = {
    "transformers pipeline fp32 (one view)": None,
    "greenadapt torch fp32": ["--precision", "fp32"],
    "greenadapt torch auto (bf16 where the CPU has it)": [],
    "greenadapt ONNX fp32": ["--runtime", "onnx"],
    "greenadapt ONNX int8": ["--runtime", "onnx", "--quantize", "int8"],
}

PIPELINE = """
import sys, json, time
from transformers import TokenClassificationPipeline, pipeline
folder, source, output = sys.argv[1:4]
lines = [line.rstrip("\\n") for line in open(source, encoding="utf-8")]
# pipeline_class: transformers' own, on the folder's own (domain) tokenizer alone: one view, on purpose
tagger = pipeline("token-classification", model=folder, aggregation_strategy="first", device="cpu", pipeline_class=TokenClassificationPipeline)
with open(output, "w", encoding="utf-8") as out:
    for start in range(0, len(lines), 64):
        for text, found in zip(lines[start:start + 64], tagger(lines[start:start + 64], batch_size=64)):
            out.write(json.dumps({"text": text, "entities": [{"start": e["start"], "end": e["end"], "label": e["entity_group"]} for e in found]}) + "\\n")
"""


def corpus_lines(corpus: Path, n: int, longest: int = 400) -> list[str]:
    """The first ``n`` corpus lines of 40 to ``longest`` characters: the benchmarks' sentences of raw text."""
    opener = gzip.open if corpus.suffix == ".gz" else open
    taken = []
    with opener(corpus, "rt", encoding="utf-8") as handle:  # type: ignore[operator]
        for line in handle:
            line = line.strip()
            if 40 <= len(line) <= longest:
                taken.append(line)
            if len(taken) == n:
                break
    return taken


def sentences(corpus: Path, n: int, out: Path, longest: int) -> Path:
    out.write_text("\n".join(corpus_lines(corpus, n, longest)) + "\n", encoding="utf-8")
    return out


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> dict[str, float]:
    """Wall and CPU (user + system) seconds and peak resident memory (MiB) of one process, started in ``cwd`` (``python -m``
    imports from there first)."""
    report = Path(f"/tmp/bench-serving-time-{os.getpid()}.txt")
    started = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", "-o", str(report), *argv], env=env, capture_output=True, text=True, check=False, cwd=cwd)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    said = report.read_text()
    cpu = sum(float(re.search(rf"{kind} time \(seconds\): ([\d.]+)", said)[1]) for kind in ("User", "System"))  # type: ignore[index]
    peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", said)[1]) / 1024  # type: ignore[index]
    return {"wall_s": wall, "cpu_s": cpu, "peak_mib": peak}


def slug_of(arm: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", arm.lower()).strip("-")


def same_entities(predicted: Path, reference: Path) -> float:
    """The share of sentences whose entities (start, end, label) equal the reference run's, line by line."""
    def entities(path: Path) -> list[list[tuple[int, int, str]]]:
        with path.open(encoding="utf-8") as lines:
            return [sorted((e["start"], e["end"], e["label"]) for e in json.loads(line)["entities"]) for line in lines]

    got, wanted = entities(predicted), entities(reference)
    assert len(got) == len(wanted), (predicted, reference)
    return sum(a == b for a, b in zip(got, wanted, strict=True)) / max(1, len(wanted))


def paired_ratios(rows: dict[str, dict[str, Any]], arms: list[str], anchors: list[str]) -> str:
    """Each arm's sentences/s over each anchor's, round by round (the same round's two runs): mean ± sd and the lowest."""
    lines = [f"| arm / anchor, paired by round ({len(rows[arms[0]]['rounds'])} rounds) | mean ± sd | lowest |", "|---|---:|---:|"]
    for arm in arms:
        for anchor in anchors:
            ratios = [a / b for a, b in zip(rows[arm]["rounds"], rows[anchor]["rounds"], strict=True)]
            lines.append(f"| {arm} / {anchor} | {statistics.mean(ratios):.2f} ± {statistics.stdev(ratios):.2f} | {min(ratios):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="a fine-tuned NER run folder (two tokenizers)")
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=5000)
    parser.add_argument("--test", type=Path, required=True, help="a labelled NER test file (F1)")
    parser.add_argument("--out", type=Path, default=Path("bench-serving"))
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds: each times every arm once, in turn; the table gives each arm's median, and the paired ratios per round")
    parser.add_argument("--longest", type=int, default=400, help="corpus lines of 40 to this many characters are taken")
    parser.add_argument("--before", type=Path, help="a checkout of an earlier greenadapt: its torch arms are timed too, in this run")
    args = parser.parse_args()
    args.run, args.corpus, args.test, args.out = (path.resolve() for path in (args.run, args.corpus, args.test, args.out))
    arms: dict[str, tuple[list[str] | None, Path]] = {arm: (extra, HERE) for arm, extra in ARMS.items()}
    if args.before:
        arms.update({f"{arm}, code of {args.before.name}": (ARMS[arm], args.before.resolve()) for arm in TORCH_ARMS})
    args.out.mkdir(parents=True, exist_ok=True)
    text = sentences(args.corpus, args.sentences, args.out / "sentences.txt", args.longest)
    one = args.out / "one.txt"
    one.write_text(text.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(HERE), "GREENADAPT_HEARTBEAT": "0", "TOKENIZERS_PARALLELISM": "false"}
    greenadapt = [sys.executable, "-m", "greenadapt"]
    for runtime in (["--runtime", "onnx"], ["--runtime", "onnx", "--quantize", "int8"]):  # the exports, made once before timing
        subprocess.run([*greenadapt, "predict", "-m", str(args.run), str(one), "-o", str(args.out / "warm.jsonl"), "--force", "-q", *runtime],
                       env=env, check=True)
    script = args.out / "pipeline.py"
    script.write_text(PIPELINE)

    def argv_of(extra: list[str] | None, source: Path, output: Path) -> list[str]:
        if extra is None:
            return [sys.executable, str(script), str(args.run), str(source), str(output)]
        return [*greenadapt, "predict", "-m", str(args.run), str(source), "-o", str(output), "--force", "-q", *extra]

    # Rounds, not repeats in a row: each round times every arm once, in turn, so a machine that slows for a while
    # slows every arm of that round alike, and each round gives its own paired ratios.
    timings: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    for round_number in range(1, args.repeats + 1):
        for arm, (extra, code) in arms.items():
            arm_env = {**env, "PYTHONPATH": str(code)}
            cold = timed(argv_of(extra, one, args.out / f"{slug_of(arm)}-cold.jsonl"), arm_env, code)
            whole = timed(argv_of(extra, text, args.out / f"{slug_of(arm)}-all.jsonl"), arm_env, code)
            timings[arm].append({"cold_wall_s": cold["wall_s"], "all_wall_s": whole["wall_s"], "all_peak_mib": whole["peak_mib"],
                                 "sentences_per_s": args.sentences / max(1e-9, whole["wall_s"] - cold["wall_s"])})
            print(f"round {round_number}, {arm}: {timings[arm][-1]}", file=sys.stderr, flush=True)
    onnx_arms = [arm for arm, (extra, _) in arms.items() if extra and "onnx" in extra]
    torch_arms = [arm for arm, (extra, _) in arms.items() if extra is not None and "onnx" not in extra]  # --before's too
    scored_arms = {arm: extra for arm, (extra, code) in arms.items() if extra is not None and code == HERE}  # this checkout's greenadapt
    rows: dict[str, dict[str, Any]] = {}
    for arm in arms:
        runs = timings[arm]
        figures: dict[str, Any] = {"sentences_per_s": statistics.median(r["sentences_per_s"] for r in runs),
                   "cold_wall_s": statistics.median(r["cold_wall_s"] for r in runs),
                   "all_peak_mib": max(r["all_peak_mib"] for r in runs),
                   "rounds": [r["sentences_per_s"] for r in runs]}
        if arm in scored_arms:
            scored = subprocess.run([*greenadapt, "evaluate", "-m", str(args.run), str(args.test), "--json", "-q", *scored_arms[arm]],
                                    env=env, capture_output=True, text=True, check=True)
            result = json.loads(scored.stdout)
            figures["f1"] = result["scores"][result["headline_pool"]]["f1"] * 100
            figures["f1_general"] = result["scores"].get("general", {}).get("f1", float("nan")) * 100
        rows[arm] = figures
    reference = rows["greenadapt torch fp32"]
    for arm, figures in rows.items():  # the goal's measure: sentences given exactly torch fp32's entities
        if arm in scored_arms:
            figures["same_entities"] = same_entities(args.out / f"{slug_of(arm)}-all.jsonl", args.out / f"{slug_of('greenadapt torch fp32')}-all.jsonl")
    lines = [f"{args.sentences:,} sentences of {args.corpus.name}; F1 on {args.test.parent.name}/{args.test.name}; "
             f"GREENADAPT_CPU_AUTO_PRECISION={os.environ.get('GREENADAPT_CPU_AUTO_PRECISION', '(unset)')}",
             "",
             "| arm | sentences/s | × torch fp32 | × torch auto | peak MiB (all sentences) | cold start s | test F1 | Δ F1 vs torch fp32 "
             "| sentences with torch fp32's entities |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    auto = rows["greenadapt torch auto (bf16 where the CPU has it)"]
    for arm, f in rows.items():
        f1 = f"{f['f1']:.2f}" if "f1" in f else "—"
        delta = f"{f['f1'] - reference['f1']:+.2f}" if "f1" in f else "—"
        same = f"{100 * f['same_entities']:.2f}%" if "same_entities" in f else "—"
        lines.append(f"| {arm} | {f['sentences_per_s']:.1f} | {f['sentences_per_s'] / reference['sentences_per_s']:.2f} | "
                     f"{f['sentences_per_s'] / auto['sentences_per_s']:.2f} | {f['all_peak_mib']:.0f} | {f['cold_wall_s']:.1f} | {f1} | {delta} | {same} |")
    if args.before:
        old_fp32, old_auto = (rows[f"{arm}, code of {args.before.name}"]["sentences_per_s"] for arm in TORCH_ARMS)
        lines += ["", f"| arm | × torch fp32, code of {args.before.name} | × torch auto, code of {args.before.name} |", "|---|---:|---:|"]
        lines += [f"| {arm} | {f['sentences_per_s'] / old_fp32:.2f} | {f['sentences_per_s'] / old_auto:.2f} |" for arm, f in rows.items()]
    if args.repeats > 1:
        lines += ["", paired_ratios(rows, onnx_arms, torch_arms)]
    write_table(args.out, lines, rows)


def write_table(out: Path, lines: list[str], figures: Any) -> None:
    """The Markdown table printed, and written with the raw figures to ``out``."""
    table = "\n".join(lines)
    print(table)
    (out / "table.md").write_text(table + "\n")
    (out / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
