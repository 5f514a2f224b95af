"""One comparison's recipe: the task files, the models by name, the shared fine-tuning options, the seeds; checked whole."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.comparison.cluster import RayPlacement
from greenadapt.comparison.folders import MODEL_NAME, check_compare_folder
from greenadapt.defaults import MAX_AGREEMENT
from greenadapt.errors import UsageError
from greenadapt.tasks import TASKS as FINETUNE_TASKS
from greenadapt.tasks import get_task

if TYPE_CHECKING:
    from greenadapt.comparison.settings import CompareSettings
    from greenadapt.options import Run

TASKS = tuple(name for name, task in FINETUNE_TASKS.items() if task.finetunes)
MAX_ENSEMBLE = 16  # members of one ensemble at most
# Member j > 0 of an ensemble trains with seed + j * stride: a seed of its own, never one of the comparison's seeds
# (Comparison.check refuses seeds that would make one).
ENSEMBLE_SEED_STRIDE = 100_000


@dataclass(frozen=True)
class Comparison:
    """One comparison as it runs: compare's settings as they are (its options read as the comparison's own: ``.seeds``),
    and the run's folders and flags."""

    settings: CompareSettings
    run: Run

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("settings", "run"):  # copying and unpickling look these up before they are set
            raise AttributeError(name)
        return getattr(self.settings, name)

    def with_models(self, models: tuple[tuple[str, str], ...], **values: Any) -> Comparison:
        """The same comparison over ``models`` (the baseline a model was made from, the variants adapt made)."""
        return Comparison(self.settings.replaced(models=models, **values), self.run)

    @property
    def out(self) -> Path:
        assert self.run.out is not None  # compare's --out is required
        return self.run.out

    @property
    def replicates(self) -> int:
        return self.settings.bootstrap

    @property
    def ray(self) -> RayPlacement | None:
        return self.settings.ray_placement()

    def members(self, name: str) -> int:
        """How many fine-tunings of ``name`` one seed's result is made of (1: a plain run)."""
        return dict(self.settings.ensembles).get(name, 1)

    @property
    def baseline(self) -> str:
        return self.settings.against or self.settings.models[0][0]

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.settings.models] + list(self.settings.adapt_methods)

    def check(self) -> None:
        """Every option, before the first fine-tuning."""
        from greenadapt.artifacts.pretrained import resolve_model

        if self.task not in TASKS:
            raise UsageError(f"compare does not take --task {self.task!r} yet", hint=f"choose from {', '.join(TASKS)}")
        names = self.names
        if bool(self.corpus) != bool(self.adapt_methods):
            raise UsageError("--adapt-methods and --corpus go together", hint="e.g. --corpus cord19 --adapt-methods lstsq,subword-mean")
        if self.adapt_methods:
            from greenadapt.adaptation.methods import get_method

            for method in self.adapt_methods:
                get_method(method)
        if len(names) < 2:
            raise UsageError("compare needs at least two --model NAME=MODEL, or one that greenadapt adapted (its base is the baseline)",
                             hint="e.g. --model base=<general model> --model green=<adapted folder>")
        for name in names:
            if not MODEL_NAME.match(name):
                raise UsageError(f"--model name {name!r} is not a plain name", hint="letters, digits, '.', '_' and '-'; it names a folder")
        if len(set(names)) != len(names):
            raise UsageError("two --model entries share a name", hint="give each model its own NAME=")
        for role, value in (("--against", self.against), ("--comparator", self.comparator)):
            if value is not None and value not in names:
                raise UsageError(f"{role} {value!r} names no --model", hint=f"one of {', '.join(names)}")
        self._check_variants(names)
        if self.comparator is not None and self.comparator == self.baseline:
            raise UsageError(f"--comparator {self.comparator!r} is the baseline itself: its share of its own gain says nothing",
                             hint="name the expensive variant (e.g. dapt) as --comparator, another --model than --against")
        if self.devices and (self.device.partition(":")[0] not in ("auto", "cuda")
                             or not all(d.isdigit() and len(d) < 6 for d in self.devices)):
            raise UsageError(f"--devices {','.join(self.devices)} spreads workers over CUDA GPUs by their ids, with --device auto or cuda",
                             hint="e.g. --devices 0,1,2,3; leave it out on a machine without GPUs")
        if self.ray is not None:
            self.ray.check(parallel=self.parallel, devices=self.devices)
        for flag, path in (("--train", self.train), ("--test", self.test), ("--dev", self.dev)):
            if path is not None and not Path(path).is_file():
                from greenadapt.errors import InputError

                raise InputError("no such file", path=path, hint=f"{flag} takes a task file")
        from greenadapt.artifacts.destination import check_destination_apart, protected

        reads = [item for flag, path in (("--train", self.train), ("--test", self.test), ("--dev", self.dev))
                 for item in protected(f"the {flag} file", path)]
        for name, spec in self.models:
            reads += protected(f"--model {name}", resolve_model(spec).path)
        check_destination_apart(self.out, reads)
        check_compare_folder(self.out)
        if self.adapt_methods:
            from greenadapt.corpus.resolve import resolve_corpus

            resolve_corpus(list(self.corpus))


    def _check_variants(self, names: list[str]) -> None:
        """What one variant has of its own: an ensemble's size (and its members' seeds), views that agree."""
        for name, size in self.ensembles:
            if name not in names:
                raise UsageError(f"--ensemble {name}={size} names no --model", hint=f"one of {', '.join(names)}")
            if not 1 <= size <= MAX_ENSEMBLE:
                raise UsageError(f"--ensemble {name}={size}: an ensemble has 1 to {MAX_ENSEMBLE} members")
            if get_task(self.task).answers_questions and size > 1:
                raise UsageError("--ensemble is for NER and classification", hint="compare question answering one model per seed")
        if len(dict(self.ensembles)) != len(self.ensembles):
            raise UsageError("--ensemble names one model twice", hint="give each NAME=N once")
        self._check_member_seeds()
        for name, weight in self.agreements:
            if name not in names:
                raise UsageError(f"--agreement {name}={weight:g} names no --model", hint=f"one of {', '.join(names)}")
            if not (math.isfinite(weight) and 0 < weight <= MAX_AGREEMENT) or get_task(self.task).answers_questions:
                raise UsageError(f"--agreement {name}={weight:g}: a positive weight of at most {MAX_AGREEMENT:g}, "
                                 "for NER or classification",
                                 hint="e.g. --agreement green-agree=1")
        if len(dict(self.agreements)) != len(self.agreements):
            raise UsageError("--agreement names one model twice", hint="give each NAME=W once")
        for flag, named in (("--both-views", self.both_views), ("--no-both-views", self.one_view)):
            for name in named:
                if name not in names:
                    raise UsageError(f"{flag} {name} names no --model", hint=f"one of {', '.join(names)}")
            if named and get_task(self.task).answers_questions:
                raise UsageError(f"{flag} is for NER and classification", hint="leave it out for --task qa")
            if len(set(named)) != len(named):
                raise UsageError(f"{flag} names one model twice", hint="give each NAME once")
        if both := sorted(set(self.both_views) & set(self.one_view)):
            raise UsageError(f"--both-views and --no-both-views both name {', '.join(both)}", hint="give one of them each")

    def _check_member_seeds(self) -> None:
        """An ensemble member's seed is in range and none is a seed of the comparison (the same run under two names)."""
        from greenadapt.defaults import check_seed

        largest = max((size for _, size in self.ensembles), default=1)
        for seed in self.seeds:
            for member in range(1, largest):
                train_seed = seed + member * ENSEMBLE_SEED_STRIDE
                if train_seed in self.seeds:
                    raise UsageError(f"--seeds has {seed} and {train_seed}: member {member + 1} of seed {seed}'s ensemble trains with seed "
                                     f"{train_seed} (seed + {member} x {ENSEMBLE_SEED_STRIDE:,}), the same run as seed {train_seed}",
                                     hint=f"choose seeds below {ENSEMBLE_SEED_STRIDE:,}")
                check_seed(train_seed, option=f"--seeds {seed} (member {member + 1} trains with {train_seed})")


