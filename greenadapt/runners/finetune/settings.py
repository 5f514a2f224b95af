"""``greenadapt finetune``'s options, each declared once (:mod:`greenadapt.options`), and the run they make."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from greenadapt.data.settings import HEADERS, FieldSettings
from greenadapt.defaults import MAX_EPOCHS, MAX_STEPS, DEFAULT_SEED
from greenadapt.errors import UsageError
from greenadapt.modeling.gmap.settings import GmapSettings
from greenadapt.options import EVALUATION, INPUT_OUTPUT, MODEL, PERFORMANCE, REQUIRED, RUN_CONTROL, TRAINING, model_paths, option
from greenadapt.tasks import task_name, tasks_help
from greenadapt.training.settings import (
    CompileSettings,
    DeviceSettings,
    ScheduleSettings,
    ShapeSettings,
    TrackerSettings,
    check_seeds,
    parse_seeds,
)

if TYPE_CHECKING:
    from greenadapt.options import Run
    from greenadapt.tasks.options import FinetuneOptions




@dataclass(frozen=True, kw_only=True)
class TrainingFileSettings(FieldSettings):
    """How a labelled training file is read (``finetune``, and ``compare`` for every run)."""

    file_format: str = option("auto", "--format", panel=INPUT_OUTPUT, help="auto, columns (NER word ... label), jsonl or tsv.")
    header: str = option("auto", "--header", panel=INPUT_OUTPUT, choices=HEADERS, help="TSV header row: auto, yes or no.")
    entity_type: str | None = option(
        None, "--entity-type", panel=INPUT_OUTPUT, metavar="TYPE",
        help="NER files with bare B/I labels: train them as B-TYPE/I-TYPE (e.g. Disease), so transformers' entity aggregation groups them.")


@dataclass(frozen=True, kw_only=True)
class FinetuneSettings(TrainingFileSettings, GmapSettings, ScheduleSettings, DeviceSettings, CompileSettings, ShapeSettings, TrackerSettings):
    """``greenadapt finetune``: fine-tune with a 50/50 mixture of the general and domain tokenizers; evaluate mean-pooled."""

    command = "finetune"
    positional = ("task", "train")
    run_help = {"out": "Run folder (default: <workdir>/finetune/<data>/<model>)."}
    replaces = {"seed": ("seeds",), "seeds": ("seed",)}  # a compare run records seeds = [s]: --config RUN --seed N trains seed N

    task: str = option(REQUIRED, "--task", panel=INPUT_OUTPUT, check=task_name, help=f"{tasks_help()} (each with its own defaults, listed below).")
    train: Path = option(REQUIRED, "--train", panel=INPUT_OUTPUT, help="Training file.")
    dev: Path | None = option(None, "--dev", panel=INPUT_OUTPUT,
                              help="Dev file: best-epoch selection (or training data with --train-on train+dev); qa: scored after training.")
    test: Path | None = option(None, "--test", panel=INPUT_OUTPUT,
                               help="Test file, evaluated at the end under every pooling mode (qa: EM/F1 as `greenadapt qa` answers).")
    model: str | None = option(None, "--model", "-m", public=model_paths, panel=MODEL, help="Expanded model folder (two tokenizers) or any BERT-style model.")
    mix: float | None = option(None, "--mix", panel=TRAINING,
                               help="Probability of tokenizing a training example with T̂ (default: 0.5 with two tokenizers, else 0).")
    agreement: float = option(0.0, "--agreement", panel=TRAINING, metavar="W", minimum=0,
                              help="Views that agree: show each training example in both tokenizers' views in the same step and add W x the "
                                   "symmetric KL between their label distributions (word-level for NER). Doubles the forward passes; 0: off. "
                                   "On a model with one tokenizer: R-Drop (two passes of the same pieces, dropout apart).")
    both_views: bool = option(False, "--both-views", panel=TRAINING,
                              help="Show each training example in both views every step (the mean of their cross-entropies) without "
                                   "--agreement's KL term: the control that tells the KL from the doubled exposure. Doubles the forward passes.")
    pool: str | None = option(None, "--pool", panel=EVALUATION, help="Logits at test time: mean (of both tokenizers), general (T_LM) or domain (T̂).")
    epochs: int | None = option(None, "--epochs", panel=TRAINING, maximum=MAX_EPOCHS, help="Passes over the training data (default: the task's).")
    max_steps: int | None = option(None, "--max-steps", panel=TRAINING, maximum=MAX_STEPS, help="Stop after this many optimizer steps (overrides --epochs).")
    batch_size: int | None = option(None, "--batch-size", panel=TRAINING,
                                    help="Examples (qa: windows) per optimizer step, over all processes (default: the task's).")
    grad_accum: int = option(1, "--grad-accum", panel=TRAINING, help="Micro-batches per step and process (gradient accumulation).")
    lr: float | None = option(None, "--lr", panel=TRAINING, help="Peak learning rate (AdamW, linear schedule; default: the task's).")
    seed: int = option(DEFAULT_SEED, "--seed", panel=TRAINING, help="Random seed.")
    seeds: tuple[int, ...] | None = option(None, "--seeds", panel=TRAINING, parse=parse_seeds, cli_type=str | None, check=check_seeds,
                                           help="Several seeds, e.g. 1,2,3: one model each, mean ± std reported.")
    train_on: str = option("train", "--train-on", panel=TRAINING, help="train, or train+dev (the paper's protocol; no dev selection).")
    train_embeddings: str = option("all", "--train-embeddings", panel=TRAINING, help="Word embeddings to train: all, new (added rows only) or none.")
    max_length: int | None = option(None, "--max-length", panel=TRAINING,
                                    help="Wordpieces per sequence; longer NER chunks are split (default: the task's).")
    doc_stride: int | None = option(None, "--doc-stride", panel=TRAINING,
                                    help="qa: wordpieces shared by consecutive windows of a long context (default: 128, at most a third of --max-length).")
    max_words: int | None = option(None, "--max-words", panel=TRAINING,
                                   help="NER: words per training chunk (labelled spans are never split; default 30); scored and predicted "
                                        "sentences stay whole where the window holds them.")
    metric: str | None = option(None, "--metric", panel=EVALUATION,
                                help="Dev metric for the best epoch: NER f1|precision|recall|accuracy; classify accuracy|micro_f1|macro_f1|mcc|f1.")
    positive_label: str | None = option(None, "--positive-label", panel=EVALUATION,
                                        help="Classification: the label whose F1 is 'f1' (default: 1 for 0/1 labels).")
    eval_batch_size: int = option(64, "--eval-batch-size", panel=PERFORMANCE, help="Sequences per inference batch.")
    eval_every: int | None = option(None, "--eval-every", panel=EVALUATION, metavar="N",
                                    help="With --dev: also score dev every N optimizer steps, not only at each epoch's end; the best scoring's weights are kept.")
    early_stopping: int | None = option(None, "--early-stopping", panel=EVALUATION, metavar="N",
                                        help="With --dev: stop once N dev scorings in a row did not beat the best (the best's weights are kept).")
    save_every: int | None = option(None, "--save-every", panel=RUN_CONTROL, minimum=1,
                                    help="Save a resumable checkpoint every N optimizer steps (in <out>.checkpoint/, removed when the run completes).")
    resume: bool = option(False, "--resume", panel=RUN_CONTROL,
                          help="Continue from the checkpoint an interrupted run left (SIGTERM saves one and exits with code 99).")

    def check(self) -> None:
        """Every option no file or model decides, when the settings are made: a runner starts from a valid configuration."""
        from greenadapt.options import DEFAULT_RUN
        from greenadapt.runners.finetune.checks import TaskValues, check_options
        from greenadapt.tasks import LabellingTask, get_task

        if self.seeds is not None and self.seed != DEFAULT_SEED:
            raise UsageError("--seed and --seeds were both given", hint="pass one: --seeds 1,2,3 trains once per seed")
        task = get_task(self.task)
        options = self.resolved(DEFAULT_RUN)  # the task's defaults filled in (G-MAP's options checked on the way)
        if isinstance(task, LabellingTask) and task.finetunes:
            task.check_unused(options)
            check_options(options, TaskValues.of(task, options))
        elif task.answers_questions:
            from greenadapt.runners.qa.train import qa_train_options

            qa_train_options(options, task).check()

    def resolved(self, run: Run) -> FinetuneOptions:
        """The runner's options: the task's defaults filled in, the run's folders and flags."""
        from greenadapt.data.task_files import ReaderOptions
        from greenadapt.tasks import get_task
        from greenadapt.tasks.options import FinetuneOptions

        return FinetuneOptions(
            task=self.task, train=self.train, dev=self.dev, test=self.test, model=self.model, out=run.out, workdir=run.workdir,
            reader=ReaderOptions(self.file_format, self.text_field, self.pair_field, self.label_field, self.header, self.entity_type),  # type: ignore[arg-type]
            training=get_task(self.task).training_config(
                mix=self.mix, batch_size=self.batch_size, grad_accum=self.grad_accum, lr=self.lr, epochs=self.epochs, max_steps=self.max_steps,
                warmup=self.warmup, weight_decay=self.weight_decay, train_embeddings=self.train_embeddings, precision=self.precision,
                compile=self.compile, eval_batch_size=self.eval_batch_size, pad_to_multiple=self.pad_to_multiple, cuda_graphs=self.cuda_graphs,
                eval_every=self.eval_every, early_stopping=self.early_stopping, agreement=self.agreement,
                both_views=self.both_views,
            ),
            pool=self.pool, seeds=list(self.seeds or (self.seed,)), train_on=self.train_on, max_length=self.max_length, max_words=self.max_words,
            metric=self.metric, positive_label=self.positive_label, device=self.device, force=run.force, wait=run.wait,
            save_every=self.save_every, resume=self.resume, doc_stride=self.doc_stride, gmap=self.gmap_options(),
            report_to=self.report_to,
        )

