"""``adapt``: the three CPU stages in one call (w2v -> align -> expand).

Each stage keeps its own folder, manifest and skip logic, so a rerun with
unchanged inputs redoes nothing and a change in one option redoes only
the stages downstream of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import logging
from dataclasses import dataclass, replace
from pathlib import Path

from greenadapt.adaptation.methods import get_method
from greenadapt.artifacts.stage import StageOutcome
from greenadapt.options import DEFAULT_RUN, Run

if TYPE_CHECKING:
    from greenadapt.adaptation.settings import AdaptSettings

log = logging.getLogger(__name__)


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


def run_adapt(settings: AdaptSettings, run: Run = DEFAULT_RUN) -> AdaptOutcome:
    """``greenadapt adapt``: w2v, align and expand for ``settings.corpus`` on ``settings.model``, each stage receiving these settings.

    Intermediate folders live in the workspace; ``run.out`` (default: the workspace's ``expand`` folder) receives the adapted model.
    """
    from greenadapt.adaptation.align import align_stage
    from greenadapt.adaptation.expand import expand_stage
    from greenadapt.adaptation.vectors import keep_whole_reads
    from greenadapt.adaptation.w2v import w2v_stage

    check_adapt(settings, run)
    # The method decides the vectors: word2vec, the base model's contextual ones (context-mean), or none at all
    # (subword-mean, random: the corpus counts only).
    source = get_method(settings.method).vector_source
    in_workspace, beside_w2v = replace(run, out=None), replace(run, out=None, workdir=None)  # only expand goes to ``out``
    w2v = w2v_stage(settings, in_workspace, source=source)
    # Downstream stages take the model the w2v manifest recorded, so the
    # three stages can never silently disagree about it. The vectors align reads whole are kept for expand,
    # which would otherwise parse the same file again.
    with keep_whole_reads():
        align = align_stage(w2v=w2v.path, model=settings.model, method=settings.method, method_options=settings, seed=settings.seed,
                            run=beside_w2v)
        others = []
        for draw in range(1, settings.w2v_draws):  # the same command with another seed, each in its own folders
            other = w2v_stage(settings.replaced(seed=settings.seed + draw), in_workspace, source=source)
            others.append(align_stage(w2v=other.path, model=settings.model, method=settings.method, method_options=settings,
                                      seed=settings.seed, run=beside_w2v).path)
        expand = expand_stage(align=align.path, also_align=others, model=settings.model, rows=settings,
                              min_count=settings.min_count_new, seed=settings.seed, run=replace(run, workdir=None))
    return AdaptOutcome(w2v=w2v, align=align, expand=expand)


def check_adapt(settings: AdaptSettings, run: Run) -> None:
    """What needs the model, before the first stage trains: a bad combination costs a second, not a w2v run (each option's
    own checks ran when the settings were made)."""
    from greenadapt.artifacts.model_weights import check_weights_load_safely
    from greenadapt.artifacts import workspace
    from greenadapt.artifacts.destination import Protected, check_destination, corpus_reads, protected
    from greenadapt.artifacts.pretrained import check_encoder_config, hidden_size, load_backend_tokenizer, resolve_model
    from greenadapt.errors import UsageError

    ref = resolve_model(settings.model)
    check_encoder_config(ref.path)  # a config that cannot make the model, said before word2vec trains
    method = get_method(settings.method)
    if method.vectors_are_rows and settings.dim is not None and settings.dim != hidden_size(ref):
        raise UsageError(
            f"--method {method.name} uses the word vectors as rows as they are, so --dim {settings.dim} must be the model's"
            f" hidden size {hidden_size(ref)}",
            hint=f"pass --dim {hidden_size(ref)} (or leave --dim out), or choose another --method",
        )
    load_backend_tokenizer(ref.path)  # a folder without its tokenizer, said now rather than after word2vec
    check_weights_load_safely(ref.path)
    corpus, workdir, out, force = list(settings.corpus), run.workdir, run.out, run.force
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
