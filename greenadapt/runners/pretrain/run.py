"""The ``pretrain`` stage and ``pretrain --eval-only``: what the CLI calls.

A pretrain folder (kind ``pretrain``, written through StageRun)::

    manifest.json          config, inputs, held-out losses per evaluation, cost
    config.json, model.safetensors   the domain model with its MLM head (AutoModelForMaskedLM / AutoModel load it)
    tokenizer.json, ...    the training tokenizer's folder files: T̂ for an expanded model (T_LM in general-tokenizer/)
    train_log.jsonl        one line per optimizer step, one per held-out evaluation
    gmap_config.json, gmap_gates.safetensors   with --gmap (GmapModel.from_pretrained reloads the fused model)

Tokenizer: an expanded model (a folder with ``general-tokenizer/``) is
trained on its domain tokenizer T̂ by default, so the added rows are
trained in context (``--tokenizer general`` trains on T_LM instead).

``--gmap``: the encoder of the masked-LM model is fused with a frozen
general model (:class:`greenadapt.modeling.gmap.model.GmapModel` around
``model.base_model``); the MLM head stays on the domain model. The general
model reads the same *masked* input ids (so its memory cannot reveal the
targets), which is why it must share the training tokenizer's vocabulary.

Under torchrun every process trains; only rank 0 writes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.artifacts import kinds
from greenadapt.artifacts.files import write_json
from greenadapt.artifacts.manifest import Manifest
from greenadapt.artifacts.stage import StageOutcome, resource_errors
from greenadapt.errors import ModelError, UsageError
from greenadapt.machine.cores import available_cores
from greenadapt.progress import Progress
from greenadapt.runners.pretrain.data import MixedCorpus, PackedCorpus
from greenadapt.training.job import TrainingStage, training_stage
from greenadapt.training.runtime import TrainingHooks

if TYPE_CHECKING:
    from greenadapt.options import Run
    from greenadapt.runners.pretrain.settings import PretrainSettings

log = logging.getLogger(__name__)

KIND = kinds.PRETRAIN
LOG_FILE = "train_log.jsonl"
_LATER_OPTIONS = {"head_warmup_steps": 0, "train": "all"}  # training options newer than the first pretrain outputs, with their defaults


# --------------------------------------------------------------------------
# Shared pieces: tokenizer, corpora, model


@dataclass
class _Setup:
    ref: Any
    pair: Any  # TokenizerPair
    tokenizer: Any  # the one training reads
    view: str  # "domain" or "general"
    max_length: int


def _setup(ref: Any, folder: Any, tokenizer_choice: str, max_length: int, *, mix: float | None = None) -> _Setup:
    """The tokenizer training reads (``--tokenizer``), checked against the model folder (``ExpandedModel``)."""
    pair = folder.tokenizers
    if tokenizer_choice == "domain" and not pair.has_domain:
        raise UsageError("--tokenizer domain needs a model folder with a domain tokenizer", path=ref.path,
                         hint="pass a folder written by `greenadapt expand`")
    if mix is not None:
        _check_mixable(pair, ref.path)
    view = "domain" if pair.has_domain and tokenizer_choice != "general" else "general"
    tokenizer = pair.domain if view == "domain" else pair.general
    max_length = folder.capped_length(max_length)
    return _Setup(ref, pair, tokenizer, view, max_length)


def _check_mixable(pair: Any, path: Path) -> None:
    """--mix reads both tokenizers' ids with one embedding matrix and one masker: the domain tokenizer
    must extend the general one (every general entry at the same id), as ``expand`` writes it."""
    if not pair.has_domain:
        raise UsageError("--mix needs a model folder with a domain tokenizer", path=path,
                         hint="pass a folder written by `greenadapt expand`")
    domain = pair.domain.get_vocab()
    if any(domain.get(piece) != index for piece, index in pair.general.get_vocab().items()):
        raise UsageError(
            "--mix needs a domain tokenizer that extends the general one, and this folder's does not",
            path=path, hint="pass a folder written by `greenadapt expand`",
        )


def _packed(
    specs: list[str], text_fields: list[str] | None, setup: _Setup, root: Path, heldout: int, workers: int, force: bool,
    progress: Progress, *, tokenizer: Any = None,
) -> tuple[PackedCorpus, dict[str, Any]]:
    from greenadapt.corpus import resolve_corpus
    from greenadapt.runners.pretrain.data import tokenize_corpus

    sources = resolve_corpus(specs, text_fields=text_fields)
    tokenizer = setup.tokenizer if tokenizer is None else tokenizer
    cache = tokenize_corpus(sources, tokenizer, root / "cache", workers=workers, force=force, progress=progress)
    corpus = PackedCorpus.build(cache.array(), setup.max_length, setup.pair.cls_id, setup.pair.sep_id, heldout)
    stats = {"tokens": cache.n_tokens, "lines": cache.lines, "sequences": len(corpus), "heldout_sequences": corpus.n_heldout}
    return corpus, stats


def _training_corpus(
    settings: PretrainSettings, run: Run, setup: _Setup, root: Path, workers: int
) -> tuple[PackedCorpus | MixedCorpus, dict[str, Any]]:
    """The training corpus packed with the training tokenizer, or with both under ``--mix``."""
    packed = partial(_packed, list(settings.corpus), _text_fields(settings), setup, root, settings.heldout, workers,
                     run.force, run.progress)
    corpus, stats = packed()
    if settings.mix is None:
        return corpus, stats
    general_view, general_stats = packed(tokenizer=setup.pair.general)
    mixed_stats = {**stats, "mix": settings.mix, "general_tokenizer": general_stats}
    return MixedCorpus(corpus, general_view, settings.mix, settings.seed), mixed_stats


def _text_fields(settings: PretrainSettings) -> list[str] | None:
    return list(settings.text_fields or ()) or None


def _load_mlm(setup: _Setup) -> Any:
    import transformers

    from greenadapt.artifacts.model_folder import check_vocab_fits
    from greenadapt.artifacts.pretrained import quiet_transformers

    try:
        with quiet_transformers():
            model, info = transformers.AutoModelForMaskedLM.from_pretrained(str(setup.ref.path), output_loading_info=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"cannot load a masked-LM model: {' '.join(str(exc).split())[:200]}", path=setup.ref.path,
                         hint="pass a BERT-style model folder") from None
    missing = [k for k in info.get("missing_keys", []) if not k.endswith("decoder.weight")]
    if missing:
        log.warning(
            "%s has no weights for %d masked-LM head tensor(s) (%s...): they start from a random initialisation"
            " (--head-warmup-steps fits them before the encoder is trained)",
            setup.ref.path, len(missing), missing[0],
        )
    rows = model.get_input_embeddings().weight.shape[0]
    check_vocab_fits(setup.pair, rows, setup.ref.path)
    output = model.get_output_embeddings()
    if output is not None:
        out_rows = output.weight.shape[0]
        bias = getattr(output, "bias", None)
        if out_rows != rows or (bias is not None and bias.shape[0] != rows):
            raise ModelError(
                f"the masked-LM decoder covers {out_rows} tokens (bias {None if bias is None else bias.shape[0]}), the embeddings {rows}",
                path=setup.ref.path,
                hint="the output layer must cover every embedding row; re-run `greenadapt expand` on the original model",
            )
    return model


def _general_model(setup: _Setup, settings: PretrainSettings) -> Any:
    """``--general-model`` resolved and checked against the model (widths, the fused layers) and the training
    tokenizer: before any corpus is read."""
    from greenadapt.artifacts.pretrained import load_fast_tokenizer, resolve_model
    from greenadapt.modeling.gmap.config import GmapConfig
    from greenadapt.modeling.gmap.general_model import check_models

    assert settings.gmap is not None and settings.general_model is not None  # PretrainSettings.check
    general_model = settings.general_model
    general_ref = resolve_model(general_model)
    check_models(GmapConfig(strategy=settings.gmap, layers=settings.fused_layers), setup.ref, general_ref)
    try:
        general_tokenizer = load_fast_tokenizer(general_ref.path)
    except ModelError:
        general_tokenizer = None
    if general_tokenizer is not None and general_tokenizer.get_vocab() != setup.tokenizer.get_vocab():
        raise UsageError(
            f"--general-model {general_model} has another vocabulary than the training tokenizer ({setup.view})",
            hint="the general model reads the same masked ids; for an expanded model pass --tokenizer general",
        )
    return general_ref


def _gmap_model(model: Any, setup: _Setup, strategy: str, layers: tuple[int, ...] | None, general_model: str,
                gates: Path | None = None, *, general_ref: Any = None) -> Any:
    import transformers

    from greenadapt.artifacts.pretrained import quiet_transformers, resolve_model
    from greenadapt.modeling.gmap.config import GmapConfig
    from greenadapt.modeling.gmap.model import GmapModel

    general_ref = general_ref or resolve_model(general_model)
    with quiet_transformers():
        general = transformers.AutoModel.from_pretrained(str(general_ref.path))
    if general.get_input_embeddings().weight.shape[0] < len(setup.tokenizer):
        raise UsageError(f"--general-model {general_model} has fewer embedding rows than the training tokenizer has entries")
    gmap = GmapModel(model.base_model, general, GmapConfig(strategy=strategy, layers=layers, general_model=general_model))
    if gates is not None:
        from safetensors.torch import load_file

        gmap.gates.load_state_dict(load_file(str(gates)), strict=True)
    return gmap


def _save_model(model: Any, gmap: Any, setup: _Setup, folder: Path) -> None:
    from safetensors.torch import save_file

    from greenadapt.artifacts.pretrained import quiet_transformers
    from greenadapt.modeling.gmap.config import CONFIG_FILE, GATES_FILE

    describe = None
    if gmap is not None:
        describe = gmap.describe()
        describe["domain"]["architecture"] = type(model).__name__  # the saved domain model carries the MLM head
        gates = {k: v.detach().to("cpu").contiguous() for k, v in gmap.gates.state_dict().items()}
        gmap.unwrap()
    with resource_errors(folder):
        with quiet_transformers():
            model.save_pretrained(str(folder))
        setup.pair.save(folder, domain=setup.view == "domain")
        if describe is not None:
            if gates:
                save_file(gates, str(folder / GATES_FILE), metadata={"format": "pt"})
            write_json(folder / CONFIG_FILE, describe)


# --------------------------------------------------------------------------
# pretrain


def pretrain_stage(settings: PretrainSettings, run: Run) -> StageOutcome:
    """Continue masked-LM training of ``settings.model`` on ``settings.corpus``; skip when an up-to-date output exists."""

    from greenadapt.artifacts import workspace
    from greenadapt.corpus import resolve_corpus, source_identities
    from greenadapt.runners.setup import prepare_runner

    text_fields = _text_fields(settings)
    corpus_sources = resolve_corpus(list(settings.corpus), text_fields=text_fields)  # bad input fails before loading torch
    general_sources = resolve_corpus(list(settings.general_corpus), text_fields=text_fields) if settings.general_corpus else []
    root = workspace.workdir(run.workdir)
    corpus = list(settings.corpus)
    prepared = prepare_runner(
        settings, run, kind=KIND, data=[*corpus, *(settings.general_corpus or [])],
        default_out=lambda ref: workspace.stage_dir(root, corpus, workspace.model_folder_name(root, corpus, ref), KIND))
    setup = _setup(prepared.ref, prepared.folder, settings.tokenizer, settings.max_length, mix=settings.mix)
    general_ref = _general_model(setup, settings) if settings.fuses else None
    workers = settings.workers or available_cores()
    config = {
        "train": settings.recorded(),  # options added later count only when used: outputs made before them stay up to date
        "max_length": setup.max_length,
        "heldout": settings.heldout,
        "masking": {"probability": settings.mask_probability, "whole_word": settings.whole_word_masking, "split": "80/10/10"},
        "tokenizer": setup.view,
        **({"mix": settings.mix} if settings.mix is not None else {}),  # only when used: earlier outputs stay up to date
        "text_fields": text_fields,
        "gmap": None if not settings.fuses else {"strategy": settings.gmap, "layers": settings.fused_layers,
                                                 "general_model": settings.general_model},
        "model": setup.ref.name,
    }
    inputs = [prepared.identity, *({"role": "corpus", **i} for i in source_identities(corpus_sources)),
              *({"role": "general-corpus", **i} for i in source_identities(general_sources))]
    with training_stage(KIND, prepared.out, config, inputs, settings, run) as job:
        if job.up_to_date is not None:
            return job.up_to_date
        return job.commit(_train(settings, run, setup, root, workers, job, general_ref))


def _train(settings: PretrainSettings, run: Run, setup: Any, root: Path, workers: int, job: TrainingStage,
           general_ref: Any) -> dict[str, Any]:
    """Pack the corpora, train (G-MAP's memory from ``general_ref``, when given), save the model into the stage folder
    (rank 0); the manifest's stats."""
    import torch
    from transformers import set_seed

    from greenadapt.runners.pretrain.data import Masker
    from greenadapt.runners.pretrain.train import build_masked_lm, heldout_loss, pretrain

    ctx = job.ctx
    corpus, corpus_stats = _training_corpus(settings, run, setup, root, workers)
    general, general_stats = None, None
    if settings.general_corpus:
        general, general_stats = _packed(list(settings.general_corpus), _text_fields(settings), setup, root, settings.heldout,
                                         workers, run.force, run.progress)
    set_seed(settings.seed)
    model = _load_mlm(setup)
    gmap = _gmap_model(model, setup, settings.gmap, settings.fused_layers, settings.general_model,  # type: ignore[arg-type]
                       general_ref=general_ref) if general_ref is not None else None
    mlm = build_masked_lm(model, gmap)
    vocab_rows = model.get_input_embeddings().weight.shape[0]
    masker = Masker.for_tokenizer(setup.tokenizer, vocab_rows, whole_word=settings.whole_word_masking,
                                  probability=settings.mask_probability)

    def evaluate(step: int) -> dict[str, Any]:
        kwargs = {"pad_id": setup.pair.pad_id, "batch_size": settings.eval_batch_size, "precision": settings.precision}
        result = {"domain": heldout_loss(mlm, corpus, masker, ctx, **kwargs)}
        if general is not None:
            result["general"] = heldout_loss(mlm, general, masker, ctx, **kwargs)
        return result

    result = pretrain(
        mlm, corpus, masker, settings, ctx, pad_id=setup.pair.pad_id,
        n_base_rows=setup.pair.general_vocab_size if setup.pair.has_domain else vocab_rows, evaluate=evaluate,
        hooks=TrainingHooks(log_path=job.tmp / LOG_FILE if job.tmp is not None else None, progress=run.progress,
                            checkpoint=job.checkpointing(), stop=job.stop),
    )
    if job.tmp is not None:
        _save_model(model.to("cpu"), gmap, setup, job.tmp)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    evaluations = result.evaluations
    return {
        "steps": result.steps,
        "epochs": result.epochs,
        "tokens_trained": result.tokens,
        "train_seconds": round(result.seconds, 3),
        "eval_seconds": round(result.eval_seconds, 3),
        "tokens_per_second": round(result.tokens_per_second, 1),
        "processes": ctx.world,
        "device": str(ctx.device),
        "corpus": corpus_stats,
        "general_corpus": general_stats,
        "tokenizer": setup.view,
        "evaluations": evaluations,
        "heldout_before": evaluations[0] if evaluations else None,
        "heldout_after": evaluations[-1] if evaluations else None,
        "gmap": None if gmap is None else {"plan": gmap.plan.describe()},
    }


# --------------------------------------------------------------------------
# --eval-only


def run_eval_only(settings: PretrainSettings, run: Run) -> dict[str, Any]:
    """Held-out masked-LM loss and perplexity of a model on each corpus (the first ``heldout`` sequences)."""
    import json

    from greenadapt.artifacts import workspace
    from greenadapt.machine.devices import pick_device
    from greenadapt.modeling.gmap.config import CONFIG_FILE, GATES_FILE, GmapConfig
    from greenadapt.runners.pretrain.data import Masker
    from greenadapt.runners.pretrain.train import build_masked_lm, heldout_loss
    from greenadapt.compute.distributed import DistContext

    if run.out is not None:
        raise UsageError("--out does not apply to --eval-only", hint="pass each corpus to score as --corpus")
    from greenadapt.artifacts.model_folder import ExpandedModel
    from greenadapt.artifacts.pretrained import resolve_model

    ref = resolve_model(settings.model)
    setup = _setup(ref, ExpandedModel.open(ref), settings.tokenizer, settings.max_length)
    root = workspace.workdir(run.workdir)
    workers = settings.workers or available_cores()
    ctx = DistContext(device=pick_device(settings.device))
    import torch

    torch.manual_seed(0)
    model = _load_mlm(setup)
    gmap = None
    gmap_file = setup.ref.path / CONFIG_FILE
    if gmap_file.is_file():
        try:
            doc = json.loads(gmap_file.read_text(encoding="utf-8"))
            gconfig = GmapConfig.from_dict(doc["gmap"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelError(f"malformed G-MAP configuration: {exc}", path=gmap_file) from None
        general = settings.general_model or gconfig.general_model
        if not general:
            raise UsageError("this G-MAP model does not record its general model", path=gmap_file, hint="pass --general-model")
        gates = setup.ref.path / GATES_FILE
        gmap = _gmap_model(model, setup, gconfig.strategy, gconfig.layers, general, gates if gates.is_file() else None)
    mlm = build_masked_lm(model, gmap).to(ctx.device).eval()
    vocab_rows = model.get_input_embeddings().weight.shape[0]
    masker = Masker.for_tokenizer(setup.tokenizer, vocab_rows, whole_word=settings.whole_word_masking,
                                  probability=settings.mask_probability)
    results: dict[str, Any] = {}
    for spec in settings.corpus:
        corpus, stats = _packed([spec], _text_fields(settings), setup, root, settings.heldout, workers, False, run.progress)
        scores = heldout_loss(mlm, corpus, masker, ctx, pad_id=setup.pair.pad_id, batch_size=settings.eval_batch_size,
                              precision=settings.precision)
        results[spec] = {**scores, "corpus_tokens": stats["tokens"], "corpus_sequences": stats["sequences"]}
    return {
        "model": str(setup.ref.path),
        "tokenizer": setup.view,
        "max_length": setup.max_length,
        "heldout": settings.heldout,
        "masking": {"probability": settings.mask_probability, "whole_word": settings.whole_word_masking, "seed": "fixed"},
        "gmap": gmap is not None,
        "results": results,
    }


def summary_line(outcome: StageOutcome) -> str:
    stats = Manifest.of(outcome.manifest, outcome.path).stats
    if outcome.skipped:
        return f"pretrain: up to date -> {outcome.path}"
    before, after = stats.get("heldout_before") or {}, stats.get("heldout_after") or {}
    text = f"pretrain: {stats.get('steps', 0)} steps, {stats.get('tokens_per_second', 0):,.0f} tokens/s"
    if "domain" in before and "domain" in after:
        text += f"; held-out loss {before['domain']['loss']:.3f} -> {after['domain']['loss']:.3f}"
    if "general" in before and "general" in after:
        text += f" (general corpus {before['general']['loss']:.3f} -> {after['general']['loss']:.3f})"
    return f"{text} -> {outcome.path}"


def run_pretrain(settings: PretrainSettings, run: Run) -> Any:
    """``greenadapt pretrain``: the pretrained model folder (or, with ``eval_only``, the held-out scores) from the command's settings."""
    return run_eval_only(settings, run) if settings.eval_only else pretrain_stage(settings, run)
