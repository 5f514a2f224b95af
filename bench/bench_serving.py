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
    # and each of greenadapt's arms as an earlier greenadapt ran it, in the same rounds: a checkout of that commit
    git worktree add ../greenadapt-before COMMIT && python bench/bench_serving.py ... --before ../greenadapt-before
    # e.g. int8 now against int8 then (and fp32, the reference, always there)
    python bench/bench_serving.py ... --arms ONNX --before ../greenadapt-before --repeats 3

``--repeats N`` runs N rounds, each timing every arm once in turn: the table gives each arm's median, and a second
table each ONNX arm's sentences/s over each torch arm's, paired round by round (mean ± sd, lowest).

The CPU int8 runtimes a user would pick instead (issue 85) are arms too, where installed (``pip install ctranslate2
openvino nncf``; skipped with a note where not): CTranslate2 int8 and OpenVINO + NNCF static int8, each converted and
quantized by script (bench/serving_anchors.py) and run where ONNX Runtime runs in greenadapt's own predict and evaluate,
so tokenizing, views, pooling and batching are the same in every arm. ``--arms`` keeps the arms whose names contain one
of its words (``--arms int8`` times the three int8 runtimes and the fp32 reference).

Prints the Markdown tables (and writes them with the raw figures to --out). The ONNX exports, conversions and
quantizations are made once, before the timed runs (the model folder's cache, --out/anchors), so cold start is what a
cron job pays every day after the first. Each arm's sentences per CPU-second (user + system) and, for the int8 and
fp32 arms, its share of this CPU's peak (from its flags, bench/cpu_peaks.py's assumptions) are in the table.
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
REFERENCE = "greenadapt torch fp32"  # every arm's entities and F1 are compared with this one's
ARMS = {
    "transformers pipeline fp32 (one view)": None,
    "greenadapt torch fp32": ["--precision", "fp32"],
    "greenadapt torch auto (bf16 where the CPU has it)": [],
    "greenadapt ONNX fp32": ["--runtime", "onnx"],
    "greenadapt ONNX int8": ["--runtime", "onnx", "--quantize", "int8"],
}
ANCHOR_ARMS = {"CTranslate2 int8": "ctranslate2-int8", "OpenVINO + NNCF static int8": "openvino-int8"}  # serving_anchors.py's

