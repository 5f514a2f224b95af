"""The options of ``greenadapt finetune`` (every task), and where a run goes by default.

Options whose default depends on the task (training knobs, lengths, pooling)
are None here until the task (:mod:`greenadapt.tasks`) fills them in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from greenadapt.artifacts.manifest import read_manifest
from greenadapt.artifacts.pretrained import ModelRef, slugify
from greenadapt.artifacts.workspace import workdir as resolve_workdir
from greenadapt.data.task_files import ReaderOptions
from greenadapt.defaults import DEFAULT_SEED
from greenadapt.modeling.gmap.options import GmapOptions
from greenadapt.training.finetuning import TrainConfig

TRAIN_ON = ("train", "train+dev")


@dataclass
class FinetuneOptions:
    task: str
    train: Path
    dev: Path | None = None
    test: Path | None = None
    model: str | None = None
    out: Path | None = None
    workdir: Path | None = None
    reader: ReaderOptions = field(default_factory=ReaderOptions)
    # None: the task's defaults (greenadapt.tasks). Its mix None: 0.5 with a domain tokenizer, else 0.
    training: TrainConfig | None = None
    pool: str | None = None  # None: mean with a domain tokenizer, else general
    seeds: list[int] = field(default_factory=lambda: [DEFAULT_SEED])
    train_on: str = "train"
    max_length: int | None = None  # None: the task's
    max_words: int | None = None  # NER; None: the task's
    metric: str | None = None
    positive_label: str | None = None
    device: str = "auto"
    force: bool = False
    wait: bool = False
    save_every: int | None = None  # steps between resumable checkpoints (in checkpoint_folder(out))
    resume: bool = False  # continue from the checkpoint an interrupted run left
    doc_stride: int | None = None  # --task qa only; None: 128, or a third of the window when that is smaller
    gmap: GmapOptions = field(default_factory=GmapOptions)  # G-MAP fusion of a frozen general model (strategy "none": off)
    report_to: tuple[str, ...] = ()  # experiment trackers (greenadapt.training.trackers): tensorboard, mlflow


def default_run_folder(options: FinetuneOptions, ref: ModelRef) -> Path:
    """``<workdir>/finetune/<data>-<task>/<model>``: each model (and each method's expanded model) gets its own folder.

    A workspace expand folder ``<workdir>/<corpus>/<model>/expand[-<method>]`` is named
    ``<model>-green[-<method>]-<corpus>``; any other folder by its own name.
    """
    data = slugify(f"{options.train.resolve().parent.name}-{options.task}")
    manifest = read_manifest(ref.path)
    if manifest is not None and manifest.get("kind") == "expand" and ref.path.name.startswith("expand"):
        method = ref.path.name.removeprefix("expand")
        model_key = slugify(f"{ref.path.parent.name}-green{method}-{ref.path.parent.parent.name}")
    else:
        model_key = ref.slug
    if options.gmap.enabled:
        model_key += f"-gmap-{options.gmap.strategy}"
    return resolve_workdir(options.workdir) / "finetune" / data / model_key
