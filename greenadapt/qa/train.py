"""SQuAD-style fine-tuning of an extractive QA model, with the two-tokenizer mixture.

Features are the usual ones of the transformers SQuAD recipe: ``[CLS]
question [SEP] context [SEP]`` windows of at most ``max_length`` wordpieces
overlapping by ``doc_stride``, the question cut to ``max_question_tokens``
(and to what the stride leaves room for); a window whose context does not
contain the whole gold answer (and a SQuAD v2 no-answer question) is
labelled with the [CLS] position. Every question is featurised under each
tokenizer once; in epoch e all its windows come from T̂ with probability
``mix`` (``choose_views``: a fresh draw per question and epoch, as in
``greenadapt finetune``), otherwise from T_LM.

The loop is ``greenadapt finetune``'s in everything but the loss: the knobs
are a :class:`~greenadapt.finetune.train.TrainConfig`; ``batch_size``
windows per optimizer step in length-grouped batches, cut into
``grad_accum`` micro-batches whose summed loss is divided by the global
batch size (so the gradient is that of the mean loss whatever
``grad_accum`` is); AdamW without decay on biases and norms, linear
warm-up then decay, gradient clipping, autocast per ``precision``, and the
row-wise trained added embeddings of ``--train-embeddings``. One process:
there is no data-parallel path for QA yet.

``dev`` and ``test`` are scored after training the way ``greenadapt qa``
answers: each question over its whole context with centred windows,
word-level logits pooled over the tokenizers (``pool``), exact match and F1
with the official SQuAD normalisation. That is not transformers' per-window
post-processing, so the numbers are comparable with ``greenadapt qa`` runs
rather than with ``run_qa.py``'s. Dev does not select an epoch.

The output folder loads with ``AutoModelForQuestionAnswering`` and
``AutoTokenizer`` (T̂ at the top, T_LM in ``general-tokenizer/`` when the
input had both), so ``greenadapt qa`` and transformers can use it directly;
its ``greenadapt_task.json`` says task ``qa`` so ``greenadapt predict``
can point to ``greenadapt qa`` instead.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from greenadapt.expanded_model import ExpandedModel
from greenadapt.errors import DataError, UsageError
from greenadapt.finetune.train import TrainConfig
from greenadapt.gmap.options import GmapOptions
from greenadapt.progress import NULL_PROGRESS, Progress
from greenadapt.stage import StageOutcome, StageRun, file_identity, resource_errors, write_json
from greenadapt.training.batches import choose_views, length_grouped_batches
from greenadapt.training.runtime import Trainer, TrainingTask, run_training

if TYPE_CHECKING:
    from greenadapt.qa.data import SquadData

log = logging.getLogger(__name__)

KIND = "finetune"
TASK = "qa"
# The usual SQuAD recipe (BERT: 3e-5, 2 epochs, 384/128 windows); batch 16 fits a 12 GB GPU.
QA_TRAINING = TrainConfig(batch_size=16, lr=3e-5, epochs=2)
DEFAULT_MAX_LENGTH = 384
DEFAULT_DOC_STRIDE = 128
# Line-based task files: given to --task qa they are a mix-up of tasks, not broken JSON.
_NOT_SQUAD_SUFFIXES = (".tsv", ".csv", ".txt", ".conll", ".conllu", ".iob", ".iob2", ".bio", ".jsonl", ".ndjson")


@dataclass(frozen=True)
class QaTrainOptions:
    training: TrainConfig = field(default_factory=lambda: QA_TRAINING)  # its mix None: 0.5 with a domain tokenizer, else 0
    max_length: int | None = None  # None: 384, or the model's limit when that is smaller
    doc_stride: int | None = None  # None: 128, or a third of max_length when that is smaller
    max_question_tokens: int = 64
    pool: str | None = None  # dev/test scoring; None: mean with a domain tokenizer, else general
    limit: int | None = None  # only the first N training questions
    device: str = "auto"
    gmap: GmapOptions = field(default_factory=GmapOptions)  # G-MAP fusion (strategy "none": off)
    workdir: Path | None = None  # where --gmap-cache keeps the general states (<workdir>/cache/gmap)

    def check(self) -> None:
        from greenadapt.finetune.embeddings import TRAIN_EMBEDDINGS

        config = self.training
        if config.mix is not None and not 0.0 <= config.mix <= 1.0:
            raise UsageError(f"--mix {config.mix} is not a probability", hint="use a value from 0 to 1")
        for flag, value in (
            ("--batch-size", config.batch_size),
            ("--grad-accum", config.grad_accum),
            ("--epochs", config.epochs),
            ("--eval-batch-size", config.eval_batch_size),
            ("--max-steps", config.max_steps if config.max_steps is not None else 1),
            ("--doc-stride", self.doc_stride if self.doc_stride is not None else 1),
            ("max_question_tokens", self.max_question_tokens),
            ("--limit", self.limit if self.limit is not None else 1),
        ):
            if value < 1:
                raise UsageError(f"{flag} must be at least 1 (got {value})")
        if config.batch_size < config.grad_accum:
            raise UsageError(
                f"--batch-size {config.batch_size} is smaller than --grad-accum {config.grad_accum}",
                hint="--batch-size is the number of windows of one optimizer step",
            )
        if config.lr <= 0 or not 0 <= config.warmup < 1:
            raise UsageError("--lr must be positive and --warmup a fraction below 1")
        if config.train_embeddings not in TRAIN_EMBEDDINGS:
            raise UsageError(f"unknown --train-embeddings {config.train_embeddings!r}", hint="all, new or none")
        if config.precision not in ("auto", "fp32", "bf16", "fp16"):
            raise UsageError(f"unknown --precision {config.precision!r}", hint="auto, fp32, bf16 or fp16")


@dataclass
class Features:
    """The training windows of every question under one tokenizer."""

    input_ids: list[np.ndarray]
    token_type_ids: list[np.ndarray]
    start_positions: np.ndarray
    end_positions: np.ndarray
    question_index: np.ndarray  # which question each window belongs to
    # G-MAP: the general model's input per window (the same question and context span under its tokenizer)
    memory_ids: list[np.ndarray] | None = None
    memory_type_ids: list[np.ndarray] | None = None


def window_lengths(options: QaTrainOptions, folder: ExpandedModel) -> tuple[int, int]:
    """(max_length, doc_stride): the requested ones, checked against the model, or the defaults that fit it."""
    if options.max_length is None:
        max_length = min(DEFAULT_MAX_LENGTH, folder.length_limit)
    else:
        max_length = folder.checked_length(options.max_length)
    doc_stride = options.doc_stride if options.doc_stride is not None else min(DEFAULT_DOC_STRIDE, max_length // 3)
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
            hint='the format `greenadapt qa` reads, {"data": [{"paragraphs": [...]}]}; NER and classification files go with --task ner or classify',
        )


def featurize(
    squad: SquadData, tokenizer: Any, options: QaTrainOptions, *, memory_tokenizer: Any = None, memory_length: int = 512
) -> tuple[Features, int]:
    """Windows and answer positions for every usable question; also how many questions were left out.

    With ``memory_tokenizer`` (G-MAP), each window also gets the general
    model's input: the window itself when ``memory_tokenizer`` is
    ``tokenizer``, else the (cut) question and the window's context span
    (by characters) under ``memory_tokenizer``, at most ``memory_length`` long.
    """
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
    if options.max_length is None or options.doc_stride is None:
        raise ValueError("featurize needs max_length and doc_stride set (see window_lengths)")
    # Cut long questions in the text, at a wordpiece boundary, so the pair encoding below keeps room
    # for doc_stride + 1 context pieces (window_lengths guarantees at least one question piece).
    budget = min(options.max_question_tokens, options.max_length - 4 - options.doc_stride)
    question_offsets = tokenizer(
        [questions[i] for i in usable], add_special_tokens=False, return_offsets_mapping=True
    )["offset_mapping"]
    cut_questions = [
        questions[i][: offsets[budget - 1][1]] if len(offsets) > budget else questions[i]
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
    spans: list[tuple[str, str]] = []  # G-MAP: (question, context span) of each window
    for row, owner in enumerate(encoded["overflow_to_sample_mapping"]):
        sequence = encoded.sequence_ids(row)
        offsets = encoded["offset_mapping"][row]
        context_positions = [k for k, s in enumerate(sequence) if s == 1]
        if context_positions:
            span_text = contexts[usable[owner]][offsets[context_positions[0]][0] : offsets[context_positions[-1]][1]]
        else:
            span_text = ""
        spans.append((cut_questions[owner], span_text))
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
    if memory_tokenizer is tokenizer:
        features.memory_ids, features.memory_type_ids = features.input_ids, features.token_type_ids
    elif memory_tokenizer is not None:
        memory = memory_tokenizer(
            [q for q, _ in spans], [c for _, c in spans], truncation="only_second", max_length=memory_length,
            return_token_type_ids=True, padding=False,
        )
        features.memory_ids = [np.asarray(ids, dtype=np.int64) for ids in memory["input_ids"]]
        features.memory_type_ids = [np.asarray(types, dtype=np.int64) for types in memory["token_type_ids"]]
    return features, dropped


def run_finetune_qa(
    model: str | os.PathLike[str] | None,
    train: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    dev: str | os.PathLike[str] | None = None,
    test: str | os.PathLike[str] | None = None,
    options: QaTrainOptions | None = None,
    force: bool = False,
    wait: bool = False,
    progress: Progress = NULL_PROGRESS,
) -> StageOutcome:
    """Fine-tune ``model`` for extractive QA on SQuAD-style ``train``; score ``dev``/``test`` as ``greenadapt qa`` does."""
    from greenadapt.destination import check_run_destination
    from greenadapt.vectors import check_weights_load_safely
    from greenadapt.models import quiet_transformers
    from greenadapt.expanded_model import pick_device
    from greenadapt.models import resolve_model
    from greenadapt.qa.data import read_squad
    from greenadapt.qa.model import resolve_pool

    options = options or QaTrainOptions()
    options.check()
    splits = {"train": train, "dev": dev, "test": test}
    for split, path in splits.items():
        if path is not None:
            check_squad_path(path, f"--{split}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UsageError("--task qa trains in one process; it has no data-parallel path", hint="run it without torchrun")
    ref = resolve_model(model)
    check_run_destination(out, kind=KIND, force=force, model=ref.path, data=splits.values(), workdir=options.workdir)
    check_weights_load_safely(ref.path)
    folder = ExpandedModel.open(ref)
    tokenizers = folder.tokenizers
    requested_mix = options.training.mix
    mix = requested_mix if requested_mix is not None else (0.5 if tokenizers.domain is not None else 0.0)
    if mix > 0 and tokenizers.domain is None:
        raise UsageError(
            f"--mix {mix:g} needs a domain tokenizer, but this model has only one",
            path=ref.path,
            hint="pass a model folder written by `greenadapt expand`, or --mix 0",
        )
    pool = resolve_pool(options.pool, tokenizers, ref.path)
    options.gmap.check()
    setup = None
    if options.gmap.enabled:
        from greenadapt.finetune import gmap as finetune_gmap
        from greenadapt.workspace import workdir as resolve_workdir

        setup = finetune_gmap.prepare(options.gmap, ref, tokenizers.general, cache_root=resolve_workdir(options.workdir) / "cache")
    max_length, doc_stride = window_lengths(options, folder)
    options = replace(options, max_length=max_length, doc_stride=doc_stride, training=replace(options.training, mix=mix))
    device = pick_device(options.device)
    train_data = read_squad(train).limited(options.limit)
    scored = {split: read_squad(path) for split, path in splits.items() if split != "train" and path is not None}
    config = {
        "task": {
            "task": TASK,
            "max_length": max_length,
            "doc_stride": doc_stride,
            "max_question_tokens": options.max_question_tokens,
            "has_domain_tokenizer": tokenizers.domain is not None,
        },
        "train": {k: v for k, v in asdict(options.training).items() if k != "eval_batch_size"},
        "pool": pool,
        "limit": options.limit,
        "model": ref.name,
    }
    inputs = [ref.identity(), {"role": "train", **file_identity(train_data.path)}]
    inputs += [{"role": split, **file_identity(data.path)} for split, data in scored.items()]
    if setup is not None:
        config["gmap"] = options.gmap.to_config(setup.general)
        inputs.append({"role": "general", **setup.general.identity()})
    libraries = ("torch", "transformers", "tokenizers")
    with StageRun(KIND, out, config, inputs, force=force, wait=wait, libraries=libraries) as run:
        if run.skipped:
            assert run.manifest is not None
            return StageOutcome(run.out, run.manifest, True, run.skip_reason)
        views = [tokenizers.general] + ([tokenizers.domain] if tokenizers.domain is not None and mix > 0 else [])
        memory_tokenizer = None if setup is None else (setup.tokenizer or tokenizers.general)
        memory_length = 512 if setup is None else setup.max_length
        featurized = [
            featurize(train_data, tokenizer, options, memory_tokenizer=memory_tokenizer, memory_length=memory_length)
            for tokenizer in views
        ]
        dropped = featurized[0][1]
        if len(featurized[0][0].input_ids) == 0:
            raise DataError(
                "no training question has a gold answer found in its context",
                path=train_data.path,
                hint="check the answers' text and answer_start",
            )
        if dropped:
            log.warning("%d training question(s) left out: their gold answer text is not in the context", dropped)
        qa_model = _load_for_training(ref.path, tokenizers, options.training.seed, device)
        if setup is not None:
            from greenadapt.finetune import gmap as finetune_gmap

            qa_model = finetune_gmap.build_model(qa_model, setup).to(device)
        with resource_errors(run.tmp):
            stats: dict[str, Any] = {"task": TASK, "mix": mix, "pool": pool}
            stats.update(
                _train(
                    qa_model,
                    [f for f, _ in featurized],
                    train_data.n_questions,
                    len(tokenizers.general),
                    options.training,
                    device,
                    run.tmp / "train_log.jsonl",
                    progress,
                )
            )
            stats.update(questions_left_out=dropped, windows={name: len(f.input_ids) for name, (f, _) in zip(("general", "domain"), featurized)})
            if setup is not None:
                finetune_gmap.save(qa_model, run.tmp, setup)
                stats["gmap"] = {**qa_model.describe(), **setup.describe()}
                if qa_model.memory_cache is not None:
                    stats["gmap_cache"] = qa_model.memory_cache.stats()
            else:
                with quiet_transformers():
                    qa_model.save_pretrained(run.tmp)
            _save_tokenizers(tokenizers, run.tmp, max_length)
            metrics: dict[str, Any] = {"primary_metric": "f1", "pool": pool}
            for split, data in scored.items():
                scores, predictions = _evaluate(
                    qa_model, tokenizers, data, pool, max_length, options.training.eval_batch_size, device, setup=setup
                )
                metrics[split] = scores
                (run.tmp / "predictions").mkdir(exist_ok=True)
                write_json(run.tmp / "predictions" / f"{split}.json", predictions)
                stats[split] = {k: scores[k] for k in ("exact_match", "f1", "substring_match", "questions")} | {"pool": pool}
            if scored:
                write_json(run.tmp / "metrics.json", metrics)
        manifest = run.commit(stats=stats, extra={"model": str(ref.path)})
        return StageOutcome(run.out, manifest, False)


def _load_for_training(path: Path, tokenizers: Any, seed: int, device: Any) -> Any:
    import torch
    from transformers import AutoModelForQuestionAnswering, set_seed

    from greenadapt.errors import ModelError
    from greenadapt.models import quiet_transformers
    from greenadapt.expanded_model import check_vocab_fits

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


class QaTask(TrainingTask):
    """Start/end-position training on windows; each question's windows all come from the tokenizer its epoch drew."""

    label = "fine-tuning (qa)"

    def __init__(self, trainer: Trainer, views: list[Features], n_questions: int, *, pad_id: int) -> None:
        self.trainer, self.views, self.n_questions, self.pad_id = trainer, views, n_questions, pad_id
        mix = trainer.config.mix  # type: ignore[attr-defined]
        self.mix = mix or 0.0
        # With mix 1 the general windows are never drawn: they must not stretch the epochs either.
        self.used = [v for v in range(len(views)) if (v == 0 and self.mix < 1) or (v == 1 and self.mix > 0)]
        self.rows: list[tuple[int, int]] = []
        self.lengths = np.zeros(0, np.int64)
        self.batch_rows: list[tuple[int, int]] = []

    def epoch_batches(self, epoch: int, step: int) -> list[np.ndarray]:
        config, views = self.trainer.config, self.views
        chosen = choose_views(self.n_questions, self.mix, config.seed, epoch)
        self.rows = [(v, int(r)) for v in self.used for r in np.flatnonzero(chosen[views[v].question_index] == v)]
        self.lengths = np.array([len(views[v].input_ids[r]) for v, r in self.rows])
        return length_grouped_batches(self.lengths, config.batch_size, config.seed, epoch)

    def parts(self, trainer: Trainer, batch: np.ndarray) -> list[Any] | None:
        parts = super().parts(trainer, batch)
        if parts is not None:
            self.batch_rows = [self.rows[i] for i in batch]
            trainer.load_rows([self.views[v].input_ids[r] for v, r in self.batch_rows if v == 1])
        return parts

    def loss(self, part: np.ndarray) -> Any:
        import torch

        trainer = self.trainer
        inputs, starts, ends = _collate(self.views, [self.rows[i] for i in part], self.pad_id, trainer.ctx.device)
        output = trainer.module(**inputs)
        cross_entropy = torch.nn.functional.cross_entropy
        summed = cross_entropy(output.start_logits.float(), starts, reduction="sum") + cross_entropy(output.end_logits.float(), ends, reduction="sum")
        # transformers' QA loss, (start + end) / 2 averaged over the batch, taken over the global batch.
        return summed * trainer.ctx.world / (2 * len(self.batch_rows))

    def record(self, batch: np.ndarray) -> dict[str, Any]:
        in_domain = sum(v for v, _ in self.batch_rows)
        return {"windows": len(batch), "domain_windows": in_domain, "wordpieces": int(self.lengths[batch].sum())}

    def counts(self, batch: np.ndarray) -> dict[str, int]:
        return {"domain_windows": sum(v for v, _ in self.batch_rows), "seen_windows": len(batch)}


