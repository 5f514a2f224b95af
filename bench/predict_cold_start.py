"""Cold start of ``greenadapt predict`` on one sentence (``--task qa``: of ``greenadapt qa`` on one question): this
checkout against an earlier commit, beside transformers' own token-classification pipeline (for QA, v4's
question-answering pipeline as bench/bench_qa.py ports it) on the same run folder (the field's baseline: torch, the
domain tokenizer alone), each in a fresh process, alternated round by round; CPU-seconds (user + system of the
process) and wall.

The run is fine-tuned here for two steps from ``--model`` (an expanded folder with its two tokenizers, or a plain one)
on a generated NER (SQuAD) file; its ONNX export is made before the timed rounds, so the ONNX arms time what a cron
job pays every day after the first.

    python bench/predict_cold_start.py --model greenadapt-work/go-text/all-MiniLM-L6-v2/expand --before HEAD~3 --rounds 5
    python bench/predict_cold_start.py --task qa --model greenadapt-work/go-text/all-MiniLM-L6-v2/expand --before HEAD~3
"""

from __future__ import annotations

import argparse
import json
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
QUESTION = "What were the patients treated with?"
# The model and tokenizer passed as objects: the run folder's config names greenadapt's own pipeline, which a plain
# ``pipeline(task, model=folder)`` would refuse to load without trust_remote_code.
PIPELINE = ("import sys; from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline; "
            "p = pipeline('token-classification', model=AutoModelForTokenClassification.from_pretrained(sys.argv[1]), "
            "tokenizer=AutoTokenizer.from_pretrained(sys.argv[1]), device='cpu'); p(sys.argv[2])")
# transformers 5 removed its question-answering pipeline: bench/bench_qa.py's line-by-line port of v4's is the anchor.
QA_PIPELINE = ("import sys; sys.path.insert(0, sys.argv[4]); from bench_qa import pipeline_answer; "
               "from transformers import AutoModelForQuestionAnswering, AutoTokenizer; "
               "pipeline_answer(AutoModelForQuestionAnswering.from_pretrained(sys.argv[1]), AutoTokenizer.from_pretrained(sys.argv[1]), "
               "sys.argv[3], sys.argv[2], max_seq_len=384, doc_stride=128, max_answer_len=128)")


def timed(command: list[str], env: dict[str, str], where: Path) -> tuple[float, float]:
    """(CPU-s, wall s) of one process run to its end in ``where`` (not the checkout: the working folder comes first on
    ``sys.path``, before the earlier commit's PYTHONPATH)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=where)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def write_inputs(task: str, scratch: Path) -> tuple[Path, Path]:
    """The training file and the input a cold start reads (a one-sentence text, or a one-question SQuAD file)."""
    if task == "qa":
        answer = SENTENCE.index("ventilation")
        squad = {"data": [{"title": "t", "paragraphs": [{"context": SENTENCE, "qas": [
            {"id": "q1", "question": QUESTION, "answers": [{"text": "ventilation", "answer_start": answer}]}]}]}]}
        (scratch / "squad.json").write_text(json.dumps(squad), encoding="utf-8")
        return scratch / "squad.json", scratch / "squad.json"
    train = scratch / "train.tsv"
    train.write_text("".join(f"{w}\t{t}\n" for w, t in [("Patients", "O"), ("with", "O"), ("tachycardia", "B-Disease"),
                                                        ("were", "O"), ("seen", "O")]) + "\n", encoding="utf-8")
    (scratch / "in.txt").write_text(SENTENCE + "\n", encoding="utf-8")
    return train, scratch / "in.txt"


Arms = dict[str, tuple[list[str], dict[str, str]]]


def arms(task: str, run: Path, inputs: Path, scratch: Path, before: str, worktree: Path, env: dict[str, str]) -> Arms:
    """Each arm's command and environment: this checkout's and the earlier commit's ONNX start, torch's, the pipeline."""
    if task == "qa":
        command = [sys.executable, "-m", "greenadapt", "qa", "--data", str(inputs), "--out", str(scratch / "answers"), "--model", str(run),
                   "--runtime", "onnx", "--force", "--quiet"]
        anchor = [sys.executable, "-c", QA_PIPELINE, str(run), SENTENCE, QUESTION, str(REPO / "bench")]
    else:
        command = [sys.executable, "-m", "greenadapt", "predict", str(inputs), "--model", str(run), "--runtime", "onnx", "-o", os.devnull,
                   "--quiet"]
        anchor = [sys.executable, "-c", PIPELINE, str(run), SENTENCE]
    torch_command = [*command[: command.index("--runtime")], "--runtime", "torch", *command[command.index("--runtime") + 2 :]]
    return {
        f"greenadapt {task}, ONNX ({before})": (command, {**env, "PYTHONPATH": str(worktree)}),
        f"greenadapt {task}, ONNX (this checkout)": (command, env),
        f"greenadapt {task}, torch (this checkout)": (torch_command, env),
        "transformers pipeline (torch, one tokenizer)": (anchor, env),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="an expanded (or plain) model folder to fine-tune the run from")
    parser.add_argument("--task", choices=("ner", "qa"), default="ner", help="ner: predict on one sentence; qa: qa on one question")
    parser.add_argument("--before", default="HEAD", help="the commit to compare with (a worktree of it is made)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        train, inputs = write_inputs(args.task, scratch)
        run = scratch / "run"
        subprocess.run([sys.executable, "-m", "greenadapt", "finetune", "--task", args.task, "--model", args.model, "--train", str(train),
                        "--out", str(run), "--max-steps", "2", "--device", "cpu", "--quiet"], env=env, check=True, cwd=scratch)
        worktree = scratch / "before"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(worktree), args.before], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            commands = arms(args.task, run, inputs, scratch, args.before, worktree, env)
            first, first_env = commands[f"greenadapt {args.task}, ONNX (this checkout)"]
            subprocess.run(first, env=first_env, check=True, cwd=scratch)  # the export, cached in the run folder
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
            for _ in range(args.rounds):
                for name, (command, arm_env) in commands.items():
                    times[name].append(timed(command, arm_env, scratch))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)], check=False)
    anchor = statistics.median(cpu for cpu, _ in times["transformers pipeline (torch, one tokenizer)"])
    print(f"model {args.model}, task {args.task}; median of {args.rounds} rounds, one thread")
    print("| arm | CPU-s | wall s | × the pipeline's CPU-s |")
    print("|---|---:|---:|---:|")
    for name, runs in times.items():
        cpu = statistics.median(c for c, _ in runs)
        print(f"| {name} | {cpu:.2f} | {statistics.median(w for _, w in runs):.2f} | {cpu / anchor:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
