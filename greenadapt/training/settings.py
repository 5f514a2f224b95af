"""Options every training command shares (``finetune``, ``multitask``, ``pretrain``, ``compare``), each declared once."""

from __future__ import annotations

from dataclasses import dataclass

from greenadapt.data.ner_labels import check_entity_type
from greenadapt.compute.settings import PoolSettings
from greenadapt.defaults import DEFAULT_SEED, MAX_EPOCHS, MAX_LABEL_SMOOTHING, MAX_STEPS, TRAIN_EMBEDDINGS, check_max_length, check_seed
from greenadapt.errors import UsageError
from greenadapt.options import EVALUATION, INPUT_OUTPUT, PERFORMANCE, RUN_CONTROL, TRAINING, Settings, option, option_as_in
from greenadapt.training.config import DROPOUT_MASKS, MAX_PAD_MULTIPLE


def parse_seeds(text: str | None) -> tuple[int, ...] | None:
    """``--seeds 1,2,3`` as integers (None: not given)."""
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--seeds {text!r} is not a comma-separated list of integers", hint="e.g. --seeds 1,2,3") from None


def check_lr(value: float) -> float:
    """A learning rate: above 0."""
    if value <= 0:
        raise UsageError(f"--lr must be positive, not {value:g}", hint="e.g. --lr 5e-5")
    return value


def check_warmup(value: float) -> float:
    """A fraction of the steps (--warmup): from 0, below 1."""
    if value >= 1:
        raise UsageError(f"--warmup must be a fraction below 1, not {value:g}", hint="e.g. --warmup 0.1")
    return value


def tracker_names(names: tuple[str, ...]) -> tuple[str, ...]:
    from greenadapt.training.trackers import check_report_to

    return check_report_to(names)


def check_seeds(seeds: tuple[int, ...]) -> tuple[int, ...]:
    """Distinct seeds in range."""
    if not seeds:
        raise UsageError("--seeds is empty", hint="e.g. --seeds 1,2,3")
    if len(set(seeds)) != len(seeds):
        text = ",".join(map(str, seeds))
        raise UsageError(f"--seeds {text!r} repeats a seed: it needs distinct integers", hint="each seed once, e.g. --seeds 1,2,3")
    return tuple(check_seed(s, option="--seeds") for s in seeds)


@dataclass(frozen=True, kw_only=True)
class ScheduleSettings(Settings):
    """AdamW's schedule beyond the learning rate."""

    warmup: float = option(0.1, "--warmup", panel=TRAINING, minimum=0, check=check_warmup, fingerprint="always",
                           help="Fraction of the steps spent warming up.")
    weight_decay: float = option(0.01, "--weight-decay", panel=TRAINING, minimum=0, fingerprint="always", help="AdamW weight decay.")


@dataclass(frozen=True, kw_only=True)
class RecipeSettings(Settings):
    """The fine-tuning recipe ``compare`` passes to every run as ``finetune`` takes it: an option declared here reaches
    both commands, the API, options.json, every run compare starts and the object the training loop receives.
    None: the task's default (greenadapt.tasks)."""

    epochs: int | None = option(None, "--epochs", panel=TRAINING, minimum=1, maximum=MAX_EPOCHS, fingerprint="always",
                                help="Passes over the training data (default: the task's).")
    max_steps: int | None = option(None, "--max-steps", panel=TRAINING, minimum=1, maximum=MAX_STEPS, fingerprint="always",
                                   help="Stop after this many optimizer steps (overrides --epochs).")
    batch_size: int | None = option(None, "--batch-size", panel=TRAINING, minimum=1, fingerprint="always",
                                    help="Examples (qa: windows) per optimizer step, over all processes (default: the task's).")
    lr: float | None = option(None, "--lr", panel=TRAINING, check=check_lr, fingerprint="always",
                              help="Peak learning rate (AdamW, linear schedule; default: the task's).")
    max_length: int | None = option(None, "--max-length", panel=TRAINING, check=check_max_length,
                                    help="Wordpieces per sequence; longer NER chunks are split (default: the task's).")
    entity_type: str | None = option(
        None, "--entity-type", panel=INPUT_OUTPUT, metavar="TYPE", check=check_entity_type,
        help="NER files with bare B/I labels: train them as B-TYPE/I-TYPE (e.g. Disease), so transformers' entity aggregation groups them.")
    label_smoothing: float = option(0.0, "--label-smoothing", panel=TRAINING, metavar="EPS", minimum=0, maximum=MAX_LABEL_SMOOTHING,
                                    fingerprint="when set",
                                    help="Label smoothing of the cross-entropy: the target puts EPS on a uniform spread over the labels "
                                         "(e.g. 0.1; 0: off).")


