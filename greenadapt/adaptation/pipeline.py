"""``adapt``: the three CPU stages in one call (w2v -> align -> expand).

Each stage keeps its own folder, manifest and skip logic, so a rerun with
unchanged inputs redoes nothing and a change in one option redoes only
the stages downstream of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from greenadapt.adaptation.methods import DEFAULT_METHOD, MethodOptions, get_method
from greenadapt.adaptation.w2v import W2VOptions
from greenadapt.artifacts.stage import StageOutcome
from greenadapt.defaults import DEFAULT_MIN_COUNT_NEW, DEFAULT_SEED, check_seed
from greenadapt.options import DEFAULT_RUN, Run

if TYPE_CHECKING:
    from greenadapt.adaptation.settings import AdaptSettings

log = logging.getLogger(__name__)


@dataclass
class AdaptOptions:
    w2v: W2VOptions = field(default_factory=W2VOptions)
    align_method: str = DEFAULT_METHOD
    method_options: MethodOptions = field(default_factory=MethodOptions)
    max_new: int | None = None
    min_count_new: int = DEFAULT_MIN_COUNT_NEW
    seed: int = DEFAULT_SEED
    # word2vec draws whose aligned rows are averaged (draw j with --seed + j): a gain that depends less on one draw
    w2v_draws: int = 1


MAX_W2V_DRAWS = 16


@dataclass(frozen=True)
class AdaptOutcome:
    w2v: StageOutcome
    align: StageOutcome
    expand: StageOutcome

    @property
    def stages(self) -> list[tuple[str, StageOutcome]]:
        return [("w2v", self.w2v), ("align", self.align), ("expand", self.expand)]

    @property
    def path(self) -> Path:
        """The adapted model's folder (what finetune, compare and transformers take)."""
        return self.expand.path

    def __repr__(self) -> str:
        states = ", ".join(f"{name} {'skipped' if stage.skipped else 'done'}" for name, stage in self.stages)
        return f"<adapted model at {str(self.path)!r} ({states})>"


def adapt_stages(
    corpus: Sequence[str],
    *,
    model: str | None,
    options: AdaptOptions,
    text_fields: Sequence[str] | None = None,
    run: Run = DEFAULT_RUN,
) -> AdaptOutcome:
    """Run w2v, align and expand for ``corpus`` on ``model``.

    Intermediate folders live in the workspace; ``out`` (default: the
    workspace's ``expand`` folder) receives the adapted model.
    """
    from greenadapt.adaptation.align import align_stage
    from greenadapt.adaptation.expand import expand_stage
    from greenadapt.adaptation.vectors import keep_whole_reads
    from greenadapt.adaptation.w2v import w2v_stage

    check_adapt(corpus, model=model, options=options, workdir=run.workdir, out=run.out, force=run.force)
    # The method decides the vectors: word2vec, the base model's contextual ones (context-mean), or none at all
    # (subword-mean, random: the corpus counts only).
    source = get_method(options.align_method).vector_source
    w2v_options = replace(options.w2v, vectors=source != "none", source="context" if source == "context" else "word2vec")
    in_workspace, beside_w2v = replace(run, out=None), replace(run, out=None, workdir=None)  # only expand goes to ``out``
    w2v = w2v_stage(corpus, model=model, options=w2v_options, text_fields=text_fields, run=in_workspace)
    # Downstream stages take the model the w2v manifest recorded, so the
    # three stages can never silently disagree about it. The vectors align reads whole are kept for expand,
    # which would otherwise parse the same file again.
    with keep_whole_reads():
        align = align_stage(w2v=w2v.path, model=model, method=options.align_method, method_options=options.method_options,
                            seed=options.seed, run=beside_w2v)
        others = []
        for draw in range(1, options.w2v_draws):  # the same command with another seed, each in its own folders
            other = w2v_stage(corpus, model=model, options=replace(w2v_options, seed=w2v_options.seed + draw), text_fields=text_fields,
                              run=in_workspace)
            others.append(align_stage(w2v=other.path, model=model, method=options.align_method, method_options=options.method_options,
                                      seed=options.seed, run=beside_w2v).path)
        expand = expand_stage(align=align.path, also_align=others, model=model, max_new=options.max_new,
                              min_count=options.min_count_new, seed=options.seed, run=replace(run, workdir=None))
    return AdaptOutcome(w2v=w2v, align=align, expand=expand)


