"""Ensembles in compare: a model trained N times per seed and scored on the mean of its members' probabilities."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greenadapt.artifacts import kinds
from greenadapt.comparison.recipe import ENSEMBLE_SEED_STRIDE, Comparison


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Run:
    """One fine-tuning of a comparison: a model, a seed, and which member of that seed's ensemble (0: the run)."""

    name: str
    spec: str
    seed: int
    member: int = 0

    @property
    def train_seed(self) -> int:
        return self.seed + self.member * ENSEMBLE_SEED_STRIDE

    def folder(self, out: Path) -> Path:
        return out / self.name / (f"seed-{self.seed}" if not self.member else f"seed-{self.seed}-member-{self.member}")


def plan_runs(options: Comparison) -> list[Run]:
    """Every fine-tuning, seed by seed (so that a comparison cut short holds whole seeds)."""
    return [Run(name, spec, seed, member) for seed in options.seeds for name, spec in options.models
            for member in range(options.members(name))]


ENSEMBLE_SUFFIX = ".ensemble.json"


def ensemble_file(options: Comparison, name: str, seed: int) -> Path:
    return options.out / name / f"seed-{seed}{ENSEMBLE_SUFFIX}"


def result_folder(options: Comparison, name: str, seed: int) -> Path:
    """What holds a variant's test predictions for a seed: its run folder, or its ensemble's scores file."""
    return ensemble_file(options, name, seed) if options.members(name) > 1 else options.out / name / f"seed-{seed}"


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None


def read_ensemble(options: Comparison, name: str, seed: int) -> dict[str, Any] | None:
    """The ensemble's scores file, when it was made from the member runs that are there now."""
    document = read_json(ensemble_file(options, name, seed))
    if document is None or document.get("members") != member_fingerprints(options, name, seed):
        return None
    return document


def member_fingerprints(options: Comparison, name: str, seed: int) -> list[str | None]:
    from greenadapt.artifacts.manifest import read_manifest

    spec = dict(options.models)[name]
    return [(read_manifest(Run(name, spec, seed, m).folder(options.out)) or {}).get("fingerprint") for m in range(options.members(name))]


def score_ensemble(options: Comparison, name: str, spec: str, seed: int) -> dict[str, Any]:
    """Score one seed's ensemble of ``name`` on the test file: the mean of its members' probabilities, under each
    member's headline pooling (mean over both tokenizers where a member has two). Kept beside the runs
    (``<name>/seed-<s>.ensemble.json``: scores, predictions for the paired bootstrap, the members' fingerprints)
    and made again only when a member run changed."""
    from greenadapt.artifacts.files import write_json
    from greenadapt.inference.labelling import find_model_folder, label_file
    from greenadapt.inference.settings import LoadSettings

    known = read_ensemble(options, name, seed)
    if known is not None:
        return known
    folders = [Run(name, spec, seed, m).folder(options.out) for m in range(options.members(name))]
    founds = [find_model_folder(folder) for folder in folders]
    log.info("scoring the ensemble of %d %s runs, seed %d", len(folders), name, seed)
    request, logits = label_file(founds, options.test, options=LoadSettings(device=options.device))
    settings = founds[0][1]
    scores, predictions = request.task.score_modes(request.task_file, {request.mode: logits}, settings)
    document = {
        "kind": "compare-ensemble", "members": member_fingerprints(options, name, seed),
        "folders": [folder.name for folder in folders],
        "test": {mode: {k: float(v) for k, v in values.items() if isinstance(v, int | float)} for mode, values in scores.items()},
        "by_pool": {
            "task": request.task.name, "metric": settings.metric or request.task.default_metric,
            "positive_label": settings.positive_label, "gold": request.task_file.gold(),
            "pools": {mode: [list(p) if isinstance(p, tuple | list) else p for p in values] for mode, values in predictions.items()},
        },
    }
    write_json(ensemble_file(options, name, seed), document)
    return document


def read_by_pool(folder: Path) -> dict[str, Any] | None:
    """A run's (or an ensemble's) test predictions per pooling mode, with the gold labels and the metric."""
    if folder.name.endswith(ENSEMBLE_SUFFIX):  # an ensemble's predictions, kept in its scores file
        document = read_json(folder)
        return document.get("by_pool") if document else None
    path = folder / kinds.PREDICTIONS_DIR / kinds.by_pool_file_name("test")
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
