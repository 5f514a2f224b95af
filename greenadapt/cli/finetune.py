"""`greenadapt finetune`: fine-tune on NER, text classification or SQuAD-style QA with both tokenizers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from greenadapt import api
from greenadapt.api import default_of
from greenadapt.artifacts.manifest import Manifest
from greenadapt.tasks import TASKS, tasks_epilog, tasks_help

if TYPE_CHECKING:
    from greenadapt.artifacts.stage import StageOutcome
from greenadapt.cli._common import (
    optimizer_options,
    api_command,
    show_stage,
)

TextFieldOption = typer.Option(
    None, "--text-field", help="Text field (JSON) or column (TSV: header name or 0-based number); NER JSON: the token list."
)
PairFieldOption = typer.Option(None, "--pair-field", help="Second text of a sentence pair (JSON field or TSV column).")
LabelFieldOption = typer.Option(None, "--label-field", help="Label field or column; NER JSON: the tag list.")
FormatOption = typer.Option(default_of(api.finetune, "file_format"), "--format", help="auto, columns (NER word ... label), jsonl or tsv.")
HeaderOption = typer.Option(default_of(api.finetune, "header"), "--header", help="TSV header row: auto, yes or no.")
EntityTypeOption = typer.Option(
    None, "--entity-type", metavar="TYPE",
    help="NER files with bare B/I labels: train them as B-TYPE/I-TYPE (e.g. Disease), so transformers' entity aggregation groups them.",
)
def pool_option(default: str | None) -> Any:
    """``--pool``; finetune's default is None (mean with two tokenizers, else general), predict's and multitask's mean."""
    return typer.Option(default, "--pool", help="Logits at test time: mean (of both tokenizers), general (T_LM) or domain (T̂).")


PoolOption = pool_option(default_of(api.finetune, "pool"))
DeviceOption = typer.Option(default_of(api.finetune, "device"), "--device", help="auto, cpu, cuda, cuda:N or mps.")
PrecisionOption = typer.Option(default_of(api.finetune, "precision"), "--precision", help="auto (CUDA: bf16, else fp16; CPU: bf16 where the CPU has it natively (avx512_bf16, AMX), else fp32), fp32, bf16, fp16.")
ReportToOption = typer.Option(
    [], "--report-to", metavar="TRACKER",
    help="Experiment trackers: tensorboard, mlflow (repeat, or comma-separated): every step's loss, lr and gradient norm, "
         "dev and test scores, the run's options (the trackers extra: pip install tensorboard mlflow-skinny; docs/trackers.md).")
PadToMultipleOption = typer.Option(
    default_of(api.finetune, "pad_to_multiple"), "--pad-to-multiple", metavar="N",
    help="Round each training batch's width up to a multiple of N wordpieces (e.g. 32): a handful of shapes, so a "
         "compiled model (--compile, --cuda-graphs) compiles a handful of times. Padding is masked: results change only by rounding.")
CudaGraphsOption = typer.Option(
    default_of(api.finetune, "cuda_graphs"), "--cuda-graphs",
    help="GPU: compile with CUDA graphs (torch.compile's reduce-overhead mode), for small batches whose steps are bound "
         "by kernel launches; use with --pad-to-multiple.")
CompileOption = typer.Option(default_of(api.finetune, "compile"), "--compile", help="Compile the training forward and backward with torch.compile (the first steps pay the compilation; docs/benchmarks.md says where it pays).")
GmapOption = typer.Option(
    default_of(api.finetune, "gmap"), "--gmap", help="G-MAP: fuse a frozen general model's hidden states as memory: none, single, multi, gated or chunk (the paper's best)."
)
GmapLayersOption = typer.Option(
    None, "--gmap-layers", help='Fused domain layers, 1-based, e.g. "6,12" (default per strategy: single/gated ⌈3L/4⌉, chunk L/2 and L, multi all).'
)
GeneralModelOption = typer.Option(
    None, "--general-model", help="G-MAP general model (default for an expanded model: the model it was expanded from)."
)
GmapUnfrozenOption = typer.Option(False, "--gmap-unfrozen", help="G-MAP ablation: train the general model too.")
GmapIndexingOption = typer.Option(
    default_of(api.finetune, "gmap_indexing"), "--gmap-indexing", metavar="NAME",
    help="G-MAP: which general states multi/gated read: reference (the reference code: layer l-1, states 0..G) or paper (M^l: layer l, states 1..G).",
)
GmapCacheOption = typer.Option(
    False, "--gmap-cache", help="Cache the frozen general model's hidden states on disk (<workdir>/cache/gmap) across epochs."
)