def check_adapt(
    corpus: Sequence[str], *, model: str | None, options: AdaptOptions, workdir: Path | None, out: Path | None, force: bool
) -> None:
    """Every option of the three stages, before the first one trains: a bad one costs a second, not a w2v run."""
    from greenadapt.artifacts.model_weights import check_weights_load_safely
    from greenadapt.artifacts import workspace
    from greenadapt.artifacts.destination import Protected, check_destination, corpus_reads, protected
    from greenadapt.artifacts.pretrained import check_encoder_config, hidden_size, load_backend_tokenizer, resolve_model
    from greenadapt.errors import UsageError

    options.w2v.check()
    get_method(options.align_method)
    if not 1 <= options.w2v_draws <= MAX_W2V_DRAWS:
        raise UsageError(f"--w2v-draws {options.w2v_draws}: from 1 to {MAX_W2V_DRAWS}")
    if options.w2v_draws > 1 and get_method(options.align_method).vector_source != "word2vec":
        raise UsageError(f"--method {options.align_method} uses no word2vec vectors, so there are no draws to average",
                         hint="--w2v-draws is for lstsq, focus, hybrid and identity")
    check_seed(options.w2v.seed + options.w2v_draws - 1, option="--seed")
    options.method_options.check()
    if options.max_new is not None and options.max_new < 0:
        raise UsageError(f"--max-new must be >= 0, got {options.max_new}")
    if options.min_count_new < 1:
        raise UsageError(f"--min-count-new must be >= 1, got {options.min_count_new}")
    ref = resolve_model(model)
    check_encoder_config(ref.path)  # a config that cannot make the model, said before word2vec trains
    method = get_method(options.align_method)
    if method.vectors_are_rows and options.w2v.dim is not None and options.w2v.dim != hidden_size(ref):
        raise UsageError(
            f"--method {method.name} uses the word vectors as rows as they are, so --dim {options.w2v.dim} must be the model's"
            f" hidden size {hidden_size(ref)}",
            hint=f"pass --dim {hidden_size(ref)} (or leave --dim out), or choose another --method",
        )
    load_backend_tokenizer(ref.path)  # a folder without its tokenizer, said now rather than after word2vec
    check_weights_load_safely(ref.path)
    root = workspace.workdir(workdir)
    if out is not None:
        slug = workspace.model_folder_name(root, list(corpus), ref)
        upstream = [workspace.stage_dir(root, list(corpus), slug, kind) for kind in ("w2v", "align")]
        check_destination(
            out, kind="expand", force=force, workspace=root,
            reads=[
                *protected("the base --model", ref.path),
                *corpus_reads(corpus),
                # Whether or not they exist yet: w2v and align will write there before expand runs.
                *(Protected(f"the {kind} stage's folder", path) for kind, path in zip(("w2v", "align"), upstream)),
            ],
        )


def run_adapt(settings: AdaptSettings, run: Run) -> AdaptOutcome:
    """``greenadapt adapt``: word2vec, align and expand from one command's settings."""
    options = AdaptOptions(
        w2v=W2VOptions(dim=settings.dim, epochs=settings.epochs, min_count=settings.min_count, max_vocab=settings.max_vocab,
                       workers=settings.workers, seed=settings.seed, context=settings.context_options()),
        align_method=settings.method, method_options=settings.method_options(), max_new=settings.max_new,
        min_count_new=settings.min_count_new, seed=settings.seed, w2v_draws=settings.w2v_draws,
    )
    return adapt_stages(list(settings.corpus), model=settings.model, options=options, text_fields=list(settings.text_fields or ()) or None, run=run)
