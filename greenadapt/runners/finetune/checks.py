"""The checks of a labelling fine-tuning's options: run when its settings are built, and again by the runner for library callers."""

from __future__ import annotations

from dataclasses import dataclass

from greenadapt.data.task_files import check_entity_type
from greenadapt.defaults import check_max_length, check_seed
from greenadapt.errors import UsageError
from greenadapt.modeling.embeddings import TRAIN_EMBEDDINGS
from greenadapt.tasks import LabellingTask
from greenadapt.tasks.options import TRAIN_ON, FinetuneOptions
from greenadapt.training.distributed import check_precision
from greenadapt.training.finetuning import TrainConfig, check_mix
from greenadapt.training.pooling import check_pool


@dataclass(frozen=True)
class TaskValues:
    """The task-dependent options of a labelling run, the unset (None) ones at the task's defaults."""

    training: TrainConfig
    max_length: int | None  # None: the model's own limit
    max_words: int
    pool: str

    @classmethod
    def of(cls, task: LabellingTask, options: FinetuneOptions) -> TaskValues:
        defaults = task.defaults
        return cls(
            training=options.training or task.training_config(),
            max_length=options.max_length if options.max_length is not None else defaults.max_length,
            max_words=options.max_words if options.max_words is not None else defaults.max_words,
            pool=options.pool or "mean",
        )


def check_options(options: FinetuneOptions, values: TaskValues) -> None:
    """Every option of a labelling run that no file or model decides, before any is read (one line each, naming the option)."""
    training = values.training
    check_entity_type(options.reader.entity_type)
    check_mix(training.mix)
    check_pool(values.pool)
    if options.train_on not in TRAIN_ON:
        raise UsageError(f"unknown --train-on {options.train_on!r}", hint="train or train+dev")
    if training.train_embeddings not in TRAIN_EMBEDDINGS:
        raise UsageError(f"unknown --train-embeddings {training.train_embeddings!r}", hint="all, new or none")
    if not options.seeds or len(set(options.seeds)) != len(options.seeds):
        raise UsageError("--seeds needs distinct integers, e.g. 1,2,3")
    for seed in options.seeds:
        check_seed(seed, option="--seeds" if len(options.seeds) > 1 else "--seed")
    for source, name in [(training, n) for n in ("batch_size", "grad_accum", "epochs", "eval_batch_size")] + [
        (values, n) for n in ("max_length", "max_words") if getattr(values, n) is not None
    ]:
        if getattr(source, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if values.max_length is not None:
        check_max_length(values.max_length)
    if options.save_every is not None and options.save_every < 1:
        raise UsageError("--save-every must be at least 1")
    training.check_schedule()
    for flag, count in (("--eval-every", training.eval_every), ("--early-stopping", training.early_stopping)):
        if count is not None and (options.dev is None or options.train_on != "train"):
            raise UsageError(f"{flag} scores the dev file while training: it needs --dev (and --train-on train)",
                             hint=f"pass --dev FILE, or leave {flag} out")
    check_precision(training.precision, options.device)
    training.check_speed(options.device)
    if options.report_to:
        from greenadapt.training.trackers import check_report_to

        check_report_to(options.report_to)
