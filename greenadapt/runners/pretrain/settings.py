"""``greenadapt pretrain``'s options, each declared once (:mod:`greenadapt.options`)."""

from __future__ import annotations

from dataclasses import dataclass

from greenadapt.compute.settings import DeviceSettings
from greenadapt.defaults import DEFAULT_MAX_LENGTH, DEFAULT_SEED
from greenadapt.errors import UsageError
from greenadapt.modeling.gmap.settings import NONE, GmapSettings
from greenadapt.redaction import public_specs
from greenadapt.options import EVALUATION, INPUT_OUTPUT, MODEL, PERFORMANCE, REQUIRED, TRAINING, model_paths, option, option_as_in
from greenadapt.training.config import TrainingRun, check_compile, check_decay
from greenadapt.training.settings import (CheckpointSettings, CompileSettings, LoopOptionSettings, RecipeSettings,
                                         ScheduleSettings)

TOKENIZER_CHOICES = ("auto", "domain", "general")
TRAIN_CHOICES = ("all", "new-rows")


@dataclass(frozen=True, kw_only=True)
class PretrainSettings(ScheduleSettings, DeviceSettings, CompileSettings, CheckpointSettings, TrainingRun):
    """``greenadapt pretrain``: continued masked-LM pretraining (DAPT), optionally with G-MAP memory; --eval-only scores a model."""

    command = "pretrain"
    positional = ("corpus",)
    run_help = {"out": "Output model folder (default: WORKDIR/CORPUS/MODEL/pretrain)."}

    corpus: tuple[str, ...] = option(
        REQUIRED, "--corpus", "-c", panel=INPUT_OUTPUT, public=public_specs,
        help="Registered corpus name, file, folder, glob or URL, as for w2v. Repeatable (--eval-only: each is scored on its own).")
    model: str | None = option(None, "--model", "-m", public=model_paths, panel=MODEL,
                               help="Model folder (an expanded one too) or Hub id (default: the bundled MiniLM).")
    eval_only: bool = option(False, "--eval-only", panel=EVALUATION,
                             help="Only report held-out masked-LM loss/perplexity of --model on each --corpus (JSON).")
    general_corpus: tuple[str, ...] | None = option(None, "--general-corpus", public=public_specs, panel=INPUT_OUTPUT,
                                                    help="A general corpus whose held-out loss is tracked too (forgetting).")
    text_fields: tuple[str, ...] | None = option(None, "--text-field", panel=INPUT_OUTPUT,
                                                 help="Field(s) holding the text in JSON lines/CSV sources (default: text).")
    max_length: int = option_as_in(RecipeSettings, "max_length", DEFAULT_MAX_LENGTH,
                                   help="Wordpieces per packed sequence, [CLS] and [SEP] included (512 is typical).")
    heldout: int = option(256, "--heldout", panel=TRAINING, minimum=1,
                          help="The first N sequences are held out for evaluation (at most a tenth of the corpus).")
    whole_word_masking: bool = option(False, "--whole-word-masking", panel=TRAINING,
                                      help="Mask whole words (a piece and its ## continuations).")
    mask_probability: float = option(0.15, "--mask-probability", panel=TRAINING,
                                     help="Share of the non-special tokens that become targets (80% [MASK], 10% random, 10% unchanged).")
    tokenizer: str = option("auto", "--tokenizer", panel=MODEL, choices=TOKENIZER_CHOICES,
                            help="auto (the domain tokenizer of an expanded model, else the only one), domain or general.")
    mix: float | None = option(
        None, "--mix", panel=TRAINING, minimum=0.0, maximum=1.0,
        help="Expanded models: read this share of the sequences with the domain tokenizer and the rest with the general one (the "
             "fine-tuning's mixture; 0.5 is the recipe after `adapt`). Default: one tokenizer (--tokenizer).")
    epochs: int = option_as_in(RecipeSettings, "epochs", 1, help="Passes over the training sequences.")
    max_steps: int | None = option_as_in(RecipeSettings, "max_steps", None)
    batch_size: int = option_as_in(RecipeSettings, "batch_size", 32, help="Sequences per optimizer step, over all processes.")
    grad_accum: int = option_as_in(LoopOptionSettings, "grad_accum", 1)
    lr: float = option_as_in(RecipeSettings, "lr", 5e-5, help="Peak learning rate (AdamW, linear warm-up and decay).")
    seed: int = option_as_in(LoopOptionSettings, "seed", DEFAULT_SEED, help="Random seed (order, masking, dropout).")
    train_embeddings: str = option_as_in(LoopOptionSettings, "train_embeddings", "all",
                                         help="Word embeddings to train: all, new (rows added by expand only) or none.")
    train: str = option("all", "--train", panel=TRAINING, metavar="WHAT", choices=TRAIN_CHOICES, fingerprint="when set",
                        help="all: every parameter (DAPT); new-rows: only the rows expand added, encoder, original rows and head frozen "
                             "(the head trains during --head-warmup-steps).")
    head_warmup_steps: int = option(0, "--head-warmup-steps", panel=TRAINING, minimum=0, fingerprint="when set",
                                    help="The first N steps train the masked-LM head alone (encoder and embeddings frozen): for models "
                                         "shipped without an MLM head, such as the bundled MiniLM.")
    eval_every: int | None = option_as_in(LoopOptionSettings, "eval_every", None,
                                          help="Held-out evaluation every N steps (always before and after training).")
    eval_batch_size: int = option_as_in(LoopOptionSettings, "eval_batch_size", 32, help="Sequences per evaluation batch.")
    gmap: str | None = option_as_in(GmapSettings, "gmap", None,
                                    help="G-MAP memory during training: single, multi, gated or chunk (needs --general-model).")
    gmap_layers: str | None = option_as_in(GmapSettings, "gmap_layers", None)
    general_model: str | None = option_as_in(GmapSettings, "general_model", None,
                                             help="The frozen general model of --gmap (same vocabulary as the training tokenizer).")
    workers: int | None = option(None, "--workers", panel=PERFORMANCE, minimum=1,
                                 help="Pre-tokenizing processes (default: the cores this process may use, or $GREENADAPT_WORKERS).")

    def check(self) -> None:
        if self.eval_only:
            # --gmap none is no fusion: it may stand beside --eval-only
            given = (["--gmap"] if self.fuses else []) + self.given_options(
                ("general_corpus", "max_steps", "save_every", "resume", "save_minutes"))
            if given:
                raise UsageError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --eval-only",
                                 hint="pass each corpus to score as --corpus")
        check_decay(self.lr, self.weight_decay)
        check_compile(self.compile, self.device)
        if self.train == "new-rows" and self.train_embeddings != "all":
            raise UsageError("--train new-rows decides which rows train; leave --train-embeddings at all")
        if self.mix is not None:
            if self.tokenizer != "auto":
                raise UsageError("--mix chooses the tokenizer per sequence; it cannot be combined with --tokenizer",
                                 hint="drop --tokenizer")
            if self.fuses:
                raise UsageError("--mix cannot be combined with --gmap", hint="G-MAP's general model reads one tokenizer's ids")
        if self.fuses and not self.general_model:
            raise UsageError("--gmap needs --general-model", hint="pass the general model whose hidden states are the memory")
        if self.general_model and not self.fuses and not self.eval_only:  # --eval-only: the general model of a --gmap model
            raise UsageError("--general-model is only used with --gmap", hint="add --gmap chunk (or single, multi, gated)")
        if self.gmap is not None and self.fuses:  # the strategy and its layers make a plan: said before any corpus is read
            from greenadapt.modeling.gmap.config import GmapConfig

            GmapConfig(strategy=self.gmap, layers=self.fused_layers)

    @property
    def fused_layers(self) -> tuple[int, ...] | None:
        """``--gmap-layers`` as layer numbers; None: the strategy's default layers."""
        from greenadapt.modeling.gmap.config import parse_layers

        return parse_layers(self.gmap_layers) if self.gmap_layers is not None else None

    @property
    def fuses(self) -> bool:
        """Whether G-MAP is on (``--gmap`` given, and not none)."""
        return self.gmap not in (None, NONE)
