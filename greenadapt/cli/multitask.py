"""`greenadapt multitask`: one shared encoder, a head and PALs per task (NER and classification)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer

from greenadapt.defaults import DEFAULT_SEED
from greenadapt.cli import app
from greenadapt.manifest import Manifest
from greenadapt.cli._common import (
    ForceOption,
    JsonOption,
    QuietOption,
    VerboseOption,
    WaitOption,
    WorkdirOption,
    emit,
    progress_for,
    setup_logging,
)
from greenadapt.cli.finetune import (
    CompileOption,
    DeviceOption,
    GeneralModelOption,
    GmapCacheOption,
    GmapLayersOption,
    GmapOption,
    GmapUnfrozenOption,
    PrecisionOption,
    pool_option,
)


@app.command("multitask")
def multitask(
    task: list[str] = typer.Option(
        [], "--task", help="A task as comma-separated key=value pairs: name, type (ner or classify), train; optional dev, test, text_field, pair_field, label_field, format, header, metric, positive_label. Repeatable."
    ),
    tasks_file: Path | None = typer.Option(None, "--tasks", help="TOML file of \\[\\[task]] tables with the same keys (paths relative to the file)."),
    model: str | None = typer.Option(None, "--model", "-m", help="Expanded model folder (two tokenizers) or any BERT-style model."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Run folder (default: <workdir>/multitask/<tasks>/<model>)."),
    workdir: Path | None = WorkdirOption,
    adapter: str = typer.Option("pals", "--adapter", help="pals (projected attention layers), low-rank, or none (shared encoder, task heads only)."),
    pal_size: int = typer.Option(204, "--pal-size", help="Width s of the PAL space (V_E: d -> s; low-rank: the rank)."),
    pal_heads: int = typer.Option(12, "--pal-heads", help="Attention heads in the PAL space (must divide --pal-size)."),
    sampling: str = typer.Option("annealed", "--sampling", help="Task of each step: annealed (the paper's best), proportional, sqrt or round-robin."),
    steps_per_epoch: int | None = typer.Option(None, "--steps-per-epoch", help="Steps per 'epoch' (default: one pass over all tasks' training data)."),
    freeze_base: bool = typer.Option(False, "--freeze-base", help="Train only the PALs, the heads and the encoder's layer norms."),
    epochs: int = typer.Option(3, "--epochs", help="Epochs (of --steps-per-epoch steps)."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Stop after this many steps (overrides --epochs)."),
    batch_size: int = typer.Option(32, "--batch-size", help="Examples per step (all from one task)."),
    lr: float = typer.Option(5e-5, "--lr", help="Peak learning rate (AdamW, linear schedule)."),
    warmup: float = typer.Option(0.1, "--warmup", help="Fraction of the steps spent warming up."),
    weight_decay: float = typer.Option(0.01, "--weight-decay", help="AdamW weight decay."),
    seed: int = typer.Option(DEFAULT_SEED, "--seed", help="Random seed."),
    mix: float | None = typer.Option(None, "--mix", help="Probability of tokenizing a training example with T̂ (default: 0.5 with two tokenizers, else 0)."),
    pool: str = pool_option("mean"),
    max_length: int = typer.Option(128, "--max-length", help="Wordpieces per sequence."),
    max_words: int = typer.Option(30, "--max-words", help="NER: words per training chunk (labelled spans are never split); scored sentences stay whole where the window holds them."),
    device: str = DeviceOption,
    precision: str = PrecisionOption,
    compile: bool = CompileOption,
    eval_batch_size: int = typer.Option(64, "--eval-batch-size", help="Sequences per inference batch."),
    gmap: str = GmapOption,
    gmap_layers: str | None = GmapLayersOption,
    general_model: str | None = GeneralModelOption,
    gmap_unfrozen: bool = GmapUnfrozenOption,
    gmap_cache: bool = GmapCacheOption,
    force: bool = ForceOption,
    wait: bool = WaitOption,
    as_json: bool = JsonOption,
    quiet: bool = QuietOption,
    verbose: bool = VerboseOption,
) -> None:
    """Multi-task fine-tuning with PALs: per-task scores, their average and the parameter count."""
    from greenadapt.finetune.train import TrainConfig
    from greenadapt.gmap.options import GmapOptions
    from greenadapt.multitask.run import MultitaskOptions, run_multitask
    from greenadapt.multitask.spec import collect_specs
    from greenadapt.pals.config import PalsConfig

    setup_logging(quiet=quiet, verbose=verbose)
    options = MultitaskOptions(
        tasks=collect_specs(task, tasks_file),
        model=model,
        out=out,
        workdir=workdir,
        pals=PalsConfig(adapter=adapter, size=pal_size, heads=pal_heads),
        training=TrainConfig(
            mix=mix,
            batch_size=batch_size,
            lr=lr,
            epochs=epochs,
            max_steps=max_steps,
            warmup=warmup,
            weight_decay=weight_decay,
            seed=seed,
            precision=precision,
            compile=compile,
            eval_batch_size=eval_batch_size,
        ),
        sampling=sampling,
        steps_per_epoch=steps_per_epoch,
        freeze_base=freeze_base,
        pool=pool,
        max_length=max_length,
        max_words=max_words,
        device=device,
        force=force,
        wait=wait,
        gmap=GmapOptions.from_cli(gmap, gmap_layers, general_model, gmap_unfrozen, gmap_cache),
    )
    with progress_for(quiet) as progress:
        outcome = run_multitask(options, progress)
    emit(outcome.manifest, summary(outcome.manifest, outcome.path, outcome.skipped), as_json=as_json)


def summary(document: Mapping[str, Any], path: Path, skipped: bool) -> str:
    """One line: each task's primary score (test, else dev), the average, and the parameter count."""
    manifest = Manifest.of(document, path)
    stats = manifest.stats
    metric_of = {t["name"]: t["settings"]["metric"] for t in manifest.config.get("tasks", [])}
    parts = []
    for name, splits in manifest.section("stats", "scores").items():
        split = "test" if "test" in splits else "dev" if "dev" in splits else None
        if split is not None:
            parts.append(f"{name} {split} {metric_of.get(name, '')} {100 * splits[split]:.2f}")
    average = manifest.section("stats", "average")
    split = "test" if "test" in average else "dev" if "dev" in average else None
    if split is not None:
        parts.append(f"average {split} {100 * average[split]:.2f}")
    counts = manifest.section("stats", "parameters")
    size = ""
    if counts.get("relative_to_base"):
        per_task = [t["total"] for t in manifest.section("stats", "parameters", "per_task").values()]
        size = f"; parameters {counts['total']:,} = {counts['relative_to_base']:.3f}x the base ({counts['base']:,}), {max(per_task, default=0):,} per task at most"
    state = "up to date" if skipped else "trained"
    return f"{state} {len(stats.get('tasks', []))}-task {stats.get('adapter', '')} model in {path}" + (f": {', '.join(parts)}" if parts else "") + size