def parse_seeds(text: str | None, seed: int, *, seed_given: bool = False) -> list[int]:
    """``--seeds 1,2,3`` as distinct seeds in range; ``--seed`` alone when there is no ``--seeds``."""
    from greenadapt.defaults import check_seed
    from greenadapt.errors import UsageError

    if text is None:
        return [seed]
    if seed_given:
        raise UsageError("--seed and --seeds were both given", hint="pass one: --seeds 1,2,3 trains once per seed")
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"--seeds {text!r} is not a comma-separated list of integers", hint="e.g. --seeds 1,2,3") from None
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds {text!r} repeats a seed: it needs distinct integers", hint="each seed once, e.g. --seeds 1,2,3")
    return [check_seed(s, option="--seeds") for s in seeds]


@api_command("finetune", api.finetune, show_stage(lambda outcome: _summary(outcome)), epilog=tasks_epilog(), groups=(optimizer_options(api.finetune),))
def finetune(
    task: str = typer.Option(..., "--task", help=f"{tasks_help()} (each with its own defaults, listed below)."),
    train: Path = typer.Option(..., "--train", help="Training file."),
    dev: Path | None = typer.Option(None, "--dev", help="Dev file: best-epoch selection (or training data with --train-on train+dev); qa: scored after training."),
    test: Path | None = typer.Option(None, "--test", help="Test file, evaluated at the end under every pooling mode (qa: EM/F1 as `greenadapt qa` answers)."),
    model: str | None = typer.Option(None, "--model", "-m", help="Expanded model folder (two tokenizers) or any BERT-style model."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Run folder (default: <workdir>/finetune/<data>/<model>)."),
    mix: float | None = typer.Option(None, "--mix", help="Probability of tokenizing a training example with T̂ (default: 0.5 with two tokenizers, else 0)."),
    pool: str | None = PoolOption,
    epochs: int | None = typer.Option(default_of(api.finetune, "epochs"), "--epochs", help="Passes over the training data (default: the task's)."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Stop after this many optimizer steps (overrides --epochs)."),
    batch_size: int | None = typer.Option(default_of(api.finetune, "batch_size"), "--batch-size", help="Examples (qa: windows) per optimizer step, over all processes (default: the task's)."),
    grad_accum: int = typer.Option(default_of(api.finetune, "grad_accum"), "--grad-accum", help="Micro-batches per step and process (gradient accumulation)."),
    lr: float | None = typer.Option(default_of(api.finetune, "lr"), "--lr", help="Peak learning rate (AdamW, linear schedule; default: the task's)."),
    seed: int = typer.Option(default_of(api.finetune, "seed"), "--seed", help="Random seed."),
    seeds: str | None = typer.Option(None, "--seeds", help="Several seeds, e.g. 1,2,3: one model each, mean ± std reported."),
    train_on: str = typer.Option(default_of(api.finetune, "train_on"), "--train-on", help="train, or train+dev (the paper's protocol; no dev selection)."),
    train_embeddings: str = typer.Option(default_of(api.finetune, "train_embeddings"), "--train-embeddings", help="Word embeddings to train: all, new (added rows only) or none."),
    max_length: int | None = typer.Option(default_of(api.finetune, "max_length"), "--max-length", help="Wordpieces per sequence; longer NER chunks are split (default: the task's)."),
    doc_stride: int | None = typer.Option(None, "--doc-stride", help="qa: wordpieces shared by consecutive windows of a long context (default: 128, at most a third of --max-length)."),
    max_words: int | None = typer.Option(default_of(api.finetune, "max_words"), "--max-words", help="NER: words per training chunk (labelled spans are never split; default 30); scored and predicted sentences stay whole where the window holds them."),
    metric: str | None = typer.Option(None, "--metric", help="Dev metric for the best epoch: NER f1|precision|recall|accuracy; classify accuracy|micro_f1|macro_f1|mcc|f1."),
    positive_label: str | None = typer.Option(None, "--positive-label", help="Classification: the label whose F1 is 'f1' (default: 1 for 0/1 labels)."),
    text_field: str | None = TextFieldOption,
    pair_field: str | None = PairFieldOption,
    label_field: str | None = LabelFieldOption,
    file_format: str = FormatOption,
    header: str = HeaderOption,
    entity_type: str | None = EntityTypeOption,
    device: str = DeviceOption,
    precision: str = PrecisionOption,
    compile: bool = CompileOption,
    eval_batch_size: int = typer.Option(default_of(api.finetune, "eval_batch_size"), "--eval-batch-size", help="Sequences per inference batch."),
    pad_to_multiple: int = PadToMultipleOption,
    cuda_graphs: bool = CudaGraphsOption,
    report_to: list[str] = ReportToOption,
    eval_every: int | None = typer.Option(
        default_of(api.finetune, "eval_every"), "--eval-every", metavar="N",
        help="With --dev: also score dev every N optimizer steps, not only at each epoch's end; the best scoring's weights are kept."),
    early_stopping: int | None = typer.Option(
        default_of(api.finetune, "early_stopping"), "--early-stopping", metavar="N",
        help="With --dev: stop once N dev scorings in a row did not beat the best (the best's weights are kept)."),
    save_every: int | None = typer.Option(
        None, "--save-every", min=1, help="Save a resumable checkpoint every N optimizer steps (in <out>.checkpoint/, removed when the run completes)."
    ),
    resume: bool = typer.Option(
        False, "--resume", help="Continue from the checkpoint an interrupted run left (SIGTERM saves one and exits with code 99)."
    ),
    gmap: str = GmapOption,
    gmap_layers: str | None = GmapLayersOption,
    general_model: str | None = GeneralModelOption,
    gmap_unfrozen: bool = GmapUnfrozenOption,
    gmap_cache: bool = GmapCacheOption,
    gmap_indexing: str = GmapIndexingOption,
) -> dict[str, Any] | None:
    """Fine-tune with a 50/50 mixture of the general and domain tokenizers; evaluate with mean pooling."""
    from greenadapt.cli._common import given

    return {"seeds": parse_seeds(seeds, seed, seed_given=given("seed"))}



def _summary(outcome: StageOutcome) -> str:
    manifest = Manifest.of(outcome.manifest, outcome.path)
    stats = manifest.stats
    if stats.get("task") in TASKS and TASKS[stats["task"]].answers_questions:
        return _qa_summary(outcome.path, stats, outcome.skipped)
    metric = manifest.section("config", "task").get("metric", "")
    parts = []
    for split, value in manifest.section("stats", "summary").items():
        text = f"{split} {metric} {100 * value['mean']:.2f}"
        if value.get("n", 1) > 1:
            text += f" ± {100 * value['std']:.2f} ({value['n']} seeds)"
        parts.append(text)
    state = "up to date" if outcome.skipped else "fine-tuned"
    scores = f": {', '.join(parts)} (pool {stats.get('pool')})" if parts else ""
    warnings = "".join(f"\nwarning: {w}" for w in stats.get("warnings") or [])
    return f"{state} {stats.get('task', '')} model in {outcome.path}{scores}{per_type_lines(stats.get('per_type'))}{warnings}"


def per_type_lines(per_type: Mapping[str, Any] | None) -> str:
    """Each split's F1 per entity type, one line a split (seqeval's per-type report, over seeds)."""
    from greenadapt.artifacts.info import per_type_cells

    return "".join(f"\n{split} f1 by entity type: {per_type_cells(kinds)}" for split, kinds in (per_type or {}).items())


def _qa_summary(path: Path, stats: Mapping[str, Any], skipped: bool) -> str:
    parts = [
        f"{split} EM {stats[split]['exact_match']:.2f} F1 {stats[split]['f1']:.2f}"
        for split in ("dev", "test")
        if isinstance(stats.get(split), dict) and stats[split].get("f1") is not None
    ]
    state = "up to date" if skipped else "fine-tuned"
    scores = f": {', '.join(parts)} (pool {stats.get('pool')})" if parts else ""
    warnings = "".join(f"\nwarning: {w}" for w in stats.get("warnings") or [])
    return f"{state} qa model in {path}{scores}{warnings}"
