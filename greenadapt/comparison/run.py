"""``compare``: fine-tune several models with one recipe and the same seeds, then answer "did it help?".

A compare folder::

    compare.json                the result: scores per variant and pooling mode, pairs, costs
    <variant>/seed-<s>/         one finetune stage per model and seed (a rerun skips finished ones
                                and resumes interrupted ones from their checkpoints)
    <variant>/seed-<s>.log      its log, when fine-tunings ran in parallel processes

Every variant is fine-tuned by ``finetune`` with the same task files, recipe and
seeds; a model with a domain tokenizer trains on both views each step and its
headline is mean pooling, a plain model's the general view (finetune's own
defaults). The pairs, each variant against ``against``, are computed by
:mod:`greenadapt.comparison.statistics`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.tasks import LabellingTask, get_task
from greenadapt.artifacts import kinds
from greenadapt.comparison.ensembles import (
    Run,
    plan_runs,
    read_by_pool,
    read_ensemble,
    result_folder,
    score_ensemble,
)
from greenadapt.comparison.recipe import Comparison, finetune_arguments
from greenadapt.comparison.costs import adaptation_cost, cost_figures
from greenadapt.comparison.pace import RunsLeft, plan_line, wall_seconds
from greenadapt.comparison.health import CompareStopped, collapse_notes, degenerate, degenerate_answers, stop_if_it_learned_nothing
from greenadapt.comparison.folders import RESULT_FILE, recorded_base_model
from greenadapt.comparison.statistics import Contributions, PairedResult, compare_pair, mean_sd
from greenadapt.comparison.strata import strata_lines
from greenadapt.progress import NULL_PROGRESS, Progress

if TYPE_CHECKING:
    from greenadapt.comparison.dispatch import Cluster
    from greenadapt.comparison.settings import CompareSettings
    from greenadapt.options import Run as RunContext

log = logging.getLogger(__name__)

RESULT_FORMAT = 1


@dataclass
class Variant:
    name: str
    model: str
    scores: dict[int, dict[str, dict[str, float]]] = field(default_factory=dict)  # seed -> pool -> metric -> value
    headline_pool: str = "general"
    finetune_cost: dict[str, float] = field(default_factory=dict)
    adaptation_cost: dict[str, float] = field(default_factory=dict)


@dataclass
class CompareResult:
    options: Comparison
    metric: str
    variants: list[Variant]
    pairs: list[PairedResult]
    shares: dict[str, float | None]
    seconds: float
    provenance: dict[str, Any] = field(default_factory=dict)  # comparison/provenance.py: what proves a pair

    @property
    def path(self) -> Path:
        return self.options.out

    def __repr__(self) -> str:
        return f"CompareResult({self.path}: {len(self.variants)} variants, {len(self.options.seeds)} seeds; " + "; ".join(
            p.verdict() for p in self.pairs) + ")"

    def to_json(self) -> dict[str, Any]:
        options = {**self.options.settings.to_json(), "out": str(self.options.out), "force": self.options.run.force}
        return {
            "format": RESULT_FORMAT,
            "kind": "compare",
            "options": options,
            "metric": self.metric,
            "variants": [
                {
                    "name": v.name, "model": v.model, "headline_pool": v.headline_pool,
                    "scores": {str(s): pools for s, pools in v.scores.items()},
                    "summary": summarize(v, self.metric),
                    "finetune_cost": v.finetune_cost, "adaptation_cost": v.adaptation_cost,
                }
                for v in self.variants
            ],
            "pairs": [pair | {"verdict": p.verdict(unit=verdict_unit(self.metric)), "strata_table": strata_lines(pair)}
                      for p in self.pairs for pair in [p.to_json()]],
            "share_of_comparator_gain": self.shares,
            "recommendation": self.recommendation(),
            "seconds": round(self.seconds, 1),
            "provenance": self.provenance,
        }

    def recommendation(self) -> str:
        """What to do next, one line (comparison/advice.py)."""
        from greenadapt.comparison.advice import recommend

        return recommend([p.to_json() for p in self.pairs], unit=verdict_unit(self.metric))


def verdict_unit(metric: str) -> str:
    """How a verdict line names the metric: ``F1``, else the metric's own name."""
    return metric.upper() if metric == "f1" else metric


