"""The ``qa`` stage: answer every question of a SQuAD-style file over its whole document.

The answering itself (documents tokenized once, word-level pooling over the
tokenizers, span search) is :mod:`greenadapt.inference.qa.answering`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.compute.health import answer_warnings
from greenadapt.artifacts import kinds
from greenadapt.artifacts.files import file_identity, write_json
from greenadapt.artifacts.stage import StageOutcome, StageRun
from greenadapt.inference.qa.answering import SettledQa, answer_questions, open_qa, resolve_qa_settings
from greenadapt.inference.qa.settings import AnswerSettings
from greenadapt.progress import Progress
from greenadapt.errors import UsageError
from greenadapt.options import Run

if TYPE_CHECKING:
    from greenadapt.inference.qa.settings import QaSettings
    from greenadapt.data.squad import SquadData

log = logging.getLogger(__name__)

KIND = kinds.QA


def run_qa(settings: QaSettings, run: Run) -> StageOutcome:
    """``greenadapt qa``: answer the questions of ``settings.data`` with ``settings.model``; write predictions, n-best and
    metrics to ``run.out``."""
    if run.out is None:
        raise UsageError("--out is required", hint="give the folder the answers go to")
    out, force, wait, progress = run.out, run.force, run.wait, run.progress
    from greenadapt.artifacts.model_weights import check_weights_load_safely
    from greenadapt.artifacts.destination import check_run_destination
    from greenadapt.artifacts.pretrained import resolve_model
    from greenadapt.data.squad import read_squad
    from greenadapt.inference.qa.model import check_qa_head
    ref = resolve_model(settings.model)
    check_run_destination(out, kind=KIND, force=force, model=ref.path, data=[settings.data])
    check_weights_load_safely(ref.path)
    check_qa_head(ref.path, ref.config())
    settled = resolve_qa_settings(ref, settings)
    pool, max_length = settled.pool, settled.max_length
    squad = read_squad(settings.data).limited(settings.limit)
    config: dict[str, Any] = {
        "pool": pool,
        "max_length": max_length,
        "n_best": settings.n_best,
        "max_answer_chars": settings.max_answer_chars,
        "limit": settings.limit,
        **settings.fingerprinted(AnswerSettings),  # --quantize, --precision when set: int8's or bf16's answers are not fp32's
    }
    inputs = [ref.identity(), {"data": file_identity(squad.path)}]
    from greenadapt.modeling.gmap import wiring as gmap

    fused = gmap.is_gmap_folder(ref.path)
    if fused:
        config["gmap"] = {"general_model": settings.general_model}
    libraries = ("torch", "transformers", "tokenizers", "numpy")
    with StageRun(KIND, out, config, inputs, force=force, wait=wait, libraries=libraries) as stage:
        if stage.skipped:
            assert stage.manifest is not None
            return StageOutcome(stage.out, stage.manifest, True, stage.skip_reason)
        stats = _answer_all(settled, settings, squad, stage.tmp, progress)
        manifest = stage.commit(stats=stats, extra={"model": str(ref.path), "data": str(squad.path)})
        return StageOutcome(stage.out, manifest, False)


def _answer_all(settings: SettledQa, options: QaSettings, squad: Any, folder: Path, progress: Progress) -> dict[str, Any]:
    """Answer every question of ``squad``; write predictions, n-best, metrics and data issues into ``folder``: the stats."""
    pool, max_length = settings.pool, settings.max_length
    device = "cpu" if settings.device is None else settings.device  # None: ONNX Runtime, on the CPU
    opened = open_qa(settings, options)
    runner, chosen = opened.runner, opened.tokenizers
    log.info(
        "qa: %d questions on %d documents, pool %s (%s), max length %d, device %s",
        squad.n_questions,
        sum(1 for doc in squad.documents if doc.questions),
        pool,
        " + ".join(chosen),
        max_length,
        device,
    )
    stats: dict[str, Any] = {}
    started = time.perf_counter()
    nbest: dict[str, list[dict[str, Any]]] = {}
    for question, answers in answer_questions(
        runner,
        squad.documents,
        chosen,
        max_length=max_length,
        batch_size=options.batch_size,
        n_best=options.n_best,
        spans=options,
        progress=progress,
        stats=stats,
    ):
        nbest[question.id] = answers
    seconds = time.perf_counter() - started
    order = [q.id for q in squad.questions]
    nbest = {qid: nbest[qid] for qid in order}
    predictions = {qid: (answers[0]["text"] if answers else "") for qid, answers in nbest.items()}
    metrics = _metrics(squad, predictions, pool)
    write_json(folder / "predictions.json", predictions, scrub=False)
    write_json(folder / "nbest.json", nbest, scrub=False)
    write_json(folder / "metrics.json", metrics)
    write_json(folder / "data_issues.json", _data_issues(squad))
    stats.update(
        questions=len(order),
        pool=pool,
        tokenizers=list(chosen),
        device=str(device),
        inference_seconds=round(seconds, 3),
        questions_per_s=round(len(order) / seconds, 3) if seconds > 0 else None,
        exact_match=metrics["exact_match"],
        f1=metrics["f1"],
        substring_match=metrics["substring_match"],
        warnings=answer_warnings(Path(options.data).name, squad.answer_texts(), predictions),
    )
    if getattr(runner, "fused", False):
        stats["gmap"] = runner.model.describe()
    return stats


def _metrics(squad: SquadData, predictions: dict[str, str], pool: str) -> dict[str, Any]:
    from greenadapt.data.squad_metrics import evaluate

    golds = squad.answer_texts()
    result = evaluate(predictions, golds)
    empty = squad.empty_documents
    result.update(
        questions=squad.n_questions,
        answered=sum(1 for text in predictions.values() if text),
        no_gold_questions=squad.n_questions - len(golds),
        impossible_questions=sum(1 for q in squad.questions if q.is_impossible),
        empty_context_documents=len(empty),
        empty_context_questions=sum(len(doc.questions) for doc in empty),
        gold_offsets=squad.offset_summary(),
        pool=pool,
    )
    return result


def _data_issues(squad: SquadData) -> dict[str, Any]:
    return {
        "gold_offset_mismatches": [
            {
                "id": issue.question_id,
                "where": issue.where,
                "text": issue.text,
                "given_start": issue.given_start,
                "repaired_start": issue.repaired_start,
            }
            for issue in squad.offset_issues
        ],
        "empty_contexts": [{"where": doc.where, "questions": [q.id for q in doc.questions]} for doc in squad.empty_documents],
    }
