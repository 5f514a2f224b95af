"""A second view of a model's own vocabulary: no corpus and no new rows (``greenadapt second-view``, issue 64).

An expanded model scores above its base only as the mean of its two tokenizers' views; each view alone is below
base (docs/study.md). So part of the gain may be any second view averaged at test time, not the domain rows. This
makes that control, and a method of its own: the model's tokenizer (T_LM, in ``general-tokenizer/``) and, as the
second tokenizer, the same vocabulary made never to produce a seeded fraction ``drop`` of its pieces of two
characters or more (each family its own way: :meth:`TokenizerFamily.write_without`; every other id unchanged).
Words with a dropped piece are cut otherwise (``disease`` -> ``dis ##ease``): a fixed alternative segmentation,
as subword regularization's dropout draws at random. The weights are the model's, untouched.

The folder is a two-tokenizer folder like ``expand``'s, so ``finetune`` trains it on both views and every
reader mean-pools both views (predict, evaluate, ensembles, compare) with no change.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from greenadapt.artifacts import kinds
from greenadapt.artifacts.stage import StageOutcome, StageRun, resource_errors
from greenadapt.errors import UsageError

if TYPE_CHECKING:
    from greenadapt.adaptation.domain_tokenizer import GeneralTokenizer
    from greenadapt.adaptation.settings import SecondViewSettings
    from greenadapt.options import Run

log = logging.getLogger(__name__)

_VIEW_STREAM = 0x76696577  # the random stream that picks the dropped pieces
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json")


def dropped_pieces(general: GeneralTokenizer, drop: float, seed: int) -> set[str]:
    """The entries the second view does without: each droppable piece with probability ``drop`` (seeded, in the
    vocabulary's own order, so one seed gives one view on every machine)."""
    special = set(general.added) | {str(t.get("content")) for t in general.spec.get("added_tokens") or [] if isinstance(t, dict)}
    candidates = [token for token, _ in sorted(general.vocab.items(), key=lambda item: item[1])
                  if token not in special and general.family.droppable(token)]
    chosen = np.random.default_rng([seed, _VIEW_STREAM]).random(len(candidates)) < drop
    return {token for token, keep in zip(candidates, chosen, strict=True) if keep}


def second_view_stage(settings: SecondViewSettings, run: Run) -> StageOutcome:
    """Write the two-tokenizer folder of ``settings.model`` with its second view (see the module's docstring)."""
    from greenadapt.adaptation.domain_tokenizer import TOKENIZER_FILES, copy_general_tokenizer, load_general_tokenizer
    from greenadapt.adaptation.model_files import copy_other_files
    from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR
    from greenadapt.artifacts.pretrained import resolve_model
    from greenadapt.artifacts.workspace import workdir as workspace

    ref = resolve_model(settings.model)
    if (ref.path / GENERAL_TOKENIZER_DIR).is_dir():
        raise UsageError("this model already has two tokenizers", path=ref.path, hint="give the model it was made from")
    weights = [p for pattern in WEIGHT_PATTERNS for p in sorted(ref.path.glob(pattern))]
    if not weights:
        raise UsageError("no safetensors weights to carry into the second view's folder", path=ref.path,
                         hint="save the model with safetensors (transformers' default)")
    general = load_general_tokenizer(ref.path)
    out = run.out or workspace(run.workdir) / "second-view" / ref.name.replace("/", "--") / f"drop-{settings.drop:g}-seed-{settings.seed}"
    config = {"model": ref.name, "drop": settings.drop, "seed": settings.seed}
    with StageRun(kinds.SECOND_VIEW, out, config, [ref.identity()], force=run.force, wait=run.wait) as stage:
        if stage.skipped:
            assert stage.manifest is not None
            return StageOutcome(stage.out, stage.manifest, True, stage.skip_reason)
        dropped = dropped_pieces(general, settings.drop, settings.seed)
        with resource_errors(stage.tmp):
            general.family.write_without(general, dropped, stage.tmp)
            for name in TOKENIZER_FILES[2:]:
                if (ref.path / name).is_file():
                    shutil.copyfile(ref.path / name, stage.tmp / name)
            copy_general_tokenizer(ref.path, stage.tmp / GENERAL_TOKENIZER_DIR)
            copy_other_files(ref.path, stage.tmp)
            for path in weights:
                shutil.copyfile(path, stage.tmp / path.name)
            _write_config(ref.path, stage.tmp, settings)
        stats = {"pieces_dropped": len(dropped), "vocab_size": general.size, "new_rows": 0,
                 "examples": sorted(general.family.readable(t) for t in dropped)[:10], "family": general.family.name}
        manifest = stage.commit(stats=stats)
    log.info("second-view: %d of %d pieces dropped from the second tokenizer -> %s", len(dropped), general.size, stage.out)
    return StageOutcome(stage.out, manifest, False)


def _write_config(model_path: Path, dest: Path, settings: SecondViewSettings) -> None:
    """The model's config.json with a ``greenadapt`` block saying what the second tokenizer is (no new rows)."""
    from greenadapt.artifacts.model_card import CONFIG_KEY

    config: dict[str, Any] = json.loads((model_path / "config.json").read_text(encoding="utf-8"))
    config[CONFIG_KEY] = {"method": "second-view", "drop": settings.drop, "seed": settings.seed, "n_new": 0}
    (dest / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def run_second_view(settings: SecondViewSettings, run: Run) -> StageOutcome:
    """``greenadapt second-view``."""
    return second_view_stage(settings, run)
