"""SQuAD-style fine-tuning of an extractive QA model, with the two-tokenizer mixture.

Features are the usual ones of the transformers SQuAD recipe: ``[CLS]
question [SEP] context [SEP]`` windows of at most ``max_length`` wordpieces
overlapping by ``doc_stride``, the question cut to ``max_question_tokens``;
a window whose context does not contain the whole gold answer (and a
SQuAD v2 no-answer question) is labelled with the [CLS] position. Every
question is featurised under each tokenizer once; in epoch e its features
come from T̂ with probability ``mix`` (a fresh draw per question and
epoch, as in ``greenadapt finetune``), otherwise from T_LM.

AdamW (no decay on biases and LayerNorm), linear warm-up then linear decay,
gradient clipping. The output folder loads with
``AutoModelForQuestionAnswering`` and ``AutoTokenizer`` (T̂ at the top,
T_LM in ``general-tokenizer/`` when the input had both), so ``greenadapt qa``
and transformers can use it directly.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.errors import DataError, UsageError
from greenadapt.progress import NULL_PROGRESS, Progress
from greenadapt.stage import StageOutcome, StageRun, file_identity, resource_errors, write_json

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.qa.data import SquadData

log = logging.getLogger(__name__)

KIND = "finetune"


@dataclass(frozen=True)
class QaTrainOptions:
    mix: float | None = None  # None: 0.5 with a domain tokenizer, else 0
    max_length: int = 384
    doc_stride: int = 128
    max_question_tokens: int = 64
    batch_size: int = 16
    lr: float = 3e-5
    epochs: int = 2
    max_steps: int | None = None
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 42
    limit: int | None = None  # only the first N training questions
    device: str | None = None

    def check(self) -> None:
        if self.mix is not None and not 0.0 <= self.mix <= 1.0:
            raise UsageError(f"--mix {self.mix} is not a probability", hint="use a value from 0 to 1")
        for name in ("max_length", "batch_size", "epochs", "max_question_tokens"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if self.max_steps is not None and self.max_steps < 1:
            raise UsageError("--max-steps must be at least 1")
        if not 0 < self.doc_stride < self.max_length:
            raise UsageError(f"--doc-stride {self.doc_stride} must be between 1 and --max-length - 1")
        if self.lr <= 0 or not 0 <= self.warmup < 1:
            raise UsageError("--lr must be positive and --warmup a fraction below 1")


@dataclass
class Features:
    """The training windows of every question under one tokenizer."""

    input_ids: list[np.ndarray]
    token_type_ids: list[np.ndarray]
    start_positions: np.ndarray
    end_positions: np.ndarray
    question_index: np.ndarray  # which question each window belongs to


def featurize(squad: SquadData, tokenizer: Any, options: QaTrainOptions) -> tuple[Features, int]:
    """Windows and answer positions for every usable question; also how many questions were left out."""
    import numpy as np

    questions, contexts, answers = [], [], []
    for document in squad.documents:
        for question in document.questions:
            gold = next((a for a in question.answers or () if a.start is not None), None)
            questions.append(question.text)
            contexts.append(document.context)
            answers.append(None if gold is None else (gold.start, gold.start + len(gold.text)))
    usable = [i for i, q in enumerate(squad.questions) if answers[i] is not None or q.is_impossible]
    dropped = len(questions) - len(usable)
    if not usable:
        return Features([], [], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)), dropped
    # Cut long questions in the text, at a wordpiece boundary, so the pair encoding below keeps room for context.
    question_offsets = tokenizer(
        [questions[i] for i in usable], add_special_tokens=False, return_offsets_mapping=True
    )["offset_mapping"]
    cut_questions = [
        questions[i][: offsets[options.max_question_tokens - 1][1]] if len(offsets) > options.max_question_tokens else questions[i]
        for offsets, i in zip(question_offsets, usable, strict=True)
    ]
    encoded = tokenizer(
        cut_questions,
        [contexts[i] for i in usable],
        truncation="only_second",
        max_length=options.max_length,
        stride=options.doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        return_token_type_ids=True,
        padding=False,
    )
    input_ids: list[np.ndarray] = []
    token_types: list[np.ndarray] = []
    starts, ends, owners = [], [], []
    for row, owner in enumerate(encoded["overflow_to_sample_mapping"]):
        sequence = encoded.sequence_ids(row)
        offsets = encoded["offset_mapping"][row]
        context_positions = [k for k, s in enumerate(sequence) if s == 1]
        span = answers[usable[owner]]
        start = end = 0  # [CLS]: no answer in this window
        if span is not None and context_positions:
            first, last = context_positions[0], context_positions[-1]
            if offsets[first][0] <= span[0] and offsets[last][1] >= span[1]:
                start = next(k for k in context_positions if offsets[k][1] > span[0])
                end = next(k for k in reversed(context_positions) if offsets[k][0] < span[1])
        input_ids.append(np.asarray(encoded["input_ids"][row], dtype=np.int64))
        token_types.append(np.asarray(encoded["token_type_ids"][row], dtype=np.int64))
        starts.append(start)
        ends.append(end)
        owners.append(usable[owner])
    features = Features(
        input_ids,
        token_types,
        start_positions=np.asarray(starts, dtype=np.int64),
        end_positions=np.asarray(ends, dtype=np.int64),
        question_index=np.asarray(owners, dtype=np.int64),
    )
    return features, dropped


def run_finetune_qa(
    model: str | os.PathLike[str] | None,
    train: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    dev: str | os.PathLike[str] | None = None,
    options: QaTrainOptions | None = None,
    force: bool = False,
    wait: bool = False,
    progress: Progress = NULL_PROGRESS,
) -> StageOutcome:
    """Fine-tune ``model`` for extractive QA on SQuAD-style ``train``; evaluate on ``dev`` with ``greenadapt qa``."""
    from greenadapt.models import resolve_model
    from greenadapt.qa.data import read_squad
    from greenadapt.qa.model import load_tokenizers, resolve_device

    options = options or QaTrainOptions()
    options.check()
    ref = resolve_model(model)
    tokenizers = load_tokenizers(ref.path)
    mix = options.mix if options.mix is not None else (0.5 if tokenizers.domain is not None else 0.0)
    if mix > 0 and tokenizers.domain is None:
        raise UsageError(
            f"--mix {mix:g} needs a domain tokenizer, but this model has only one",
            path=ref.path,
            hint="pass a model folder written by `greenadapt expand`, or --mix 0",
        )
    device = resolve_device(options.device)
    train_data = read_squad(train).limited(options.limit)
    dev_data = read_squad(dev) if dev is not None else None
    config = {"task": "qa", **asdict(options), "mix": mix}
    config.pop("device")
    inputs = [ref.identity(), {"role": "train", **file_identity(train_data.path)}]
    if dev_data is not None:
        inputs.append({"role": "dev", **file_identity(dev_data.path)})
    with StageRun(KIND, out, config, inputs, force=force, wait=wait, libraries=("torch", "transformers", "tokenizers")) as run:
        if run.skipped:
            assert run.manifest is not None
            return StageOutcome(run.out, run.manifest, True, run.skip_reason)
        views = [tokenizers.general] + ([tokenizers.domain] if tokenizers.domain is not None and mix > 0 else [])
        featurized = [featurize(train_data, tokenizer, options) for tokenizer in views]
        dropped = featurized[0][1]
        if len(featurized[0][0].input_ids) == 0:
            raise DataError(
                "no training question has a gold answer found in its context",
                path=train_data.path,
                hint="check the answers' text and answer_start",
            )
        if dropped:
            log.warning("%d training question(s) left out: their gold answer text is not in the context", dropped)
        qa_model = _load_for_training(ref.path, device)
        with resource_errors(run.tmp):
            log_path = run.tmp / "train_log.jsonl"
            stats = _train(qa_model, [f for f, _ in featurized], train_data.n_questions, mix, options, device, log_path, progress)
            stats.update(questions_left_out=dropped, features={name: len(f.input_ids) for name, (f, _) in zip(("general", "domain"), featurized)})
            qa_model.save_pretrained(run.tmp)
            _save_tokenizers(tokenizers, run.tmp)
            if dev_data is not None:
                metrics = _evaluate(qa_model, tokenizers, dev_data, options, device)
                write_json(run.tmp / "metrics.json", metrics)
                stats["dev"] = {k: metrics[k] for k in ("exact_match", "f1", "substring_match", "pool")}
        manifest = run.commit(stats=stats, extra={"model": str(ref.path)})
        return StageOutcome(run.out, manifest, False)


def _load_for_training(path: Path, device: Any) -> Any:
    from transformers import AutoModelForQuestionAnswering

    from greenadapt.errors import ModelError
    from greenadapt.qa.model import quiet_transformers_loading

    try:
        with quiet_transformers_loading():
            model, info = AutoModelForQuestionAnswering.from_pretrained(str(path), output_loading_info=True)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise ModelError(f"cannot load the model for question answering: {type(exc).__name__}", path=path) from None
    if info.get("missing_keys"):
        log.info("new question-answering head initialised (%s)", ", ".join(sorted(info["missing_keys"])[:4]))
    return model.to(device)


def _train(
    model: Any,
    views: list[Features],
    n_questions: int,
    mix: float,
    options: QaTrainOptions,
    device: Any,
    log_path: Path,
    progress: Progress,
) -> dict[str, Any]:
    import numpy as np
    import torch

    from greenadapt.finetune.train import autocast_dtype, choose_views

    torch.manual_seed(options.seed)
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    per_epoch = [math.ceil(len(v.input_ids) / options.batch_size) for v in views]
    total = options.max_steps or options.epochs * max(per_epoch)
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": options.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=options.lr
    )
    warmup = int(total * options.warmup)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: (step + 1) / max(1, warmup) if step < warmup else max(0.0, (total - step) / max(1, total - warmup))
    )
    amp = autocast_dtype("auto", device)
    model.train()
    step, began, losses = 0, time.perf_counter(), []
    progress.start("training", total=total, unit="steps")
    with open(log_path, "w", encoding="utf-8") as log_file:
        epoch = 0
        while step < total:
            chosen = choose_views(n_questions, mix, options.seed, epoch) if len(views) > 1 else np.zeros(n_questions, np.int64)
            rows = [(v, r) for v, features in enumerate(views) for r in np.flatnonzero(chosen[features.question_index] == v)]
            order = np.random.default_rng([options.seed, epoch]).permutation(len(rows))
            for first in range(0, len(order), options.batch_size):
                batch = [rows[i] for i in order[first : first + options.batch_size]]
                inputs = _collate(views, batch, pad_id, device)
                with torch.autocast(device.type, dtype=amp, enabled=amp is not None):
                    loss = model(**inputs).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), options.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                losses.append(loss.item())
                domain_share = sum(v for v, _ in batch) / len(batch)
                log_file.write(json.dumps({"step": step, "epoch": epoch, "loss": losses[-1], "lr": scheduler.get_last_lr()[0], "domain_share": domain_share}) + "\n")
                progress.update(step, loss=f"{losses[-1]:.3f}")
                if step >= total:
                    break
            epoch += 1
    progress.finish()
    model.eval()
    return {
        "steps": step,
        "epochs_started": epoch,
        "mix": mix,
        "first_loss": losses[0],
        "last_loss": float(np.mean(losses[-10:])),
        "train_seconds": round(time.perf_counter() - began, 2),
    }


def _collate(views: list[Features], batch: list[tuple[int, int]], pad_id: int, device: Any) -> dict[str, Any]:
    import numpy as np
    import torch

    width = max(len(views[v].input_ids[r]) for v, r in batch)
    ids = np.full((len(batch), width), pad_id, dtype=np.int64)
    types = np.zeros((len(batch), width), dtype=np.int64)
    mask = np.zeros((len(batch), width), dtype=np.int64)
    for i, (v, r) in enumerate(batch):
        n = len(views[v].input_ids[r])
        ids[i, :n] = views[v].input_ids[r]
        types[i, :n] = views[v].token_type_ids[r]
        mask[i, :n] = 1
    starts = np.array([views[v].start_positions[r] for v, r in batch])
    ends = np.array([views[v].end_positions[r] for v, r in batch])
    tensors = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "start_positions": starts, "end_positions": ends}
    return {name: torch.from_numpy(array).to(device) for name, array in tensors.items()}


def _save_tokenizers(tokenizers: Any, folder: Path) -> None:
    from greenadapt.qa.model import GENERAL_TOKENIZER_DIR

    if tokenizers.domain is None:
        tokenizers.general.save_pretrained(folder)
        return
    tokenizers.domain.save_pretrained(folder)
    tokenizers.general.save_pretrained(folder / GENERAL_TOKENIZER_DIR)


def _evaluate(model: Any, tokenizers: Any, dev: SquadData, options: QaTrainOptions, device: Any) -> dict[str, Any]:
    from greenadapt.qa.infer import QaRunner
    from greenadapt.qa.metrics import evaluate
    from greenadapt.qa.run import answer_questions

    pool = "mean" if tokenizers.domain is not None else "general"
    runner = QaRunner(model, device)
    predictions = {
        question.id: (answers[0]["text"] if answers else "")
        for question, answers in answer_questions(
            runner, dev.documents, tokenizers.for_pool(pool), max_length=options.max_length,
            batch_size=options.batch_size, n_best=1, max_answer_chars=500,
        )
    }
    golds = {q.id: [a.text for a in q.answers] for q in dev.questions if q.answers is not None}
    return {**evaluate(predictions, golds), "pool": pool, "questions": len(predictions)}