def _train(
    model: Any,
    views: list[Features],
    n_questions: int,
    n_base_rows: int,
    config: TrainConfig,
    device: Any,
    log_path: Path,
    progress: Progress,
) -> dict[str, Any]:
    import numpy as np

    from greenadapt.finetune.train import finish_model, prepare_trainer
    from greenadapt.training.distributed import DistContext

    mix = config.mix or 0.0
    used = [v for v in range(len(views)) if (v == 0 and mix < 1) or (v == 1 and mix > 0)]
    longest = max(len(ids) for features in views for ids in features.input_ids)
    n_windows = max(len(views[v].input_ids) for v in used)
    trainer = prepare_trainer(model, config, DistContext(device=device), n_examples=n_windows, longest=longest, n_base_rows=n_base_rows)
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    run = run_training(trainer, QaTask(trainer, views, n_questions, pad_id=pad_id), log_path=log_path, progress=progress)
    finish_model(model)
    seen = run.counts.get("seen_windows", 0)
    return {
        "steps": run.steps,
        "epochs": run.epochs_run,
        "first_loss": run.losses[0],
        "last_loss": float(np.mean(run.losses[-10:])),
        "train_seconds": round(run.seconds, 2),
        "domain_fraction": round(run.counts.get("domain_windows", 0) / seen, 4) if seen else 0.0,
    }


