"""Cold start of ``greenadapt predict`` on one sentence: this checkout against an earlier commit, beside transformers'
own token-classification pipeline on the same run folder (the field's baseline: torch, the domain tokenizer alone),
each in a fresh process, alternated round by round; CPU-seconds (user + system of the process) and wall.

The run is fine-tuned here for two steps from ``--model`` (an expanded folder with its two tokenizers, or a plain one)
on a generated NER file; its ONNX export is made before the timed rounds, so the ONNX arms time what a cron job pays
every day after the first.

    python bench/predict_cold_start.py --model greenadapt-work/go-text/all-MiniLM-L6-v2/expand --before HEAD~3 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SENTENCE = "Patients with tachycardia and myocarditis were treated with ventilation after the covid infection."
# The model and tokenizer passed as objects: the run folder's config names greenadapt's own pipeline, which a plain
# ``pipeline(task, model=folder)`` would refuse to load without trust_remote_code.
PIPELINE = ("import sys; from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline; "
            "p = pipeline('token-classification', model=AutoModelForTokenClassification.from_pretrained(sys.argv[1]), "
            "tokenizer=AutoTokenizer.from_pretrained(sys.argv[1]), device='cpu'); p(sys.argv[2])")


def timed(command: list[str], env: dict[str, str], where: Path) -> tuple[float, float]:
    """(CPU-s, wall s) of one process run to its end in ``where`` (not the checkout: the working folder comes first on
    ``sys.path``, before the earlier commit's PYTHONPATH)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=where)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="an expanded (or plain) model folder to fine-tune the run from")
    parser.add_argument("--before", default="HEAD", help="the commit to compare with (a worktree of it is made)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        train = scratch / "train.tsv"
        train.write_text("".join(f"{w}\t{t}\n" for w, t in [("Patients", "O"), ("with", "O"), ("tachycardia", "B-Disease"),
                                                            ("were", "O"), ("seen", "O")]) + "\n", encoding="utf-8")
        run = scratch / "run"
        subprocess.run([sys.executable, "-m", "greenadapt", "finetune", "--task", "ner", "--model", args.model, "--train", str(train),
                        "--out", str(run), "--max-steps", "2", "--device", "cpu", "--quiet"], env=env, check=True, cwd=scratch)
        (scratch / "in.txt").write_text(SENTENCE + "\n", encoding="utf-8")
        worktree = scratch / "before"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(worktree), args.before], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            predict = [sys.executable, "-m", "greenadapt", "predict", str(scratch / "in.txt"), "--model", str(run), "--runtime", "onnx",
                       "-o", os.devnull, "--quiet"]
            subprocess.run(predict, env=env, check=True, cwd=scratch)  # the export, cached in the run folder
            arms = {
                f"greenadapt predict, ONNX ({args.before})": (predict, {**env, "PYTHONPATH": str(worktree)}),
                "greenadapt predict, ONNX (this checkout)": (predict, env),
                "greenadapt predict, torch (this checkout)": ([*predict[:-5], "--runtime", "torch", *predict[-3:]], env),
                "transformers pipeline (torch, one tokenizer)": ([sys.executable, "-c", PIPELINE, str(run), SENTENCE], env),
            }
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
            for _ in range(args.rounds):
                for name, (command, arm_env) in arms.items():
                    times[name].append(timed(command, arm_env, scratch))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False)
    anchor = statistics.median(cpu for cpu, _ in times["transformers pipeline (torch, one tokenizer)"])
    print(f"model {args.model}; median of {args.rounds} rounds, one thread")
    print("| arm | CPU-s | wall s | × the pipeline's CPU-s |")
    print("|---|---:|---:|---:|")
    for name, runs in times.items():
        cpu = statistics.median(c for c, _ in runs)
        print(f"| {name} | {cpu:.2f} | {statistics.median(w for _, w in runs):.2f} | {cpu / anchor:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
