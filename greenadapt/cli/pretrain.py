"""`greenadapt pretrain`: continued masked-LM pretraining (DAPT), optionally with G-MAP memory; --eval-only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from greenadapt.defaults import DEFAULT_SEED
from greenadapt.cli import app
from greenadapt.cli.finetune import CompileOption
from greenadapt.tasks.mlm import MLM
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


@app.command("pretrain")
def pretrain_command(
    corpus: list[str] = typer.Option(
        ..., "--corpus", "-c", help="Registered corpus name, file, folder, glob or URL, as for w2v. Repeatable (--eval-only: each is scored on its own)."
    ),
    model: str | None = typer.Option(None, "--model", "-m", help="Model folder (an expanded one too) or Hub id (default: the bundled MiniLM)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output model folder (default: WORKDIR/CORPUS/MODEL/pretrain)."),
    eval_only: bool = typer.Option(False, "--eval-only", help="Only report held-out masked-LM loss/perplexity of --model on each --corpus (JSON)."),
    general_corpus: list[str] | None = typer.Option(None, "--general-corpus", help="A general corpus whose held-out loss is tracked too (forgetting)."),
    text_field: list[str] | None = typer.Option(None, "--text-field", help="Field(s) holding the text in JSON lines/CSV sources (default: text)."),
    max_length: int = typer.Option(MLM.defaults.max_length, "--max-length", help="Wordpieces per packed sequence, [CLS] and [SEP] included (512 is typical)."),
    heldout: int = typer.Option(256, "--heldout", help="The first N sequences are held out for evaluation (at most a tenth of the corpus)."),
    whole_word_masking: bool = typer.Option(False, "--whole-word-masking", help="Mask whole words (a piece and its ## continuations)."),
    mask_probability: float = typer.Option(0.15, "--mask-probability", help="Share of the non-special tokens that become targets (80% [MASK], 10% random, 10% unchanged)."),
    tokenizer: str = typer.Option("auto", "--tokenizer", help="auto (the domain tokenizer of an expanded model, else the only one), domain or general."),
    mix: float | None = typer.Option(
        None, "--mix", min=0.0, max=1.0,
        help="Expanded models: read this share of the sequences with the domain tokenizer and the rest with the general one "
        "(the fine-tuning's mixture; 0.5 is the recipe after `adapt`). Default: one tokenizer (--tokenizer).",
    ),
    epochs: int = typer.Option(MLM.defaults.epochs, "--epochs", help="Passes over the training sequences."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Stop after this many optimizer steps (overrides --epochs)."),
    batch_size: int = typer.Option(MLM.defaults.batch_size, "--batch-size", help="Sequences per optimizer step, over all processes."),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-batches per step and process (gradient accumulation)."),
    lr: float = typer.Option(MLM.defaults.lr, "--lr", help="Peak learning rate (AdamW, linear warm-up and decay)."),
    warmup: float = typer.Option(0.1, "--warmup", help="Fraction of the steps spent warming up."),
    weight_decay: float = typer.Option(0.01, "--weight-decay", help="AdamW weight decay."),
    seed: int = typer.Option(DEFAULT_SEED, "--seed", help="Random seed (order, masking, dropout)."),
    train_embeddings: str = typer.Option("all", "--train-embeddings", help="Word embeddings to train: all, new (rows added by expand only) or none."),
    train: str = typer.Option(
        "all", "--train", metavar="WHAT",
        help="all: every parameter (DAPT); new-rows: only the rows expand added, encoder, original rows and head frozen (the head trains during --head-warmup-steps).",
    ),
    head_warmup_steps: int = typer.Option(
        0, "--head-warmup-steps", min=0,
        help="The first N steps train the masked-LM head alone (encoder and embeddings frozen): for models shipped without an MLM head, such as the bundled MiniLM.",
    ),
    eval_every: int | None = typer.Option(None, "--eval-every", help="Held-out evaluation every N steps (always before and after training)."),
    eval_batch_size: int = typer.Option(32, "--eval-batch-size", help="Sequences per evaluation batch."),
    gmap: str | None = typer.Option(None, "--gmap", help="G-MAP memory during training: single, multi, gated or chunk (needs --general-model)."),
    gmap_layers: str | None = typer.Option(None, "--gmap-layers", help='Fused domain layers, 1-based, e.g. "6,12" (default: the paper\'s).'),
    general_model: str | None = typer.Option(None, "--general-model", help="The frozen general model of --gmap (same vocabulary as the training tokenizer)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda, cuda:N or mps."),
    precision: str = typer.Option("auto", "--precision", help="auto (bf16, else fp16 on CUDA; fp32 on CPU), fp32, bf16, fp16."),
    compile: bool = CompileOption,
    workers: int | None = typer.Option(None, "--workers", min=1, help="Pre-tokenizing processes (default: the cores this process may use, or $GREENADAPT_WORKERS)."),
    save_every: int | None = typer.Option(None, "--save-every", min=1, help="Save a resumable checkpoint every N steps (in <out>.checkpoint/)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the checkpoint an interrupted run left (SIGTERM saves one and exits with code 99)."),
    workdir: Path | None = WorkdirOption,
    force: bool = ForceOption,
    wait: bool = WaitOption,
    as_json: bool = JsonOption,
    quiet: bool = QuietOption,
    verbose: bool = VerboseOption,
) -> None:
    """Continue masked-LM training on a domain corpus (the DAPT baseline); output loads in finetune, qa, expand and transformers."""
    setup_logging(quiet=quiet, verbose=verbose)
    from greenadapt.gmap.config import parse_layers
    from greenadapt.pretrain.run import EvalOptions, PretrainOptions, run_eval_only, run_pretrain, summary_line
    from greenadapt.pretrain.train import PretrainConfig

    layers = parse_layers(gmap_layers) if gmap_layers is not None else None
    if eval_only:
        from greenadapt.errors import UsageError

        training_only = {"--out": out, "--gmap": gmap, "--general-corpus": general_corpus, "--max-steps": max_steps, "--save-every": save_every}
        given = [flag for flag, value in training_only.items() if value] + (["--resume"] if resume else [])
        if given:
            raise UsageError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --eval-only", hint="pass each corpus to score as --corpus")
        evaluation = EvalOptions(
            corpora=list(corpus), model=model, workdir=workdir, text_fields=text_field or None, max_length=max_length, heldout=heldout,
            whole_word_masking=whole_word_masking, mask_probability=mask_probability, tokenizer=tokenizer, general_model=general_model,
            device=device, batch_size=eval_batch_size, precision=precision, workers=workers,
        )
        with progress_for(quiet) as progress:
            report = run_eval_only(evaluation, progress)
        if as_json:
            sys.stdout.write(json.dumps(report, indent=2) + "\n")
        else:
            for name, scores in report["results"].items():
                sys.stdout.write(f"{name}: held-out MLM loss {scores['loss']:.4f}, perplexity {scores['perplexity']:.2f} ({scores['targets']} targets)\n")
        return
    training = PretrainConfig(
        batch_size=batch_size,
        grad_accum=grad_accum,
        lr=lr,
        epochs=epochs,
        max_steps=max_steps,
        warmup=warmup,
        weight_decay=weight_decay,
        seed=seed,
        train_embeddings=train_embeddings,
        precision=precision,
        compile=compile,
        eval_batch_size=eval_batch_size,
        eval_every=eval_every,
        head_warmup_steps=head_warmup_steps,
        train=train,
    )
    options = PretrainOptions(
        corpus=list(corpus),
        model=model,
        out=out,
        workdir=workdir,
        text_fields=text_field or None,
        training=training,
        max_length=max_length,
        heldout=heldout,
        whole_word_masking=whole_word_masking,
        mask_probability=mask_probability,
        tokenizer=tokenizer,
        mix=mix,
        general_corpus=general_corpus or None,
        gmap=gmap,
        gmap_layers=layers,
        general_model=general_model,
        device=device,
        workers=workers,
        force=force,
        wait=wait,
        save_every=save_every,
        resume=resume,
    )
    with progress_for(quiet) as progress:
        outcome = run_pretrain(options, progress)
    if not outcome.manifest:  # a non-zero rank under torchrun: rank 0 reports
        return
    emit(outcome.manifest, summary_line(outcome), as_json=as_json)