def finetune_arguments(options: Comparison, spec: str, seed: int, out: Path, *, name: str | None = None) -> dict[str, Any]:
    """The ``greenadapt.finetune`` call of one run: the same recipe for every model.

    Every option compare and finetune share (declared once, in the groups both take: training/settings.py) is passed
    on when set. The mixture is spelled out as finetune's default would choose it (0.5 with a domain tokenizer, else 0;
    mean pooling), so a run folder made by an explicit ``finetune --mix ... --pool mean`` (the study script's)
    is the same stage and is reused.
    """
    from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR
    from greenadapt.artifacts.pretrained import resolve_model
    from greenadapt.options import declared_fields
    from greenadapt.runners.finetune.settings import FinetuneSettings

    model = resolve_model(spec)
    mixed = (model.path / GENERAL_TOKENIZER_DIR).is_dir()
    if options.ray is not None and options.ray.storage == "local" and Path(spec).expanduser().exists():
        spec = str(model.path)  # sent to the nodes and named back by this one path (artifacts/relocation.py)
    questions = get_task(options.task).answers_questions
    mixture = {"mix": 0.5 if mixed else 0.0, "pool": "mean"} if not questions else {}  # qa chooses its own pool
    finetune_fields = {field for field, _ in declared_fields(FinetuneSettings)}
    shared = {field.name: getattr(options.settings, field.name) for field, _ in declared_fields(options.settings)
              if field in finetune_fields and getattr(options.settings, field.name) != field.default}
    return {
        **shared, "task": options.task, "train": str(options.train), "test": str(options.test), **mixture,
        "dev": str(options.dev) if options.dev else None, "model": spec, "out": str(out), "seeds": [seed], "force": options.run.force,
        # every task's run keeps checkpoints (QA's too): a cut run resumes where it was
        "save_every": options.save_every, "resume": True,
        # a variant's own options: views that agree (--agreement NAME=W), both views or one (--both-views / --no-both-views NAME)
        **({"agreement": dict(options.agreements)[name]} if name in dict(options.agreements) else {}),
        **({"both_views": True} if name in options.both_views else {"both_views": False} if name in options.one_view else {}),
    }