def summarize(variant: Variant, metric: str) -> dict[str, dict[str, float]]:
    """Per pooling mode: mean and sd of the metric over the variant's seeds."""
    pools = sorted({pool for per_pool in variant.scores.values() for pool in per_pool})
    summary = {}
    for pool in pools:
        values = [variant.scores[s][pool][metric] for s in sorted(variant.scores) if metric in variant.scores[s].get(pool, {})]
        if values:
            mean, sd = mean_sd(values)
            summary[pool] = {"mean": mean, "sd": sd, "n": len(values)}
    return summary


def compare_runs(options: Comparison, finetune: Callable[..., Any], progress: Progress = NULL_PROGRESS,
                adapt: Callable[..., Any] | None = None) -> CompareResult:
    """Adapt the baseline once per ``adapt_methods``, fine-tune every model on every seed (skipping finished runs),
    then compare each with the baseline.

    ``finetune`` and ``adapt`` take :func:`greenadapt.finetune`'s and :func:`greenadapt.adapt`'s keywords
    (:func:`run_compare` passes the commands' runners; a worker process is handed ``finetune``).
    """
    if len(options.models) == 1 and not options.adapt_methods:  # one adapted model: its base is the baseline
        base = recorded_base_model(options.models[0][1])
        if base is not None:
            name = "base" if options.models[0][0] != "base" else "base-model"
            log.info("the baseline: %s, the model %s was made from (its manifest says so)", base, options.models[0][0])
            options = options.with_models(((name, base), *options.models))
    options.check()
    from greenadapt.artifacts.locks import output_lock

    if options.report_to:
        from greenadapt.training.trackers import probe_trackers

        probe_trackers(options.report_to)

    options.out.parent.mkdir(parents=True, exist_ok=True)
    from greenadapt.comparison.dispatch import cluster_for

    # one compare per folder: a second one's workers would take its runs
    with output_lock(options.out, "compare", wait=options.run.wait), cluster_for(options) as cluster:
        try:
            return _compare_locked(options, finetune, progress, adapt, cluster)
        except CompareStopped as stop:
            _write_stopped(options, stop)
            raise


def _write_in_progress(options: Comparison, runs: Sequence[Run]) -> None:
    """compare.json from the start: the plan of fine-tunings, so a compare killed by Ctrl-C or ``kill -9`` is still a
    compare folder that ``info`` and ``report`` read ("1 of 4 finished; rerun ..."); the result replaces it at the end."""
    from greenadapt.artifacts.compare_result import how_to_finish
    from greenadapt.artifacts.files import write_json

    options_doc = {**options.settings.to_json(), "out": str(options.out), "force": options.run.force}
    options.out.mkdir(exist_ok=True)
    planned = [{"name": r.name, "seed": r.seed, "folder": r.folder(options.out).relative_to(options.out).as_posix()} for r in runs]
    write_json(options.out / RESULT_FILE, {
        "format": RESULT_FORMAT, "kind": "compare", "options": options_doc, "metric": None, "variants": [], "pairs": [],
        "in_progress": {"runs": planned, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        "how_to_finish": how_to_finish(options.run.force)},
    })


def _write_stopped(options: Comparison, stop: CompareStopped) -> None:
    """A stopped comparison's compare.json: why it stopped and which runs had finished, for ``info`` and ``report``
    (a finished compare replaces it)."""
    from greenadapt.artifacts.files import write_json

    finished = [f"{r.name} seed {r.seed}" for r in plan_runs(options) if _finished(r.folder(options.out))]
    options_doc = {**options.settings.to_json(), "out": str(options.out), "force": options.run.force}
    write_json(options.out / RESULT_FILE, {
        "format": RESULT_FORMAT, "kind": "compare", "options": options_doc, "metric": None, "variants": [], "pairs": [],
        "stopped": {"why": f"{stop.what}, a run that learned nothing", "not_started": stop.not_started, "finished_runs": finished,
                    "fix": f"{stop.fix}, then rerun with --force; or --keep-going to train them anyway"},
        "recommendation": f"no recommendation: compare stopped ({stop.what}); {stop.fix}",
    })