def _collate(views: list[Features], batch: list[tuple[int, int]], pad_id: int, device: Any) -> tuple[dict[str, Any], Any, Any]:
    """Padded model inputs of ``(view, window)`` rows, and their start and end positions."""
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
    starts = np.array([views[v].start_positions[r] for v, r in batch], dtype=np.int64)
    ends = np.array([views[v].end_positions[r] for v, r in batch], dtype=np.int64)

    def to(array: np.ndarray) -> Any:
        return torch.from_numpy(array).to(device)

    inputs = {"input_ids": to(ids), "token_type_ids": to(types), "attention_mask": to(mask)}
    if views[batch[0][0]].memory_ids is not None:
        # G-MAP: the general model's own input of each window (its own length).
        memory = [(views[v].memory_ids[r], views[v].memory_type_ids[r]) for v, r in batch]  # type: ignore[index]
        width = max(len(m) for m, _ in memory)
        general_ids = np.full((len(batch), width), pad_id, dtype=np.int64)
        general_types = np.zeros((len(batch), width), dtype=np.int64)
        general_mask = np.zeros((len(batch), width), dtype=np.int64)
        for i, (m, t) in enumerate(memory):
            general_ids[i, : len(m)] = m
            general_types[i, : len(m)] = t
            general_mask[i, : len(m)] = 1
        inputs.update(general_input_ids=to(general_ids), general_token_type_ids=to(general_types), general_attention_mask=to(general_mask))
    return inputs, to(starts), to(ends)


