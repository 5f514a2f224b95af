"""`greenadapt pretrain`: continued masked-LM pretraining (DAPT), optionally with G-MAP memory; --eval-only."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from greenadapt import api
from greenadapt.api import default_of
from greenadapt.cli._common import (
    optimizer_options,
    api_command,
    emit,
)
from greenadapt.cli.finetune import CompileOption


@api_command("pretrain", api.pretrain, lambda result, as_json: _show(result, as_json), renames={"text_field": "text_fields"}, groups=(optimizer_options(api.pretrain),))
def pretrain_command(
    corpus: list[str] = typer.Option(
        ..., "--corpus", "-c", help="Registered corpus name, file, folder, glob or URL, as for w2v. Repeatable (--eval-only: each is scored on its own)."
    ),
    model: str | None = typer.Option(None, "--model", "-m", help="Model folder (an expanded one too) or Hub id (default: the bundled MiniLM)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output model folder (default: WORKDIR/CORPUS/MODEL/pretrain)."),
    eval_only: bool = typer.Option(False, "--eval-only", help="Only report held-out masked-LM loss/perplexity of --model on each --corpus (JSON)."),
    general_corpus: list[str] | None = typer.Option(None, "--general-corpus", help="A general corpus whose held-out loss is tracked too (forgetting)."),
    text_field: list[str] | None = typer.Option(None, "--text-field", help="Field(s) holding the text in JSON lines/CSV sources (default: text)."),
    max_length: int = typer.Option(default_of(api.pretrain, "max_length"), "--max-length", help="Wordpieces per packed sequence, [CLS] and [SEP] included (512 is typical)."),
    heldout: int = typer.Option(default_of(api.pretrain, "heldout"), "--heldout", help="The first N sequences are held out for evaluation (at most a tenth of the corpus)."),
    whole_word_masking: bool = typer.Option(default_of(api.pretrain, "whole_word_masking"), "--whole-word-masking", help="Mask whole words (a piece and its ## continuations)."),
    mask_probability: float = typer.Option(default_of(api.pretrain, "mask_probability"), "--mask-probability", help="Share of the non-special tokens that become targets (80% [MASK], 10% random, 10% unchanged)."),
    tokenizer: str = typer.Option(default_of(api.pretrain, "tokenizer"), "--tokenizer", help="auto (the domain tokenizer of an expanded model, else the only one), domain or general."),
    mix: float | None = typer.Option(
        None, "--mix", min=0.0, max=1.0,
        help="Expanded models: read this share of the sequences with the domain tokenizer and the rest with the general one "
        "(the fine-tuning's mixture; 0.5 is the recipe after `adapt`). Default: one tokenizer (--tokenizer).",
    ),
    epochs: int = typer.Option(default_of(api.pretrain, "epochs"), "--epochs", help="Passes over the training sequences."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Stop after this many optimizer steps (overrides --epochs)."),
    batch_size: int = typer.Option(default_of(api.pretrain, "batch_size"), "--batch-size", help="Sequences per optimizer step, over all processes."),
    grad_accum: int = typer.Option(default_of(api.pretrain, "grad_accum"), "--grad-accum", help="Micro-batches per step and process (gradient accumulation)."),
    lr: float = typer.Option(default_of(api.pretrain, "lr"), "--lr", help="Peak learning rate (AdamW, linear warm-up and decay)."),
    seed: int = typer.Option(default_of(api.pretrain, "seed"), "--seed", help="Random seed (order, masking, dropout)."),
    train_embeddings: str = typer.Option(default_of(api.pretrain, "train_embeddings"), "--train-embeddings", help="Word embeddings to train: all, new (rows added by expand only) or none."),
    train: str = typer.Option(
        default_of(api.pretrain, "train"), "--train", metavar="WHAT",
        help="all: every parameter (DAPT); new-rows: only the rows expand added, encoder, original rows and head frozen (the head trains during --head-warmup-steps).",
    ),
    head_warmup_steps: int = typer.Option(
        default_of(api.pretrain, "head_warmup_steps"), "--head-warmup-steps", min=0,
        help="The first N steps train the masked-LM head alone (encoder and embeddings frozen): for models shipped without an MLM head, such as the bundled MiniLM.",
    ),
    eval_every: int | None = typer.Option(None, "--eval-every", help="Held-out evaluation every N steps (always before and after training)."),
    eval_batch_size: int = typer.Option(default_of(api.pretrain, "eval_batch_size"), "--eval-batch-size", help="Sequences per evaluation batch."),
    gmap: str | None = typer.Option(None, "--gmap", help="G-MAP memory during training: single, multi, gated or chunk (needs --general-model)."),
    gmap_layers: str | None = typer.Option(None, "--gmap-layers", help='Fused domain layers, 1-based, e.g. "6,12" (default: the paper\'s).'),
    general_model: str | None = typer.Option(None, "--general-model", help="The frozen general model of --gmap (same vocabulary as the training tokenizer)."),
    device: str = typer.Option(default_of(api.pretrain, "device"), "--device", help="auto, cpu, cuda, cuda:N or mps."),
    precision: str = typer.Option(default_of(api.pretrain, "precision"), "--precision", help="auto (CUDA: bf16, else fp16; CPU: bf16 where the CPU has it natively (avx512_bf16, AMX), else fp32), fp32, bf16, fp16."),
    compile: bool = CompileOption,
    workers: int | None = typer.Option(None, "--workers", min=1, help="Pre-tokenizing processes (default: the cores this process may use, or $GREENADAPT_WORKERS)."),
    save_every: int | None = typer.Option(None, "--save-every", min=1, help="Save a resumable checkpoint every N steps (in <out>.checkpoint/)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the checkpoint an interrupted run left (SIGTERM saves one and exits with code 99)."),
) -> dict[str, Any] | None:
    """Continue masked-LM training on a domain corpus (the DAPT baseline); output loads in finetune, qa, expand and transformers."""
    return None


def _show(result: Any, as_json: bool) -> None:
    if isinstance(result, dict):  # --eval-only: the held-out losses
        if as_json:
            sys.stdout.write(json.dumps(result, indent=2) + "\n")
        else:
            for name, scores in result["results"].items():
                sys.stdout.write(f"{name}: held-out MLM loss {scores['loss']:.4f}, perplexity {scores['perplexity']:.2f} ({scores['targets']} targets)\n")
        return
    if result.manifest:  # a non-zero rank under torchrun: rank 0 reports
        from greenadapt.runners.pretrain.run import summary_line

        emit(result.manifest, summary_line(result), as_json=as_json)