def _compare_locked(options: Comparison, finetune: Callable[..., Any], progress: Progress,
                    adapt: Callable[..., Any] | None, cluster: Cluster | None) -> CompareResult:
    from greenadapt.comparison.dispatch import finetune_elsewhere, runs_at_once, runs_elsewhere

    started = time.monotonic()
    if options.adapt_methods:
        options = _with_adapted_variants(options, adapt, progress)
    runs = plan_runs(options)
    _write_in_progress(options, runs)
    done = [r for r in runs if _finished(r.folder(options.out))]
    if options.run.force and done:  # each is retrained, and counted in the plan and the time left as such
        log.info("--force: the %d finished fine-tuning(s) are trained again", len(done))
        done = []
    # Finished runs go through finetune too: it skips a stage made with this recipe and refuses one made with
    # another (a changed --epochs must not be paired with runs of the old one). That check is quick: in process.
    todo = [r for r in runs if r not in done]
    elsewhere = runs_elsewhere(options, todo, cluster)
    at_once = runs_at_once(options, todo, cluster) if elsewhere else 1
    log.info("%s", plan_line(options, runs, done, at_once))
    clock = RunsLeft(len(todo))
    for number, run in enumerate([*done, *([] if elsewhere else todo)], start=1):
        member = f", member {run.member + 1} of {options.members(run.name)}" if options.members(run.name) > 1 else ""
        log.info("%s %s, seed %d%s (%d/%d%s)", "checking the finished run of" if run in done else "fine-tuning", run.name, run.seed,
                 member, number, len(runs), clock.left() if run not in done else "")
        finetune(**finetune_arguments(options, run.spec, run.train_seed, run.folder(options.out), name=run.name), progress=progress)
        if run not in done:
            clock.finished(wall_seconds(run.folder(options.out)))
            stop_if_it_learned_nothing(options, run, queued=len(todo) - clock.done)
    if elsewhere:
        finetune_elsewhere(options, todo, finetune, cluster)
    for name, spec in options.models:
        if options.members(name) > 1:
            for seed in options.seeds:
                score_ensemble(options, name, spec, seed)
    variants = [_collect(options, name, spec) for name, spec in options.models]
    predictions = _read_predictions(options, variants)
    metric = predictions.metric
    baseline = next(v for v in variants if v.name == options.baseline)
    pairs = [_pair(options, v, baseline, predictions) for v in variants if v.name != baseline.name]
    if predictions.gold:
        _stratify(options, pairs, predictions)
    budget = budget_note(options)
    for pair in pairs:
        pair.notes.extend(collapse_notes(predictions.collapsed, pair.variant, pair.baseline))
        if budget is not None:
            pair.notes.append(budget)
        for note in pair.notes:
            if note.startswith("not a verdict"):
                log.warning("%s vs %s: %s", pair.variant, pair.baseline, note)
    shares = _shares(options, pairs)
    from greenadapt.artifacts.files import write_json
    from greenadapt.comparison.provenance import provenance

    folders = {name: [r.folder(options.out) for r in runs if r.name == name] for name, _ in options.models}
    result = CompareResult(options, metric, variants, pairs, shares, time.monotonic() - started,
                           provenance(options, folders, dict(options.models)))

    write_json(options.out / RESULT_FILE, result.to_json())
    return result


def _with_adapted_variants(options: Comparison, adapt: Callable[..., Any] | None, progress: Progress) -> Comparison:
    """The baseline adapted to the corpus once per method of ``adapt_methods``, each a variant named after its method."""
    if adapt is None:
        raise TypeError("adapt_methods need the adapt function")
    base_model = dict(options.models)[options.models[0][0]]
    made = []
    for method in options.adapt_methods:
        log.info("adapting %s to %s with --method %s", base_model, ", ".join(options.corpus), method)
        outcome = adapt(list(options.corpus), model=base_model, method=method, out=options.out / "adapted" / method,
                        workdir=options.run.workdir, progress=progress)
        made.append((method, str(outcome.expand.path)))
    return options.with_models((*options.models, *made), adapt_methods=(), corpus=())


def _finished(folder: Path) -> bool:
    from greenadapt.artifacts.manifest import read_manifest

    manifest = read_manifest(folder) if folder.is_dir() else None
    return manifest is not None and manifest.get("kind") == kinds.FINETUNE


