"""``greenadapt multitask``'s options, each declared once (:mod:`greenadapt.options`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from greenadapt.compute.settings import DeviceSettings
from greenadapt.defaults import DEFAULT_MAX_LENGTH, DEFAULT_SEED
from greenadapt.modeling.gmap.settings import GmapSettings
from greenadapt.options import INPUT_OUTPUT, MODEL, TRAINING, model_paths, option, option_as_in
from greenadapt.training.config import TrainingRun, check_compile, check_decay
from greenadapt.training.settings import CheckpointSettings, CompileSettings, LoopOptionSettings, RecipeSettings, ScheduleSettings

SAMPLING = ("proportional", "sqrt", "annealed", "round-robin")  # how each step's task is drawn (greenadapt.runners.multitask.sampling)


@dataclass(frozen=True, kw_only=True)
class MultitaskSettings(GmapSettings, ScheduleSettings, DeviceSettings, CompileSettings, CheckpointSettings, TrainingRun):
    """``greenadapt multitask``: multi-task fine-tuning with PALs: one shared encoder, an adapter and a head per task."""

    command = "multitask"
    positional = ("task",)
    run_help = {"out": "Run folder (default: <workdir>/multitask/<tasks>/<model>)."}

    task: tuple[str, ...] = option(
        (), "--task", panel=INPUT_OUTPUT,
        help="A task as comma-separated key=value pairs: name, type (ner or classify), train; optional dev, test, text_field, pair_field, "
             "label_field, format, header, metric, positive_label. Repeatable.")
    tasks_file: Path | None = option(None, "--tasks", panel=INPUT_OUTPUT,
                                     help="TOML file of \\[\\[task]] tables with the same keys (paths relative to the file).")
    model: str | None = option(None, "--model", "-m", public=model_paths, panel=MODEL,
                               help="Expanded model folder (two tokenizers) or any BERT-style model.")
    adapter: str = option("pals", "--adapter", panel=MODEL,
                          help="pals (projected attention layers), low-rank, or none (shared encoder, task heads only).")
    pal_size: int = option(204, "--pal-size", panel=MODEL, help="Width s of the PAL space (V_E: d -> s; low-rank: the rank).")
    pal_heads: int = option(12, "--pal-heads", panel=MODEL, help="Attention heads in the PAL space (must divide --pal-size).")
    sampling: str = option("annealed", "--sampling", panel=TRAINING, choices=SAMPLING,
                           help="Task of each step: annealed (the paper's best), proportional, sqrt or round-robin.")
    steps_per_epoch: int | None = option(None, "--steps-per-epoch", panel=TRAINING, minimum=1,
                                         help="Steps per 'epoch' (default: one pass over all tasks' training data).")
    freeze_base: bool = option(False, "--freeze-base", panel=TRAINING, help="Train only the PALs, the heads and the encoder's layer norms.")
    epochs: int = option_as_in(RecipeSettings, "epochs", 3, help="Epochs (of --steps-per-epoch steps).")
    max_steps: int | None = option_as_in(RecipeSettings, "max_steps", None)
    batch_size: int = option_as_in(RecipeSettings, "batch_size", 32, help="Examples per step (all from one task).")
    lr: float = option_as_in(RecipeSettings, "lr", 5e-5, help="Peak learning rate (AdamW, linear schedule).")
    seed: int = option_as_in(LoopOptionSettings, "seed", DEFAULT_SEED)
    mix: float | None = option_as_in(LoopOptionSettings, "mix", None)
    pool: str = option_as_in(LoopOptionSettings, "pool", "mean")
    max_length: int = option_as_in(RecipeSettings, "max_length", DEFAULT_MAX_LENGTH, help="Wordpieces per sequence.")
    max_words: int = option_as_in(LoopOptionSettings, "max_words", 30,
                                  help="NER: words per training chunk (labelled spans are never split); scored sentences stay whole "
                                       "where the window holds them.")
    eval_batch_size: int = option_as_in(LoopOptionSettings, "eval_batch_size", 64)

    def check(self) -> None:
        check_decay(self.lr, self.weight_decay)
        check_compile(self.compile, self.device)
        self.check_gmap()