def _runner(model: Any, device: Any, tokenizers: Any, setup: Any) -> Any:
    from greenadapt.qa.infer import QaRunner

    if setup is None:
        return QaRunner(model, device)
    return QaRunner(model, device, memory_tokenizer=setup.tokenizer or tokenizers.general, memory_length=setup.max_length)


def _save_tokenizers(tokenizers: Any, folder: Path, max_length: int) -> None:
    from greenadapt.finetune.tasks import TASK_FILE, TaskSettings
    from greenadapt.expanded_model import GENERAL_TOKENIZER_DIR

    if tokenizers.domain is None:
        tokenizers.general.save_pretrained(folder)
    else:
        tokenizers.domain.save_pretrained(folder)
        tokenizers.general.save_pretrained(folder / GENERAL_TOKENIZER_DIR)
    settings = TaskSettings(task=TASK, labels=[], max_length=max_length, metric="f1", has_domain_tokenizer=tokenizers.domain is not None)
    write_json(folder / TASK_FILE, settings.to_json())


def _evaluate(
    model: Any, tokenizers: Any, data: SquadData, pool: str, max_length: int, batch_size: int, device: Any, *, setup: Any = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """``greenadapt qa``'s whole-document answers and scores; also the predictions, id → answer."""
    from greenadapt.qa.metrics import evaluate
    from greenadapt.qa.run import answer_questions

    answered = {
        question.id: (answers[0]["text"] if answers else "")
        for question, answers in answer_questions(
            _runner(model, device, tokenizers, setup), data.documents, tokenizers.for_pool(pool), max_length=max_length,
            batch_size=batch_size, n_best=1, max_answer_chars=500,
        )
    }
    predictions = {q.id: answered.get(q.id, "") for q in data.questions}
    golds = {q.id: [a.text for a in q.answers] for q in data.questions if q.answers is not None}
    if not golds:
        log.warning("%s has no gold answers: predictions only, no scores", data.path)
    return {**evaluate(predictions, golds), "pool": pool, "questions": len(predictions)}, predictions
