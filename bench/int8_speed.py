"""ONNX Runtime int8 as greenadapt serves it, against fp32 and against an earlier checkout's int8, in paired rounds; with
the model's multiply-accumulates per token and the share of this CPU's int8 peak each arm reaches.

Each arm is a whole ``greenadapt predict`` over the same sentences (a fresh process; its one-sentence cold start
subtracted), arms in turn within each round, so a machine that slows for a while slows one round's arms alike.
Reported: sentences/s, sentences per CPU-second (user + system, ``/usr/bin/time -v``), peak memory, the share of
sentences with the fp32 arm's entities, and the paired ratios per round.

The limit: MACs per token are the model's (from its config: per layer 4·H² for the attention projections and 2·H·I
for the feed-forward, plus the classifier; the attention products, 2·T·H per token and layer at the mean length T,
are counted apart: they run in fp32 in every arm). A sentence costs them once per view it is read in (two views: twice,
but once where both tokenizers cut it alike, which greenadapt runs once), counted from the tokenizers themselves.
The int8 peak from the CPU's flags: AMX-INT8 (``amx_int8``) 1,024 int8 MAC/cycle/core; AVX-512 VNNI (``avx512_vnni``)
64 (one 512-bit VNNI product a cycle, as Zen 4 runs them; 128 on a core with two 512-bit FMA ports); AVX-VNNI 32;
else 16 (AVX2); an fp32 arm against 16 fp32 FMA a cycle a core (profile_training.py's assumption); the clock is
/proc/cpuinfo's (``--ghz`` to give the all-core clock you know: a core that boosts above it makes every share lower).

    git worktree add /tmp/before COMMIT
    python bench/int8_speed.py --run RUN --corpus ../shared/data/corpora/biomed-10m.txt.gz --sentences 5000 \\
        --before /tmp/before --repeats 3 --out int8-speed
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "bench"))

from bench_serving import paired_ratios, same_entities, sentences, slug_of, timed, write_table  # noqa: E402
from profile_training import cpu_facts  # noqa: E402

ARMS = {"ONNX fp32": ["--runtime", "onnx"], "ONNX int8": ["--runtime", "onnx", "--quantize", "int8"]}


def int8_peak(flags: set[str], cores: int, ghz: float) -> tuple[float, str]:
    """Peak int8 GMAC/s of this CPU, and the assumption in words."""
    if "amx_int8" in flags:
        per_cycle, unit = 1024, "AMX-INT8 tiles (1,024 int8 MAC/cycle/core)"
    elif "avx512_vnni" in flags:
        per_cycle, unit = 64, "AVX-512 VNNI (64 int8 MAC/cycle/core: one 512-bit product a cycle)"
    elif "avx_vnni" in flags:
        per_cycle, unit = 32, "AVX-VNNI (32 int8 MAC/cycle/core)"
    else:
        per_cycle, unit = 16, "AVX2 (16 int8 MAC/cycle/core)"
    return cores * ghz * per_cycle, f"{cores} cores × {ghz:.2f} GHz × {unit}"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--sentences", type=int, default=5000)
    parser.add_argument("--before", type=Path, help="a checkout of an earlier greenadapt: its int8 arm too, in the same rounds")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ghz", type=float, help="the all-core clock (default: /proc/cpuinfo's)")
    parser.add_argument("--out", type=Path, default=Path("int8-speed"))
    args = parser.parse_args()
    args.run, args.corpus, args.out = args.run.resolve(), args.corpus.resolve(), args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    arms = {name: (extra, HERE) for name, extra in ARMS.items()}
    if args.before:
        arms[f"ONNX int8, code of {args.before.name}"] = (ARMS["ONNX int8"], args.before.resolve())
    text = sentences(args.corpus, args.sentences, args.out / "sentences.txt", 400)
    one = args.out / "one.txt"
    one.write_text(text.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    base_env = {**os.environ, "GREENADAPT_HEARTBEAT": "0", "TOKENIZERS_PARALLELISM": "false"}

    def predict(extra: list[str], code: Path, source: Path, output: Path) -> dict[str, float]:
        argv = [sys.executable, "-m", "greenadapt", "predict", "-m", str(args.run), str(source), "-o", str(output), "--force", "-q", *extra]
        return timed(argv, {**base_env, "PYTHONPATH": str(code)}, code)

    for extra, code in arms.values():  # the exports, made (and cached) before any timing
        predict(extra, code, one, args.out / "warm.jsonl")
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
    for number in range(1, args.repeats + 1):
        for name, (extra, code) in arms.items():
            cold = predict(extra, code, one, args.out / f"{slug_of(name)}-cold.jsonl")
            whole = predict(extra, code, text, args.out / f"{slug_of(name)}-all.jsonl")
            rounds[name].append({"sentences_per_s": args.sentences / max(1e-9, whole["wall_s"] - cold["wall_s"]),
                                 "sentences_per_cpu_s": args.sentences / max(1e-9, whole["cpu_s"] - cold["cpu_s"]),
                                 "peak_mib": whole["peak_mib"]})
            print(f"round {number}, {name}: {rounds[name][-1]}", file=sys.stderr, flush=True)
    flags, mhz, model_name = cpu_facts()
    cores = len(os.sched_getaffinity(0))
    ghz = args.ghz or mhz / 1000
    peak, assumption = int8_peak(flags, cores, ghz)
    fp32_peak = cores * ghz * 16  # profile_training.py's fp32 assumption: 32 FLOP (16 FMA) a cycle a core
    macs = model_macs(args.run, text)
    lines = [f"{args.sentences:,} sentences of {args.corpus.name}; {model_name}, {cores} cores; int8 peak {peak:.0f} GMAC/s ({assumption}); "
             f"{macs['linear_macs_per_token'] / 1e6:.1f} M linear MACs per token (int8 in the int8 arms) + "
             f"{macs['attention_macs_per_token'] / 1e6:.2f} M attention MACs (fp32), {macs['tokens_per_sentence']:.1f} tokens a sentence; "
             f"fp32 peak {fp32_peak:.0f} GMAC/s (16 FMA/cycle/core)",
             "", "| arm | sentences/s | sentences per CPU-s | peak MiB | linear GMAC/s | share of its precision's peak | sentences with fp32's entities |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    figures: dict[str, Any] = {"assumption": assumption, "peak_gmacs": peak, **macs, "arms": {}}
    for name in arms:
        speed = statistics.median(r["sentences_per_s"] for r in rounds[name])
        per_cpu = statistics.median(r["sentences_per_cpu_s"] for r in rounds[name])
        gmacs = speed * macs["tokens_per_sentence"] * macs["linear_macs_per_token"] / 1e9
        same = same_entities(args.out / f"{slug_of(name)}-all.jsonl", args.out / f"{slug_of('ONNX fp32')}-all.jsonl")
        figures["arms"][name] = {"rounds": rounds[name], "sentences_per_s": speed, "sentences_per_cpu_s": per_cpu, "gmacs": gmacs, "same": same}
        lines.append(f"| {name} | {speed:.1f} | {per_cpu:.1f} | {max(r['peak_mib'] for r in rounds[name]):.0f} | {gmacs:.1f} | "
                     f"{100 * gmacs / (peak if 'int8' in name else fp32_peak):.1f}% | {100 * same:.2f}% |")
    paired = {name: {"rounds": [r["sentences_per_s"] for r in rounds[name]]} for name in arms}
    if args.repeats > 1:
        lines += ["", paired_ratios(paired, ["ONNX int8"], [name for name in arms if name != "ONNX int8"])]
    write_table(args.out, lines, figures)

if __name__ == "__main__":
    main()
