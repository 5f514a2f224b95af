"""``greenadapt finetune``'s options, each declared once (:mod:`greenadapt.options`): the object the runner, the task,
the trainer and compare's runs receive as it is (``task.filled(settings)`` puts the task's defaults in the unset ones)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from greenadapt.compute.settings import DeviceSettings
from greenadapt.data.settings import HEADERS, FieldSettings
from greenadapt.defaults import DEFAULT_SEED, MAX_AGREEMENT
from greenadapt.errors import UsageError
from greenadapt.inference.qa.settings import AnswerSpanSettings
from greenadapt.modeling.gmap.settings import GmapSettings
from greenadapt.options import EVALUATION, INPUT_OUTPUT, MODEL, REQUIRED, TRAINING, model_paths, option
from greenadapt.tasks import task_name, tasks_help
from greenadapt.training.config import TrainingRun
from greenadapt.training.settings import (
    CheckpointSettings,
    CompileSettings,
    LoopOptionSettings,
    RecipeSettings,
    ScheduleSettings,
    ShapeSettings,
    TrackerSettings,
    check_seeds,
    parse_seeds,
)

if TYPE_CHECKING:
    from greenadapt.artifacts.pretrained import ModelRef
    from greenadapt.data.task_files import ReaderOptions
    from greenadapt.options import Run

TRAIN_ON = ("train", "train+dev")


@dataclass(frozen=True, kw_only=True)
class TrainingFileSettings(FieldSettings):
    """How a labelled training file is read (``finetune``; ``--entity-type`` is the recipe's, as compare passes it)."""

    file_format: str = option("auto", "--format", panel=INPUT_OUTPUT, help="auto, columns (NER word ... label), jsonl or tsv.")
    header: str = option("auto", "--header", panel=INPUT_OUTPUT, choices=HEADERS, help="TSV header row: auto, yes or no.")


@dataclass(frozen=True, kw_only=True)
class FinetuneSettings(TrainingFileSettings, RecipeSettings, LoopOptionSettings, GmapSettings, ScheduleSettings, DeviceSettings,
                       CompileSettings, ShapeSettings, TrackerSettings, CheckpointSettings, AnswerSpanSettings, TrainingRun):
    """``greenadapt finetune``: fine-tune on both tokenizers' views (every step by default, or the 50/50 mixture); evaluate mean-pooled."""

    command = "finetune"
    positional = ("task", "train")
    run_help = {"out": "Run folder (default: <workdir>/finetune/<data>/<model>)."}
    replaces = {"seed": ("seeds",), "seeds": ("seed",)}  # a compare run records seeds = [s]: --config RUN --seed N trains seed N

    task: str = option(REQUIRED, "--task", panel=INPUT_OUTPUT, check=task_name,
                       help=f"{tasks_help()} (each with its own defaults, listed below).")
    train: Path = option(REQUIRED, "--train", panel=INPUT_OUTPUT, help="Training file.")
    dev: Path | None = option(None, "--dev", panel=INPUT_OUTPUT,
                              help="Dev file: best-epoch selection (or training data with --train-on train+dev); "
                                   "qa: scored after training.")
    test: Path | None = option(None, "--test", panel=INPUT_OUTPUT,
                               help="Test file, evaluated at the end under every pooling mode (qa: EM/F1 as `greenadapt qa` answers).")
    model: str | None = option(None, "--model", "-m", public=model_paths, panel=MODEL,
                               help="Expanded model folder (two tokenizers) or any BERT-style model.")
    agreement: float = option(0.0, "--agreement", panel=TRAINING, metavar="W", minimum=0, maximum=MAX_AGREEMENT, fingerprint="when set",
                              help="Views that agree: show each training example in both tokenizers' views in the same step and add W x "
                                   "the symmetric KL between their label distributions (word-level for NER). Doubles the forward "
                                   "passes; 0: off. On a model with one tokenizer: R-Drop (two passes of the same pieces, dropout apart).")
    both_views: bool | None = option(None, "--both-views", panel=TRAINING, fingerprint="when set",
                                     help="Show each training example in both views every step (the mean of their cross-entropies) "
                                          "without --agreement's KL term; doubles the forward passes. Default: on for a model with two "
                                          "tokenizers (the CPU study's winner, docs/study.md), off with one (there it is the doubled "
                                          "exposure's control); --no-both-views trains one view a step (the 50/50 mixture).")
    seeds: tuple[int, ...] | None = option(None, "--seeds", panel=TRAINING, parse=parse_seeds, cli_type=str | None, check=check_seeds,
                                           help="Several seeds, e.g. 1,2,3: one model each, mean ± std reported.")
    train_on: str = option("train", "--train-on", panel=TRAINING, choices=TRAIN_ON,
                           help="train, or train+dev (the paper's protocol; no dev selection).")
    doc_stride: int | None = option(None, "--doc-stride", panel=TRAINING, minimum=1,
                                    help="qa: wordpieces shared by consecutive windows of a long context (default: 128, at most a third of "
                                         "--max-length).")
    metric: str | None = option(None, "--metric", panel=EVALUATION,
                                help="Dev metric for the best epoch: NER f1|precision|recall|accuracy; classify "
                                     "accuracy|micro_f1|macro_f1|mcc|f1.")
    positive_label: str | None = option(None, "--positive-label", panel=EVALUATION,
                                        help="Classification: the label whose F1 is 'f1' (default: 1 for 0/1 labels).")
    early_stopping: int | None = option(None, "--early-stopping", panel=EVALUATION, metavar="N", minimum=1, fingerprint="always",
                                        help="With --dev: stop once N dev scorings in a row did not beat the best (the best's weights are "
                                             "kept).")

    def check(self) -> None:
        """The checks between options, once, when the settings are made (each option's own are in its declaration)."""
        from greenadapt.options import declared_fields
        from greenadapt.tasks import get_task
        from greenadapt.training.config import check_compile, check_cuda_graphs, check_decay
        from greenadapt.compute.distributed import check_precision

        if self.seeds is not None and self.seed != DEFAULT_SEED:
            raise UsageError("--seed and --seeds were both given", hint="pass one: --seeds 1,2,3 trains once per seed")
        task = get_task(self.task)
        # QA's answer-span options are one group: refused whole by a task that answers no questions, so a new one needs
        # no entry in each task's list
        task.check_unused(self, also=() if task.answers_questions else [field.name for field, _ in declared_fields(AnswerSpanSettings)])
        filled = task.filled(self)
        assert filled.lr is not None  # filled: the task's default
        check_decay(filled.lr, filled.weight_decay)
        check_precision(self.precision, self.device)
        check_cuda_graphs(self.cuda_graphs, self.device)
        check_compile(self.compile, self.device)
        self.check_gmap()
        if task.answers_questions:
            _check_qa(filled)
        else:
            _check_dev_use(filled)

    @property
    def seed_list(self) -> tuple[int, ...]:
        """The seeds this run trains, one model each."""
        return self.seeds or (self.seed,)

    @property
    def reader(self) -> ReaderOptions:
        """How the task files are read, as greenadapt_task.json keeps it for prediction."""
        from greenadapt.data.task_files import ReaderOptions

        return ReaderOptions(self.file_format, self.text_field, self.pair_field, self.label_field,
                             self.header, self.entity_type)  # type: ignore[arg-type]


def _check_dev_use(settings: FinetuneSettings) -> None:
    if settings.train_on == "train+dev" and settings.dev is None:
        raise UsageError("--train-on train+dev needs --dev")
    for flag, count in (("--eval-every", settings.eval_every), ("--early-stopping", settings.early_stopping)):
        if count is not None and (settings.dev is None or settings.train_on != "train"):
            raise UsageError(f"{flag} scores the dev file while training: it needs --dev (and --train-on train)",
                             hint=f"pass --dev FILE, or leave {flag} out")


def _check_qa(settings: FinetuneSettings) -> None:
    if len(settings.seed_list) > 1:
        raise UsageError("--task qa trains one model, not one per seed", hint="use --seed")
    assert settings.batch_size is not None  # filled: the task's default
    if settings.batch_size < settings.grad_accum:
        raise UsageError(f"--batch-size {settings.batch_size} is smaller than --grad-accum {settings.grad_accum}",
                         hint="--batch-size is the number of windows of one optimizer step")


def default_run_folder(settings: FinetuneSettings, run: Run, ref: ModelRef) -> Path:
    """``<workdir>/finetune/<data>-<task>/<model>``: each model (and each method's expanded model) gets its own folder.

    A workspace expand folder ``<workdir>/<corpus>/<model>/expand[-<method>]`` is named
    ``<model>-green[-<method>]-<corpus>``; any other folder by its own name.
    """
    from greenadapt.artifacts.manifest import read_manifest
    from greenadapt.artifacts.pretrained import slugify
    from greenadapt.artifacts.workspace import workdir as resolve_workdir

    data = slugify(f"{settings.train.resolve().parent.name}-{settings.task}")
    manifest = read_manifest(ref.path)
    if manifest is not None and manifest.get("kind") == "expand" and ref.path.name.startswith("expand"):
        method = ref.path.name.removeprefix("expand")
        model_key = slugify(f"{ref.path.parent.name}-green{method}-{ref.path.parent.parent.name}")
    else:
        model_key = ref.slug
    if settings.fuses:
        model_key += f"-gmap-{settings.gmap}"
    return resolve_workdir(run.workdir) / "finetune" / data / model_key