def _collect(options: Comparison, name: str, spec: str) -> Variant:
    from greenadapt.artifacts.manifest import read_manifest
    from greenadapt.machine.energy import cost_of

    variant = Variant(name, spec)
    costs: list[dict[str, Any]] = []
    for seed in options.seeds:
        folder = options.out / name / f"seed-{seed}"
        metrics_file = folder / "metrics.json"
        if options.members(name) > 1:  # the ensemble's scores; its cost is every member's
            ensemble = read_ensemble(options, name, seed)
            if ensemble is not None:
                variant.scores[seed] = ensemble["test"]
                costs += [cost_of(read_manifest(Run(name, spec, seed, m).folder(options.out)) or {}) for m in range(options.members(name))]
            continue
        if not metrics_file.is_file():
            continue
        document = json.loads(metrics_file.read_text(encoding="utf-8"))
        if get_task(options.task).answers_questions:  # one pool, scored in percent: as the other tasks' fractions here
            test_scores = document.get("test") or {}
            variant.scores[seed] = {str(document.get("pool")): {k: float(v) / 100 for k, v in test_scores.items()
                                                                if k in ("exact_match", "f1", "substring_match") and v is not None}}
            costs.append(cost_of(read_manifest(folder) or {}))
            continue
        per_seed: dict[str, Any] = document.get("per_seed") or {}
        first: dict[str, Any] = next(iter(per_seed.values()), {})
        test: dict[str, Any] = first.get("test") or {}
        variant.scores[seed] = {pool: {k: float(v) for k, v in values.items() if isinstance(v, int | float)}
                                for pool, values in test.items()}
        costs.append(cost_of(read_manifest(folder) or {}))
    pools_seen = {pool for pools in variant.scores.values() for pool in pools}
    variant.headline_pool = "mean" if "mean" in pools_seen else ("general" if "general" in pools_seen or not pools_seen
                                                                 else pools_seen.pop())
    variant.finetune_cost = cost_figures(costs)
    variant.adaptation_cost = adaptation_cost(spec)
    return variant


@dataclass
class _Predictions:
    """Every run's test predictions, each file read once: the metric they were scored by, each run's per-example
    contributions under its variant's headline pool, and the runs that learned nothing (variant -> seed -> what)."""

    metric: str
    contributions: dict[tuple[str, int], Contributions] = field(default_factory=dict)
    collapsed: dict[str, dict[int, str]] = field(default_factory=dict)
    gold: list[Any] = field(default_factory=list)  # NER: gold tags per test sentence
    tags: dict[tuple[str, int], list[Any]] = field(default_factory=dict)  # NER: each run's predicted tags (headline pool)


def _read_predictions(options: Comparison, variants: Sequence[Variant]) -> _Predictions:
    from greenadapt.comparison.examples import contributions_for, qa_contributions

    task = get_task(options.task)
    if task.answers_questions:
        from greenadapt.data.squad import read_squad

        golds = {q.id: [a.text for a in q.answers] for q in read_squad(options.test).questions if q.answers is not None}
        found = _Predictions("f1")
        for variant in variants:
            for seed in variant.scores:
                path = options.out / variant.name / f"seed-{seed}" / "predictions" / "test.json"
                if path.is_file():
                    found.contributions[(variant.name, seed)] = qa_contributions(json.loads(path.read_text(encoding="utf-8")), golds)
                reason = degenerate_answers(next(iter(variant.scores[seed].values()), {}))
                if reason is not None:
                    found.collapsed.setdefault(variant.name, {})[seed] = reason
        return found
    found = _Predictions(task.default_metric if isinstance(task, LabellingTask) else "f1")
    metric: str | None = None  # the first run's says what they were all scored by: one task, one recipe
    for variant in variants:
        for seed in variant.scores:
            by_pool = read_by_pool(result_folder(options, variant.name, seed))
            if by_pool is None or variant.headline_pool not in by_pool["pools"]:
                continue
            metric = metric or str(by_pool["metric"])
            predicted = by_pool["pools"][variant.headline_pool]
            if task.finds_entities:
                found.gold, found.tags[(variant.name, seed)] = by_pool["gold"], predicted
            found.contributions[(variant.name, seed)] = contributions_for(options.task, metric, by_pool["gold"], predicted,
                                                                          by_pool.get("positive_label"))
            reason = degenerate(options.task, by_pool["gold"], predicted)
            if reason is not None:
                found.collapsed.setdefault(variant.name, {})[seed] = reason
    found.metric = metric or found.metric
    return found


