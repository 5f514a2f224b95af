"""SQuAD-style fine-tuning of an extractive QA model, with the two-tokenizer mixture.

Windows and answer positions are :mod:`greenadapt.runners.qa.features`'; the
training loop is the runtime's with :class:`greenadapt.runners.qa.loop.QaTask` (the
two-tokenizer mixture per question and epoch, transformers' QA loss over the
global batch, the row-wise trained added embeddings of
``--train-embeddings``). One process: there is no data-parallel path for QA yet.

``dev`` and ``test`` are scored after training the way ``greenadapt qa``
answers: each question over its whole context with centred windows,
word-level logits pooled over the tokenizers (``pool``), exact match and F1
with the official SQuAD normalisation. That is not transformers' per-window
post-processing, so the numbers are comparable with ``greenadapt qa`` runs
rather than with scores made that way. Dev does not select an epoch.

The output folder loads with ``AutoModelForQuestionAnswering`` and
``AutoTokenizer`` (T̂ at the top, T_LM in ``general-tokenizer/`` when the
input had both), so ``greenadapt qa`` and transformers can use it directly;
its ``greenadapt_task.json`` says task ``qa`` so ``greenadapt predict``
can point to ``greenadapt qa`` instead.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.compute.health import answer_warnings
from greenadapt.artifacts import kinds
from greenadapt.artifacts.files import write_json
from greenadapt.artifacts.model_folder import ExpandedModel
from greenadapt.artifacts.stage import StageOutcome, resource_errors
from greenadapt.training.job import training_stage
from greenadapt.runners.setup import RunnerSetup, prepare_runner
from greenadapt.training.runtime import TrainingHooks
from greenadapt.errors import DataError, UsageError
from greenadapt.runners.qa.features import featurize
from greenadapt.runners.qa.loop import train_qa
from greenadapt.training.finetuning import resolve_mix
from greenadapt.progress import NULL_PROGRESS, Progress, said_scoring

if TYPE_CHECKING:
    from greenadapt.data.squad import SquadData
    from greenadapt.options import Run
    from greenadapt.runners.finetune.settings import FinetuneSettings

log = logging.getLogger(__name__)

KIND = kinds.FINETUNE
TASK = "qa"
DEFAULT_MAX_LENGTH = 384
DEFAULT_DOC_STRIDE = 128
MAX_QUESTION_TOKENS = 64
# Line-based task files: given to --task qa they are a mix-up of tasks, not broken JSON.
_NOT_SQUAD_SUFFIXES = (".tsv", ".csv", ".txt", ".conll", ".conllu", ".iob", ".iob2", ".bio", ".jsonl", ".ndjson")


def window_lengths(settings: FinetuneSettings, folder: ExpandedModel) -> tuple[int, int]:
    """(max_length, doc_stride): the requested ones, checked against the model, or the defaults that fit it."""
    if settings.max_length is None:
        max_length = min(DEFAULT_MAX_LENGTH, folder.length_limit)
    else:
        max_length = folder.checked_length(settings.max_length)
    doc_stride = settings.doc_stride if settings.doc_stride is not None else min(DEFAULT_DOC_STRIDE, max_length // 3)
    # A window holds [CLS] q [SEP] c [SEP] with at least one question piece and doc_stride + 1 context
    # pieces; the tokenizers library aborts the process (a Rust panic) when the context part is shorter.
    if not 0 < doc_stride <= max_length - 5:
        raise UsageError(
            f"--doc-stride {doc_stride} leaves no room for the question and new context in --max-length {max_length} windows",
            hint=f"use a stride from 1 to {max_length - 5}, usually a third of --max-length",
        )
    return max_length, doc_stride


def check_squad_path(path: str | os.PathLike[str], flag: str) -> None:
    """Refuse a NER/classification file given to --task qa before it is parsed as JSON."""
    suffix = Path(path).suffix.lower()
    if suffix in _NOT_SQUAD_SUFFIXES:
        raise UsageError(
            f"{flag}: --task qa trains on SQuAD-style JSON, not a {suffix} file",
            path=path,
            hint='the format `greenadapt qa` reads, {"data": [{"paragraphs": [...]}]}; NER and classification files go with --task ner or '
                 'classify',
        )


def finetune_qa(settings: FinetuneSettings, run: Run) -> StageOutcome:
    """``finetune --task qa``: fine-tune ``settings.model`` for extractive QA on SQuAD-style ``settings.train``; score
    ``dev``/``test`` as ``greenadapt qa`` does. ``settings``: checked when made, QA's defaults filled in."""
    from greenadapt.data.squad import read_squad
    from greenadapt.runners.finetune.settings import default_run_folder

    splits = {"train": settings.train, "dev": settings.dev, "test": settings.test}
    for split, path in splits.items():
        if path is not None:
            check_squad_path(path, f"--{split}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UsageError("--task qa trains in one process; it has no data-parallel path", hint="run it without torchrun")
    setup = prepare_runner(settings, run, kind=KIND, data=splits.values(), default_out=lambda ref: default_run_folder(settings, run, ref))
    plan = _plan(setup, settings)
    train_data = read_squad(settings.train)
    scored = {split: read_squad(path) for split, path in splits.items() if split != "train" and path is not None}
    config, inputs = setup.record(plan.config(), [("train", train_data.path), *((split, data.path) for split, data in scored.items())])
    # the training stage every runner uses: checkpoints (--save-every, --save-minutes), SIGTERM, --resume
    with training_stage(KIND, setup.out, config, inputs, settings, run) as job:
        if job.up_to_date is not None:
            return job.up_to_date
        assert job.tmp is not None  # one process: --task qa has no data-parallel path
        checkpointing = job.checkpointing()
        checkpointing = replace(checkpointing, folder=checkpointing.folder / f"seed-{plan.settings.seed}")
        hooks = TrainingHooks(log_path=job.tmp / "train_log.jsonl", progress=run.progress, checkpoint=checkpointing, stop=job.stop)
        with resource_errors(job.tmp):
            stats = _train_and_score(plan, train_data, scored, job.tmp, hooks)
        return job.commit(stats, extra={"model": str(setup.ref.path)})


@dataclass
class _QaPlan:
    """What a QA fine-tuning resolved before any data is read: the model, its tokenizers, the settings filled in."""

    ref: Any
    tokenizers: Any
    settings: FinetuneSettings  # max_length, doc_stride and the mix resolved
    pool: str
    gmap: Any  # G-MAP's set-up (None: off)
    device: Any

    def config(self) -> dict[str, Any]:
        """What the stage's fingerprint covers of the run's options (the model and files: :meth:`RunnerSetup.record`)."""
        settings = self.settings
        return {
            "task": {
                "task": TASK,
                "max_length": settings.max_length,
                "doc_stride": settings.doc_stride,
                "max_question_tokens": MAX_QUESTION_TOKENS,
                "has_domain_tokenizer": self.tokenizers.domain is not None,
            },
            "train": settings.recorded(),
            "pool": self.pool,
            "limit": None,  # the first N questions once; runs made then keep their fingerprints
            "model": self.ref.name,
        }


def _plan(setup: RunnerSetup, settings: FinetuneSettings) -> _QaPlan:
    from greenadapt.machine.devices import pick_device
    from greenadapt.inference.qa.model import resolve_pool

    tokenizers = setup.tokenizers
    mix = resolve_mix(settings.mix, tokenizers.domain is not None, setup.ref.path)
    pool = resolve_pool(settings.pool, tokenizers, setup.ref.path)
    max_length, doc_stride = window_lengths(settings, setup.folder)
    settings = settings.replaced(max_length=max_length, doc_stride=doc_stride, mix=mix, seed=settings.seed_list[0])
    return _QaPlan(setup.ref, tokenizers, settings, pool, setup.gmap, pick_device(settings.device))


def _train_and_score(plan: _QaPlan, train_data: SquadData, scored: dict[str, SquadData], folder: Path,
                     hooks: TrainingHooks) -> dict[str, Any]:
    """Featurize, train, save the model and tokenizers into ``folder``, answer and score ``scored``: the manifest's stats."""
    from greenadapt.artifacts.pretrained import quiet_transformers

    tokenizers, settings, gmap, device, pool = plan.tokenizers, plan.settings, plan.gmap, plan.device, plan.pool
    mix = settings.mix or 0.0
    views = [tokenizers.general] + ([tokenizers.domain] if tokenizers.domain is not None and mix > 0 else [])
    memory_tokenizer = None if gmap is None else (gmap.tokenizer or tokenizers.general)
    memory_length = 512 if gmap is None else gmap.max_length
    assert settings.max_length is not None and settings.doc_stride is not None  # _plan
    windows = {"max_length": settings.max_length, "doc_stride": settings.doc_stride, "max_question_tokens": MAX_QUESTION_TOKENS}
    featurized = [featurize(train_data, tokenizer, **windows, memory_tokenizer=memory_tokenizer, memory_length=memory_length)
                  for tokenizer in views]
    dropped = featurized[0][1]
    if len(featurized[0][0].input_ids) == 0:
        raise DataError("no training question has a gold answer found in its context", path=train_data.path,
                        hint="check the answers' text and answer_start")
    if dropped:
        log.warning("%d training question(s) left out: their gold answer text is not in the context", dropped)
    qa_model = _load_for_training(plan.ref.path, tokenizers, settings.seed, device)
    if gmap is not None:
        from greenadapt.modeling.gmap import wiring as finetune_gmap

        qa_model = finetune_gmap.build_model(qa_model, gmap).to(device)
    stats: dict[str, Any] = {"task": TASK, "mix": mix, "pool": pool}
    stats.update(train_qa(qa_model, [f for f, _ in featurized], train_data.n_questions, len(tokenizers.general), settings, device, hooks))
    stats.update(questions_left_out=dropped, windows={name: len(f.input_ids) for name, (f, _) in zip(("general", "domain"), featurized)})
    if gmap is not None:
        finetune_gmap.save(qa_model, folder, gmap)
        stats["gmap"] = {**qa_model.describe(), **gmap.describe()}
        if qa_model.memory_cache is not None:
            stats["gmap_cache"] = qa_model.memory_cache.stats()
    else:
        with quiet_transformers():
            qa_model.save_pretrained(folder)
    _save_tokenizers(tokenizers, folder, settings.max_length)
    metrics: dict[str, Any] = {"primary_metric": "f1", "pool": pool}
    for split, data in scored.items():
        documents = len(data.documents)
        size = f"{data.n_questions:,} questions on {documents:,} document{'' if documents == 1 else 's'}"
        with said_scoring(log, split, size):  # whole papers (Covid-QA): minutes, shown question by question too
            scores, predictions = _evaluate(qa_model, tokenizers, data, pool, settings, device, gmap=gmap, progress=hooks.progress)
        stats["warnings"] += answer_warnings(split, data.answer_texts(), predictions)
        metrics[split] = scores
        (folder / "predictions").mkdir(exist_ok=True)
        write_json(folder / "predictions" / f"{split}.json", predictions, scrub=False)
        stats[split] = {k: scores[k] for k in ("exact_match", "f1", "substring_match", "questions")} | {"pool": pool}
    if scored:
        write_json(folder / "metrics.json", metrics)
    return stats


def _load_for_training(path: Path, tokenizers: Any, seed: int, device: Any) -> Any:
    import torch
    from transformers import AutoModelForQuestionAnswering, set_seed

    from greenadapt.artifacts.model_folder import check_vocab_fits
    from greenadapt.artifacts.pretrained import quiet_transformers
    from greenadapt.errors import ModelError

    set_seed(seed)  # a new QA head's initialisation
    try:
        # A missing head is expected here (training adds one), so transformers' load report is noise.
        with quiet_transformers():
            # fp32 master weights whatever the checkpoint's dtype; autocast does the rest.
            model, info = AutoModelForQuestionAnswering.from_pretrained(str(path), dtype=torch.float32, output_loading_info=True)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise ModelError(f"cannot load the model for question answering: {type(exc).__name__}", path=path) from None
    if info.get("missing_keys"):
        log.info("new question-answering head initialised (%s)", ", ".join(sorted(info["missing_keys"])[:4]))
    check_vocab_fits(tokenizers, model.get_input_embeddings().num_embeddings, path)
    return model.to(device)


def _runner(model: Any, device: Any, tokenizers: Any, gmap: Any, precision: str) -> Any:
    """What scores the trained model: in the run's own --precision (it trained in it)."""
    from greenadapt.inference.qa.infer import QaRunner

    if gmap is None:
        return QaRunner(model, device, precision=precision)
    return QaRunner(model, device, precision=precision, memory_tokenizer=gmap.tokenizer or tokenizers.general,
                    memory_length=gmap.max_length)


def _save_tokenizers(tokenizers: Any, folder: Path, max_length: int) -> None:
    from greenadapt.artifacts.pipeline_entry import write_pipeline_entry
    from greenadapt.tasks import TASK_FILE, TaskSettings, get_task

    tokenizers.save(folder)
    settings = TaskSettings(task=TASK, labels=[], max_length=max_length, metric="f1", has_domain_tokenizer=tokenizers.domain is not None)
    write_json(folder / TASK_FILE, settings.to_json())
    task = get_task(TASK)
    write_pipeline_entry(folder, pipeline_tag=task.pipeline_tag, auto_model=task.auto_model, two_tokenizers=tokenizers.domain is not None)


def _evaluate(
    model: Any, tokenizers: Any, data: SquadData, pool: str, settings: FinetuneSettings, device: Any, *, gmap: Any = None,
    progress: Progress = NULL_PROGRESS,
) -> tuple[dict[str, Any], dict[str, str]]:
    """``greenadapt qa``'s whole-document answers and scores; also the predictions, id → answer."""
    from greenadapt.data.squad_metrics import evaluate
    from greenadapt.inference.qa.answering import answer_questions

    assert settings.max_length is not None  # resolved by window_lengths before training
    answered = {
        question.id: (answers[0]["text"] if answers else "")
        for question, answers in answer_questions(
            _runner(model, device, tokenizers, gmap, settings.precision), data.documents, tokenizers.for_pool(pool),
            max_length=settings.max_length, batch_size=settings.eval_batch_size, n_best=1, spans=settings, progress=progress,
        )
    }
    predictions = {q.id: answered.get(q.id, "") for q in data.questions}
    golds = data.answer_texts()
    if not golds:
        log.warning("%s has no gold answers: predictions only, no scores", data.path)
    return {**evaluate(predictions, golds), "pool": pool, "questions": len(predictions)}, predictions