PIPELINE = """
import sys, json, time
from transformers import TokenClassificationPipeline, pipeline
folder, source, output = sys.argv[1:4]
lines = [line.rstrip("\\n") for line in open(source, encoding="utf-8")]
# pipeline_class: transformers' own, on the folder's own (domain) tokenizer alone: one view, on purpose
tagger = pipeline("token-classification", model=folder, aggregation_strategy="first", device="cpu",
                  pipeline_class=TokenClassificationPipeline)
with open(output, "w", encoding="utf-8") as out:
    for start in range(0, len(lines), 64):
        for text, found in zip(lines[start:start + 64], tagger(lines[start:start + 64], batch_size=64)):
            entities = [{"start": e["start"], "end": e["end"], "label": e["entity_group"]} for e in found]
            out.write(json.dumps({"text": text, "entities": entities}) + "\\n")
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


def model_macs(run: Path, text: Path) -> dict[str, float]:
    """Linear-layer MACs per token, attention MACs per token at the mean length, and the tokens a sentence costs."""
    from tokenizers import Tokenizer

    config = json.loads((run / "config.json").read_text())
    hidden, inner, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    labels = len(config.get("id2label", {})) or 2
    linear = layers * (4 * hidden * hidden + 2 * hidden * inner) + hidden * labels
    lines = text.read_text(encoding="utf-8").splitlines()
    from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR

    views = [run / "tokenizer.json"] + [path for path in (run / GENERAL_TOKENIZER_DIR / "tokenizer.json",) if path.is_file()]
    def tokenizer(path: Path) -> Tokenizer:
        loaded = Tokenizer.from_file(str(path))
        loaded.no_padding()  # a saved tokenizer may pad or cut to the training length: the pieces a sentence has
        loaded.no_truncation()
        return loaded

    cut = [[tuple(e.ids) for e in tokenizer(v).encode_batch(lines)] for v in views]
    # a sentence both tokenizers cut alike is run once; else once per view
    tokens = [len(ids[0]) if len(set(ids)) == 1 else sum(map(len, ids)) for ids in zip(*cut, strict=True)]
    mean_length = statistics.mean(len(ids) for view in cut for ids in view)
    return {"linear_macs_per_token": linear, "attention_macs_per_token": 2 * mean_length * hidden * layers,
            "tokens_per_sentence": statistics.mean(tokens), "folder_view_tokens_per_sentence": statistics.mean(map(len, cut[0]))}


def paired_ratios(rows: dict[str, dict[str, Any]], arms: list[str], anchors: list[str], figure: str = "sentences_per_s") -> str:
    """Each arm's ``figure`` (sentences/s, or sentences per CPU-second) over each anchor's, round by round (the same
    round's two runs): mean ± sd and the lowest."""
    return paired_table(rows, [(arm, anchor) for arm in arms for anchor in anchors], figure)


def paired_table(rows: dict[str, dict[str, Any]], pairs: list[tuple[str, str]], figure: str = "sentences_per_s") -> str:
    rounds = "rounds" if figure == "sentences_per_s" else "rounds_per_cpu_s"
    paired = len(rows[pairs[0][0]][rounds])
    lines = [f"| arm / anchor, {figure.replace('_', ' ')}, paired by round ({paired} rounds) | mean ± sd | lowest |",
             "|---|---:|---:|"]
    for arm, anchor in pairs:
        ratios = [a / b for a, b in zip(rows[arm][rounds], rows[anchor][rounds], strict=True)]
        lines.append(f"| {arm} / {anchor} | {statistics.mean(ratios):.2f} ± {statistics.stdev(ratios):.2f} | {min(ratios):.2f} |")
    return "\n".join(lines)


def arms_of(args: argparse.Namespace) -> tuple[dict[str, tuple[list[str] | None, Path, str | None]], list[str]]:
    """The arms to time: name -> (greenadapt's extra arguments, or None for transformers' pipeline; the code; the
    anchor runtime or None), and a note for each anchor not installed."""
    sys.path.insert(0, str(HERE / "bench"))
    from serving_anchors import ANCHORS, installed

    arms: dict[str, tuple[list[str] | None, Path, str | None]] = {arm: (extra, HERE, None) for arm, extra in ARMS.items()}
    notes = []
    for arm, anchor in ANCHOR_ARMS.items():
        if installed(anchor):
            arms[arm] = (["--runtime", "onnx"], HERE, anchor)
        else:
            notes.append(f"{arm}: skipped, not installed (pip install {' '.join(ANCHORS[anchor])})")
    if args.arms:
        arms = {arm: spec for arm, spec in arms.items() if arm == REFERENCE or any(word in arm for word in args.arms)}
    if args.before:  # each of greenadapt's own arms again, on the earlier code, in the same rounds
        arms.update({before_arm(arm, args.before): (ARMS[arm], args.before.resolve(), None) for arm in list(arms)
                     if arm in ARMS and ARMS[arm]})
    return arms, notes


def before_arm(arm: str, before: Path) -> str:
    return f"{arm}, code of {before.name}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="a fine-tuned NER run folder (one tokenizer: one view; two: both views)")
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=5000)
    parser.add_argument("--test", type=Path, required=True, help="a labelled NER test file (F1)")
    parser.add_argument("--out", type=Path, default=Path("bench-serving"))
    parser.add_argument("--repeats", type=int, default=1,
                        help="rounds: each times every arm once, in turn; the table gives each arm's median, and the paired ratios per "
                             "round")
    parser.add_argument("--longest", type=int, default=400, help="corpus lines of 40 to this many characters are taken")
    parser.add_argument("--before", type=Path, help="a checkout of an earlier greenadapt: each of greenadapt's arms is timed on it too, "
                        "in the same rounds, and set against it")
    parser.add_argument("--arms", nargs="+",
                        help="only the arms whose names contain one of these words (torch fp32, the reference, always)")
    parser.add_argument("--alone", type=int, default=200, help="this many of the sentences are tagged again one a call (batch invariance)")
    parser.add_argument("--ghz", type=float, help="the all-core clock for the peak shares (default: /proc/cpuinfo's)")
    args = parser.parse_args()
    args.run, args.corpus, args.test, args.out = (path.resolve() for path in (args.run, args.corpus, args.test, args.out))
    arms, notes = arms_of(args)
    args.out.mkdir(parents=True, exist_ok=True)
    text = sentences(args.corpus, args.sentences, args.out / "sentences.txt", args.longest)
    one = args.out / "one.txt"
    one.write_text(text.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(HERE), "GREENADAPT_HEARTBEAT": "0", "TOKENIZERS_PARALLELISM": "false"}
    script = args.out / "pipeline.py"
    script.write_text(PIPELINE)

    def argv_of(arm: str, command: list[str]) -> list[str]:
        """The greenadapt arm's process: ``command`` (a greenadapt command line without the arm's options) as it runs it."""
        extra, _, anchor = arms[arm]
        assert extra is not None, "transformers' pipeline runs predict only"
        if anchor:
            return [sys.executable, str(HERE / "bench" / "serving_anchors.py"), anchor, "--store",
                    str(args.out / "anchors"), "--", *command]
        return [sys.executable, "-m", "greenadapt", *command, *extra]

    def predict(arm: str, source: Path, output: Path) -> list[str]:
        if arms[arm][0] is None:
            return [sys.executable, str(script), str(args.run), str(source), str(output)]
        return argv_of(arm, ["predict", "-m", str(args.run), str(source), "-o", str(output), "--force", "-q"])

    # Exports, conversions and quantizations, made once before timing by each arm's own code (an earlier checkout's
    # export format is its own): otherwise the first round's cold start would hold them and inflate its sentences/s.
    for arm, (extra, code, _) in arms.items():
        if extra is not None and extra != ARMS[REFERENCE]:
            subprocess.run(predict(arm, one, args.out / "warm.jsonl"), env={**env, "PYTHONPATH": str(code)}, cwd=code, check=True,
                           capture_output=True)
    # Rounds, not repeats in a row: each round times every arm once, in turn, so a machine that slows for a while
    # slows every arm of that round alike, and each round gives its own paired ratios.
    timings: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    for round_number in range(1, args.repeats + 1):
        for arm, (_, code, _) in arms.items():
            arm_env = {**env, "PYTHONPATH": str(code)}
            cold = timed(predict(arm, one, args.out / f"{slug_of(arm)}-cold.jsonl"), arm_env, code)
            whole = timed(predict(arm, text, args.out / f"{slug_of(arm)}-all.jsonl"), arm_env, code)
            timings[arm].append({"cold_wall_s": cold["wall_s"], "all_wall_s": whole["wall_s"], "all_peak_mib": whole["peak_mib"],
                                 "sentences_per_s": args.sentences / max(1e-9, whole["wall_s"] - cold["wall_s"]),
                                 "sentences_per_cpu_s": args.sentences / max(1e-9, whole["cpu_s"] - cold["cpu_s"])})
            print(f"round {round_number}, {arm}: {timings[arm][-1]}", file=sys.stderr, flush=True)
    rows = {arm: summary(timings[arm]) for arm in arms}
    first = args.out / "first.txt"  # batch invariance: the first sentences again, each alone, against the whole run's answers
    first.write_text("\n".join(text.read_text(encoding="utf-8").splitlines()[:args.alone]) + "\n", encoding="utf-8")
    for arm, (extra, code, _) in arms.items():
        if extra is not None and code == HERE:
            alone = args.out / f"{slug_of(arm)}-alone.jsonl"
            command = ["predict", "-m", str(args.run), str(first), "-o", str(alone), "--force", "-q", "--batch-size", "1"]
            subprocess.run(argv_of(arm, command), env=env, check=True, capture_output=True)
            rows[arm].update(batch_invariance(alone, args.out / f"{slug_of(arm)}-all.jsonl"))
    for arm, (extra, code, _) in arms.items():  # F1 through the arm's own runtime; the same words, the same model
        if extra is not None and code == HERE:
            scored = subprocess.run(argv_of(arm, ["evaluate", "-m", str(args.run), str(args.test), "--json", "-q"]),
                                    env=env, capture_output=True, text=True, check=True)
            result = json.loads(scored.stdout)
            rows[arm]["f1"] = result["scores"][result["headline_pool"]]["f1"] * 100
            rows[arm]["same_entities"] = same_entities(args.out / f"{slug_of(arm)}-all.jsonl", args.out / f"{slug_of(REFERENCE)}-all.jsonl")
    lines = table(args, arms, rows, text) + [f"\n{note}" for note in notes]
    then = {arm: before_arm(arm, args.before) for arm in rows if args.before and before_arm(arm, args.before) in rows}
    if then:
        lines += ["", f"| arm | × the same arm, code of {args.before.name} |", "|---|---:|"]
        lines += [f"| {arm} | {rows[arm]['sentences_per_s'] / rows[old]['sentences_per_s']:.2f} |" for arm, old in then.items()]
    if args.repeats > 1:
        lines += ["", paired_ratios(rows, *paired_arms(arms))]
        if then:
            lines += ["", paired_table(rows, list(then.items()))]
        if "greenadapt ONNX int8" in rows and any(arm in rows for arm in ANCHOR_ARMS):
            lines += ["", paired_ratios(rows, ["greenadapt ONNX int8"], [arm for arm in ANCHOR_ARMS if arm in rows], "sentences_per_cpu_s")]
    write_table(args.out, lines, rows)


def summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    return {"sentences_per_s": statistics.median(r["sentences_per_s"] for r in runs),
            "sentences_per_cpu_s": statistics.median(r["sentences_per_cpu_s"] for r in runs),
            "cold_wall_s": statistics.median(r["cold_wall_s"] for r in runs),
            "all_peak_mib": max(r["all_peak_mib"] for r in runs),
            "rounds": [r["sentences_per_s"] for r in runs], "rounds_per_cpu_s": [r["sentences_per_cpu_s"] for r in runs]}


def batch_invariance(alone: Path, batched: Path) -> dict[str, float]:
    """Sentences tagged one a call against the same sentences in the whole run's batches: the share with the same
    entities, and the largest difference of an entity's score where they are the same."""
    def read(path: Path, count: int | None = None) -> list[list[tuple[int, int, str, float]]]:
        with path.open(encoding="utf-8") as lines:
            rows = [[(e["start"], e["end"], e["label"], e.get("score", 0.0)) for e in json.loads(line)["entities"]] for line in lines]
        return rows[:count]

    single = read(alone)
    together = read(batched, len(single))
    same = [(a, b) for a, b in zip(single, together, strict=True) if [e[:3] for e in a] == [e[:3] for e in b]]
    gap = max((abs(x[3] - y[3]) for a, b in same for x, y in zip(a, b, strict=True)), default=0.0)
    return {"alone_same_entities": len(same) / max(1, len(single)), "alone_largest_score_gap": gap}