def _pair(options: Comparison, variant: Variant, baseline: Variant, predictions: _Predictions) -> PairedResult:
    metric = predictions.metric
    seeds = [s for s in options.seeds if s in variant.scores and s in baseline.scores]
    scores = {
        s: (variant.scores[s][variant.headline_pool][metric], baseline.scores[s][baseline.headline_pool][metric]) for s in seeds
    }
    contributions = {s: (predictions.contributions[(variant.name, s)], predictions.contributions[(baseline.name, s)]) for s in seeds
                     if (variant.name, s) in predictions.contributions and (baseline.name, s) in predictions.contributions}
    return compare_pair(variant.name, baseline.name, metric, scores, contributions or None,
                        replicates=options.replicates, seed=options.bootstrap_seed)


def budget_note(options: Comparison) -> str | None:
    """A note for a comparison whose training budget (examples seen per run) is under a quarter of its task's default
    recipe (compute/health.py, the judgement finetune's warning makes of one run): its verdicts are about that budget,
    and README's measured gains about the recipe."""
    from greenadapt.data.task_files import ReaderOptions
    from greenadapt.compute.health import training_budget

    task = get_task(options.task)
    if not isinstance(task, LabellingTask) or (options.max_steps is None and options.epochs is None):
        return None
    examples = len(task.read(options.train, ReaderOptions(entity_type=options.entity_type), require_labels=True).examples)
    budget = training_budget(task.name, examples, recipe_epochs=task.defaults.epochs, epochs=options.epochs, max_steps=options.max_steps,
                             batch=options.batch_size or task.defaults.batch_size)
    if not budget.short:
        return None
    return f"budget: {budget.words()} per run; README's measured gains are for the recipe, not this budget"


def _stratify(options: Comparison, pairs: Sequence[PairedResult], predictions: _Predictions) -> None:
    """NER: each pair's difference split by the kind of test mention (:mod:`greenadapt.comparison.strata`)."""
    from greenadapt.artifacts.pretrained import resolve_model
    from greenadapt.comparison.strata import stratified_differences, word_facts
    from greenadapt.inference.labelling import has_domain_tokenizer
    from greenadapt.tasks import get_labelling_task
    from greenadapt.data.task_files import ReaderOptions

    sentences = [s.words for s in get_labelling_task(options.task).read(options.test, ReaderOptions(entity_type=options.entity_type),
                                                                       require_labels=True).examples]
    if len(sentences) != len(predictions.gold):
        log.warning("the test file has %d sentences, the runs' predictions %d: no split by mention", len(sentences), len(predictions.gold))
        return
    specs = dict(options.models)
    for pair in pairs:
        folders = [resolve_model(specs[name]).path for name in (pair.variant, pair.baseline)]
        expanded = next((folder for folder in folders if has_domain_tokenizer(folder)), None)
        facts = word_facts(sentences, expanded or folders[1], expanded)
        seeds = [s for s in pair.seeds if (pair.variant, s) in predictions.tags and (pair.baseline, s) in predictions.tags]
        tagged = {s: (predictions.tags[(pair.variant, s)], predictions.tags[(pair.baseline, s)]) for s in seeds}
        pair.strata = stratified_differences(pair.variant, pair.baseline, predictions.gold, tagged, facts,
                                             replicates=options.replicates, seed=options.bootstrap_seed)


def _shares(options: Comparison, pairs: Sequence[PairedResult]) -> dict[str, float | None]:
    """Each variant's mean gain as a share of the comparator's (e.g. DAPT's), when one is named."""
    if options.comparator is None:
        return {}
    gains = {p.variant: p.mean for p in pairs}
    reference = gains.get(options.comparator)
    return {name: (gain / reference if reference else None) for name, gain in gains.items() if name != options.comparator}


def run_compare(settings: CompareSettings, run: RunContext) -> CompareResult:
    """``greenadapt compare``: every fine-tuning (and adaptation) of the comparison, then the verdicts; the compare folder keeps
    ``settings`` (options.json) beside compare.json."""
    from functools import partial

    from greenadapt.adaptation.settings import AdaptSettings
    from greenadapt.artifacts.files import write_json
    from greenadapt.options import OPTIONS_FILE, call_command
    from greenadapt.options.python_terms import as_called_here
    from greenadapt.runners.finetune.settings import FinetuneSettings

    finetune = as_called_here(partial(call_command, FinetuneSettings, "greenadapt.runners.finetune.run:run_finetune"))
    adapt = as_called_here(partial(call_command, AdaptSettings, "greenadapt.adaptation.pipeline:run_adapt"))
    options = Comparison(settings, run)
    result = compare_runs(options, finetune, run.progress, adapt=adapt)
    write_json(options.out / OPTIONS_FILE, settings.document())
    return result