@dataclass(frozen=True, kw_only=True)
class LoopOptionSettings(Settings):
    """Training options finetune, multitask and pretrain share, declared once: finetune takes the group; multitask and
    pretrain take an option of it through ``option_as_in``, with their own default or words where those differ."""

    mix: float | None = option(None, "--mix", panel=TRAINING, minimum=0, maximum=1, fingerprint="always",
                               help="Probability of tokenizing a training example with T̂ (default: 0.5 with two tokenizers, else 0).")
    pool: str | None = option_as_in(PoolSettings, "pool", None)
    grad_accum: int = option(1, "--grad-accum", panel=TRAINING, minimum=1, fingerprint="always",
                             help="Micro-batches per step and process (gradient accumulation).")
    seed: int = option(DEFAULT_SEED, "--seed", panel=TRAINING, check=check_seed, fingerprint="always", help="Random seed.")
    train_embeddings: str = option("all", "--train-embeddings", panel=TRAINING, choices=TRAIN_EMBEDDINGS, fingerprint="always",
                                   help="Word embeddings to train: all, new (added rows only) or none.")
    max_words: int | None = option(None, "--max-words", panel=TRAINING, minimum=1,
                                   help="NER: words per training chunk (labelled spans are never split; default 30); scored and predicted "
                                        "sentences stay whole where the window holds them.")
    eval_batch_size: int = option(64, "--eval-batch-size", panel=PERFORMANCE, minimum=1, help="Sequences per inference batch.")
    eval_every: int | None = option(None, "--eval-every", panel=EVALUATION, metavar="N", minimum=1, fingerprint="always",
                                    help="With --dev: also score dev every N optimizer steps, not only at each epoch's end; the best "
                                         "scoring's weights are kept.")


ADAMW_KERNELS = ("foreach", "fused")


@dataclass(frozen=True, kw_only=True)
class CompileSettings(Settings):
    compile: bool = option(False, "--compile", panel=PERFORMANCE,
                           help="Compile the training forward and backward with torch.compile, on a CUDA GPU (the first steps pay the "
                                "compilation). Refused on a CPU, where it measured slower (docs/benchmarks.md, \"torch.compile on the "
                                "CPU\").")
    adamw: str = option("fused", "--adamw", panel=PERFORMANCE, choices=ADAMW_KERNELS,
                        help="AdamW's kernel on a CPU: fused (one pass over the weights: 5x faster than foreach, 1.29x the steps/s of a "
                             "bf16 MiniLM fine-tune; F1 checked over 3 paired seeds, docs/benchmarks.md) or foreach (before 2026-11; the "
                             "same update up to rounding). A CUDA GPU always runs fused.")
    dropout_masks: str = option("fast", "--dropout-masks", panel=PERFORMANCE, choices=DROPOUT_MASKS,
                                help="Dropout's masks on a CPU: fast (two elements' masks from one 32-bit draw, on every thread: "
                                     "docs/benchmarks.md, \"The elementwise half of a CPU step\") or torch (torch's own, as before "
                                     "2026-11-29: the same distribution, other draws). A GPU always uses torch's.")


@dataclass(frozen=True, kw_only=True)
class ShapeSettings(Settings):
    """Fewer batch shapes, for a compiled model (speed only: no stage records them)."""

    pad_to_multiple: int = option(
        1, "--pad-to-multiple", panel=PERFORMANCE, metavar="N", minimum=1, maximum=MAX_PAD_MULTIPLE,
        help="Round each training batch's width up to a multiple of N wordpieces (e.g. 32): a handful of shapes, so a "
             "compiled model (--compile, --cuda-graphs) compiles a handful of times. Padding is masked, but its rounding compounds "
             "over a run like another seed's (docs/reliability.md, round 8: 2.0 F1 on a short NCBI-disease run); a recipe is "
             "compared at one setting.")
    cuda_graphs: bool = option(
        False, "--cuda-graphs", panel=PERFORMANCE,
        help="GPU: compile with CUDA graphs (torch.compile's reduce-overhead mode), for small batches whose steps are bound "
             "by kernel launches; use with --pad-to-multiple.")


@dataclass(frozen=True, kw_only=True)
class TrackerSettings(Settings):
    report_to: tuple[str, ...] = option(
        (), "--report-to", panel=RUN_CONTROL, metavar="TRACKER", check=tracker_names,
        help="Experiment trackers: tensorboard, mlflow (repeat, or comma-separated): every step's loss, lr and gradient norm, "
             "dev and test scores, the run's options (the trackers extra: pip install tensorboard mlflow-skinny; docs/trackers.md).")


@dataclass(frozen=True, kw_only=True)
class CheckpointSettings(Settings):
    """Checkpoints of a training run that resumes after a kill (finetune, QA, multitask, pretrain): the training stage
    reads them."""

    save_every: int | None = option(None, "--save-every", panel=RUN_CONTROL, minimum=1,
                                    help="Save a resumable checkpoint every N optimizer steps (in <out>.checkpoint/, removed when the run "
                                         "completes).")
    save_minutes: float | None = option(10.0, "--save-minutes", panel=RUN_CONTROL, minimum=0, maximum=1e6,
                                        help="Also save one every M minutes of training (one process; only the newest is kept): a kill "
                                             "costs minutes, not the run. 0 or none: by steps alone.")
    resume: bool = option(False, "--resume", panel=RUN_CONTROL,
                          help="Continue from the checkpoint an interrupted run left (SIGTERM saves one and exits with code 99).")

