"""``greenadapt compare``'s options, each declared once (:mod:`greenadapt.options`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from greenadapt.compute.settings import DeviceSettings
from greenadapt.comparison.cluster import STORAGES, RayPlacement
from greenadapt.errors import UsageError
from greenadapt.inference.qa.settings import AnswerSpanSettings
from greenadapt.redaction import public_specs
from greenadapt.options import EVALUATION, INPUT_OUTPUT, MODEL, PERFORMANCE, REQUIRED, RUN_CONTROL, TRAINING, model_paths, option
from greenadapt.tasks import task_name
from greenadapt.training.settings import RecipeSettings, ShapeSettings, TrackerSettings, check_seeds, parse_seeds

if TYPE_CHECKING:
    pass


# Replicates × test examples row indices are held at once: 100,000 × 10,000 sentences is 8 GB. 1,000 is the usual.
MAX_BOOTSTRAP = 100_000


def parse_models(values: list[str]) -> tuple[tuple[str, str], ...]:
    """``--model NAME=MODEL`` (repeated) as (name, model) pairs."""
    models = []
    for value in values:
        name, sep, model = value.partition("=")
        if not sep or not name.strip() or not model.strip():
            raise UsageError(f"--model {value!r} is not NAME=MODEL", hint="e.g. --model base=bert-base-uncased --model green=models/green")
        models.append((name.strip(), model.strip()))
    return tuple(models)


def parse_agreements(values: list[str]) -> tuple[tuple[str, float], ...]:
    """``--agreement NAME=W`` (repeated) as (name, W) pairs."""
    found = []
    for value in values:
        name, _, weight = value.partition("=")
        try:
            found.append((name.strip(), float(weight)))
        except ValueError:
            raise UsageError(f"--agreement {value!r} is not NAME=W", hint="e.g. --agreement green-agree=1") from None
        if not name.strip():
            raise UsageError(f"--agreement {value!r} is not NAME=W", hint="e.g. --agreement green-agree=1")
    return tuple(found)


def parse_ensembles(values: list[str]) -> tuple[tuple[str, int], ...]:
    """``--ensemble NAME=N`` (repeated) as (name, N) pairs."""
    ensembles = []
    for value in values:
        name, _, size = value.partition("=")
        if not name.strip() or not size.strip().isdigit():
            raise UsageError(f"--ensemble {value!r} is not NAME=N", hint="e.g. --ensemble base-x2=2")
        ensembles.append((name.strip(), int(size)))
    return tuple(ensembles)



@dataclass(frozen=True, kw_only=True)
class CompareSettings(RecipeSettings, DeviceSettings, ShapeSettings, TrackerSettings, AnswerSpanSettings):
    """``greenadapt compare``: fine-tune several models with one recipe and the same seeds; say whether each beat the baseline."""

    command = "compare"
    positional = ("task", "train", "test", "models")
    run_options = ("workdir", "out", "force", "wait")
    run_help = {"out": "The compare folder (one finetune run per model and seed; compare.json).", "force": "Redo every fine-tuning.",
                "wait": "If another compare is writing the same --out, wait for it instead of failing (exit 75)."}
    out_required = True

    task: str = option(REQUIRED, "--task", panel=INPUT_OUTPUT, check=task_name, help="ner, classify or qa.")
    train: Path = option(REQUIRED, "--train", panel=INPUT_OUTPUT, help="Training file (the same for every model).")
    test: Path = option(REQUIRED, "--test", panel=INPUT_OUTPUT, help="Test file: every model is scored on the same examples.")
    models: tuple[tuple[str, str], ...] = option(
        REQUIRED, "--model", "-m", panel=MODEL, metavar="NAME=MODEL", parse=parse_models, cli_type=list[str], public=model_paths,
        help="A model to compare: a folder or Hub id, named. Repeat; the first is the baseline.")
    dev: Path | None = option(None, "--dev", panel=INPUT_OUTPUT, help="Dev file for choosing the best epoch (optional).")
    seeds: tuple[int, ...] = option((1, 2, 3), "--seeds", panel=TRAINING, parse=parse_seeds, cli_type=str | None, shown="1,2,3",
                                    check=check_seeds, help="Seeds, comma-separated: every model trains once per seed.")
    against: str | None = option(None, "--against", panel=EVALUATION, metavar="NAME",
                                 help="The baseline the others are paired with (default: the first --model).")
    comparator: str | None = option(None, "--comparator", panel=EVALUATION, metavar="NAME",
                                    help="A variant (e.g. DAPT) whose gain the others' gains are a share of.")
    devices: tuple[str, ...] = option(
        (), "--devices", panel=PERFORMANCE, metavar="IDS", cli_type=str | None,
        parse=lambda text: tuple(d.strip() for d in (text or "").split(",")) if text is not None and text.strip() else (),
        help="With --parallel: the CUDA GPUs the workers are spread over, comma-separated ids (default: every visible GPU); "
             "each worker is pinned to one before it touches CUDA, several per GPU when --parallel is larger.")
    ray: str | None = option(None, "--ray", panel=PERFORMANCE, metavar="ADDRESS",
                             help="Train every run as a task on this Ray cluster (host:port, or auto: the cluster of this node; "
                                  "needs greenadapt[cluster]). --out must be on storage every node sees, or pass --ray-storage local.")
    ray_storage: str = option("shared", "--ray-storage", panel=PERFORMANCE, choices=STORAGES,
                              help="With --ray: shared (every node writes --out, checked up front) or local (inputs are sent to the "
                                   "nodes, each run's folder and log come back here).")
    run_cpus: int | None = option(None, "--run-cpus", panel=PERFORMANCE, minimum=1,
                                  help="With --ray: CPUs (threads) per run (default: 1 beside a GPU, else 4, at most a node's).")
    run_gpus: float | None = option(None, "--run-gpus", panel=PERFORMANCE, minimum=0,
                                    help="With --ray: GPUs per run, a fraction to share one (default: 1 on a cluster with GPUs, else 0).")
    parallel: int = option(1, "--parallel", panel=PERFORMANCE, minimum=1,
                           help="Fine-tunings at once: N worker processes, each with its share of the cores, each training run after run.")
    bootstrap: int = option(1000, "--bootstrap", panel=EVALUATION, minimum=100, maximum=MAX_BOOTSTRAP,
                            help="Paired bootstrap replicates over test examples (each holds a row per test example: memory grows with "
                                 "both).")
    bootstrap_seed: int = option(0, "--bootstrap-seed", panel=EVALUATION, help="Seed of the bootstrap's resampling.")
    keep_going: bool = option(False, "--keep-going", panel=RUN_CONTROL,
                              help="Train every run even after one learned nothing (no entity, one label everywhere, or words tagged worse "
                                   "than always answering the most frequent label); by default compare stops there and says why.")
    save_every: int | None = option(100, "--save-every", panel=RUN_CONTROL, minimum=1,
                                    help="Checkpoint every N steps, so an interrupted compare resumes.")
    corpus: tuple[str, ...] = option((), "--corpus", "-c", panel=INPUT_OUTPUT, public=public_specs,
                                     help="With --adapt-methods: the corpus to adapt the first --model to.")
    adapt_methods: tuple[str, ...] = option(
        (), "--adapt-methods", panel=TRAINING, metavar="M1,M2", cli_type=str | None,
        parse=lambda text: tuple(m.strip() for m in (text or "").split(",") if m.strip()),
        help="Adapt the first --model to --corpus with each method (lstsq, subword-mean, focus, ...); each joins the comparison under its "
             "method's name.")
    agreements: tuple[tuple[str, float], ...] = option(
        (), "--agreement", panel=MODEL, metavar="NAME=W", parse=parse_agreements, cli_type=list[str],
        help="That --model trains with views that agree at weight W (finetune --agreement; e.g. --model green-agree=MODEL "
             "--agreement green-agree=1): both views each step, twice the forward passes. On a one-tokenizer model it is "
             "R-Drop (two passes of the same pieces, dropout apart): --model base-rdrop=BASE --agreement base-rdrop=1.")
    both_views: tuple[str, ...] = option(
        (), "--both-views", panel=MODEL, metavar="NAME", cli_type=list[str], parse=lambda names: tuple(n.strip() for n in names),
        help="That --model trains every example in both views each step without the KL (finetune --both-views; the control "
             "that separates --agreement's KL from its doubled exposure), e.g. --model green-both=MODEL --both-views green-both.")
    one_view: tuple[str, ...] = option(
        (), "--no-both-views", panel=MODEL, metavar="NAME", cli_type=list[str], parse=lambda names: tuple(n.strip() for n in names),
        help="That two-tokenizer --model trains one view a step, the 50/50 mixture (finetune --no-both-views; the default "
             "before the CPU study's first look), e.g. --model green-mix=MODEL --no-both-views green-mix.")
    ensembles: tuple[tuple[str, int], ...] = option(
        (), "--ensemble", panel=MODEL, metavar="NAME=N", parse=parse_ensembles, cli_type=list[str],
        help="That --model is N fine-tunings per seed scored on the mean of their probabilities "
             "(e.g. --model base-x2=MODEL --ensemble base-x2=2: the control for two-view inference).")

    def check(self) -> None:
        """Checks between options: the recipe's against the device and the task; the cluster's options are for ``--ray``
        only (shared storage, the default, is what a run without Ray has)."""
        from greenadapt.training.config import check_cuda_graphs
        from greenadapt.compute.distributed import check_precision

        check_precision(self.precision, self.device)
        check_cuda_graphs(self.cuda_graphs, self.device)
        if self.entity_type is not None and self.task != "ner":
            raise UsageError("--entity-type is for --task ner")
        if self.ray is None:
            given = [flag for flag, value in (("--ray-storage", self.ray_storage != "shared"),
                                              ("--run-cpus", self.run_cpus is not None),
                                              ("--run-gpus", self.run_gpus is not None)) if value]
            if given:
                raise UsageError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --ray, which was not given",
                                 hint="add --ray ADDRESS (or auto), or leave them out: --parallel N trains N runs at once here")

    def configure_process(self) -> None:
        """compare's own process runs no kernels: the fine-tunings it trains here set torch's threads as they start, and
        a worker its share, so torch is imported here only for an explicit ``--threads`` (which they then keep)."""
        from greenadapt.machine.load import choose_wait_policy

        if self.threads:
            super().configure_process()
        else:
            choose_wait_policy()

    def ray_placement(self) -> RayPlacement | None:
        """``--ray`` and its options as one placement; None without ``--ray``."""
        if self.ray is None:
            return None
        return RayPlacement(self.ray, storage=self.ray_storage, run_cpus=self.run_cpus, run_gpus=self.run_gpus)
