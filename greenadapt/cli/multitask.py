"""`greenadapt multitask`: one shared encoder, a head and PALs per task (NER and classification)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer

from greenadapt import api
from greenadapt.api import default_of
from greenadapt.artifacts.manifest import Manifest
from greenadapt.cli._common import (
    optimizer_options,
    api_command,
    show_stage,
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


@api_command("multitask", api.multitask, show_stage(lambda outcome: summary(outcome.manifest, outcome.path, outcome.skipped)), groups=(optimizer_options(api.multitask),))
def multitask(
    task: list[str] = typer.Option(
        [], "--task", help="A task as comma-separated key=value pairs: name, type (ner or classify), train; optional dev, test, text_field, pair_field, label_field, format, header, metric, positive_label. Repeatable."
    ),
    tasks_file: Path | None = typer.Option(None, "--tasks", help="TOML file of \\[\\[task]] tables with the same keys (paths relative to the file)."),
    model: str | None = typer.Option(None, "--model", "-m", help="Expanded model folder (two tokenizers) or any BERT-style model."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Run folder (default: <workdir>/multitask/<tasks>/<model>)."),
    adapter: str = typer.Option(default_of(api.multitask, "adapter"), "--adapter", help="pals (projected attention layers), low-rank, or none (shared encoder, task heads only)."),
    pal_size: int = typer.Option(default_of(api.multitask, "pal_size"), "--pal-size", help="Width s of the PAL space (V_E: d -> s; low-rank: the rank)."),
    pal_heads: int = typer.Option(default_of(api.multitask, "pal_heads"), "--pal-heads", help="Attention heads in the PAL space (must divide --pal-size)."),
    sampling: str = typer.Option(default_of(api.multitask, "sampling"), "--sampling", help="Task of each step: annealed (the paper's best), proportional, sqrt or round-robin."),
    steps_per_epoch: int | None = typer.Option(None, "--steps-per-epoch", help="Steps per 'epoch' (default: one pass over all tasks' training data)."),
    freeze_base: bool = typer.Option(default_of(api.multitask, "freeze_base"), "--freeze-base", help="Train only the PALs, the heads and the encoder's layer norms."),
    epochs: int = typer.Option(default_of(api.multitask, "epochs"), "--epochs", help="Epochs (of --steps-per-epoch steps)."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Stop after this many steps (overrides --epochs)."),
    batch_size: int = typer.Option(default_of(api.multitask, "batch_size"), "--batch-size", help="Examples per step (all from one task)."),
    lr: float = typer.Option(default_of(api.multitask, "lr"), "--lr", help="Peak learning rate (AdamW, linear schedule)."),
    seed: int = typer.Option(default_of(api.multitask, "seed"), "--seed", help="Random seed."),
    mix: float | None = typer.Option(None, "--mix", help="Probability of tokenizing a training example with T̂ (default: 0.5 with two tokenizers, else 0)."),
    pool: str = pool_option(default_of(api.multitask, "pool")),
    max_length: int = typer.Option(default_of(api.multitask, "max_length"), "--max-length", help="Wordpieces per sequence."),
    max_words: int = typer.Option(default_of(api.multitask, "max_words"), "--max-words", help="NER: words per training chunk (labelled spans are never split); scored sentences stay whole where the window holds them."),
    device: str = DeviceOption,
    precision: str = PrecisionOption,
    compile: bool = CompileOption,
    eval_batch_size: int = typer.Option(default_of(api.multitask, "eval_batch_size"), "--eval-batch-size", help="Sequences per inference batch."),
    gmap: str = GmapOption,
    gmap_layers: str | None = GmapLayersOption,
    general_model: str | None = GeneralModelOption,
    gmap_unfrozen: bool = GmapUnfrozenOption,
    gmap_cache: bool = GmapCacheOption,
) -> dict[str, Any] | None:
    """Multi-task fine-tuning with PALs: per-task scores, their average and the parameter count."""
    return None



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