def paired_arms(arms: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The arms paired against others: greenadapt's ONNX arms against the torch arms and the anchors."""
    onnx = [arm for arm, (extra, code, anchor) in arms.items() if extra and "onnx" in extra and not anchor and code == HERE]
    others = [arm for arm, (extra, code, anchor) in arms.items() if extra is not None and ("onnx" not in extra or anchor) and code == HERE]
    return onnx, others


def table(args: argparse.Namespace, arms: dict[str, Any], rows: dict[str, dict[str, Any]], text: Path) -> list[str]:
    """The main table: speed, memory, cold start, F1 and agreement, and each arm's share of this CPU's peak."""
    from cpu_peaks import cpu_facts, cpu_peaks, int8_peak, native_bf16

    flags, mhz, model_name = cpu_facts()
    cores = len(os.sched_getaffinity(0))
    ghz = args.ghz or mhz / 1000
    int8, assumption = int8_peak(flags, cores, ghz)
    flops, units = cpu_peaks(flags, cores, ghz * 1000)
    fp32 = flops["fp32"] / 2  # in multiply-accumulates, as the model's work is counted
    # torch auto runs bf16 where the CPU has it (and greenadapt is not told otherwise): against bf16's peak
    auto_is_bf16 = native_bf16(flags) and os.environ.get("GREENADAPT_CPU_AUTO_PRECISION", "") != "fp32"
    bf16 = flops["bf16"] / 2 if auto_is_bf16 else fp32
    macs = model_macs(args.run, text)
    lines = [f"{args.sentences:,} sentences of {args.corpus.name}; F1 on {args.test.parent.name}/{args.test.name}; "
             f"GREENADAPT_CPU_AUTO_PRECISION={os.environ.get('GREENADAPT_CPU_AUTO_PRECISION', '(unset)')}; {model_name}, {cores} cores; "
             f"{macs['linear_macs_per_token'] / 1e6:.1f} M linear MACs a token, {macs['tokens_per_sentence']:.1f} tokens a sentence "
             f"(all views); peaks: int8 {int8:.0f} GMAC/s ({assumption}), fp32 {fp32:.0f} GMAC/s ({units['fp32']})"
             + (f", bf16 {bf16:.0f} GMAC/s ({units['bf16']})" if auto_is_bf16 else ""),
             "",
             "| arm | sentences/s | sentences per CPU-s | × torch fp32 | × torch auto | share of peak | peak MiB (all sentences) "
             "| cold start s | test F1 | Δ F1 vs torch fp32 | sentences with torch fp32's entities | alone = in its batch (entities) "
             "| largest score gap, alone vs batch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    reference = rows[REFERENCE]
    auto = rows.get("greenadapt torch auto (bf16 where the CPU has it)")
    for arm, f in rows.items():
        extra, _, anchor = arms[arm]
        precision_peak = int8 if anchor or (extra and "int8" in extra) else fp32 if extra is None or "fp32" in arm else bf16
        # transformers' pipeline reads the folder's own tokenizer alone: its pieces, not every view's
        tokens = macs["folder_view_tokens_per_sentence"] if extra is None else macs["tokens_per_sentence"]
        gmacs = f["sentences_per_s"] * tokens * macs["linear_macs_per_token"] / 1e9
        share = f"{100 * gmacs / precision_peak:.1f}%" if precision_peak else "—"
        f1 = f"{f['f1']:.2f}" if "f1" in f else "—"
        delta = f"{f['f1'] - reference['f1']:+.2f}" if "f1" in f else "—"
        same = f"{100 * f['same_entities']:.2f}%" if "same_entities" in f else "—"
        versus_auto = f"{f['sentences_per_s'] / auto['sentences_per_s']:.2f}" if auto else "—"
        alone = f"{100 * f['alone_same_entities']:.1f}% | {f['alone_largest_score_gap']:.1e}" if "alone_same_entities" in f else "— | —"
        lines.append(f"| {arm} | {f['sentences_per_s']:.1f} | {f['sentences_per_cpu_s']:.1f} | "
                     f"{f['sentences_per_s'] / reference['sentences_per_s']:.2f} | "
                     f"{versus_auto} | {share} | {f['all_peak_mib']:.0f} | {f['cold_wall_s']:.1f} | {f1} | {delta} | {same} | {alone} |")
    return lines


def write_table(out: Path, lines: list[str], figures: Any) -> None:
    """The Markdown table printed, and written with the raw figures to ``out``."""
    table = "\n".join(lines)
    print(table)
    (out / "table.md").write_text(table + "\n")
    (out / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
