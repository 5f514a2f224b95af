"""`greenadapt adapt`: w2v -> align -> expand in one command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from greenadapt import api
from greenadapt.adaptation.settings import AdaptSettings
from greenadapt.artifacts.manifest import Manifest
from greenadapt.cli._build import declared_command
from greenadapt.cli._common import emit, neighbours_lines, what_changed


def _show(outcome: Any, as_json: bool) -> None:
    lines = []
    for name, stage in outcome.stages:
        cost = Manifest.of(stage.manifest, stage.path).cost
        state = "up to date" if stage.skipped else f"done in {cost.get('wall_seconds', 0):.1f} s"
        lines.append(f"{name:<6} {state:<20} {stage.path}")
    report = Manifest.of(outcome.align.manifest, outcome.align.path).stats
    new_rows = Manifest.of(outcome.expand.manifest, outcome.expand.path).stats.get("n_new")
    lines.append(
        f"adapted model: {outcome.expand.path} "
        f"({new_rows if new_rows is not None else '?'} new words, {report.get('method', '?')}; "
        + ("no word2vec trained)" if not report.get("word2vec_trained", True) else
           f"held-out cosine {'n/a' if report.get('heldout_cosine') is None else format(report['heldout_cosine'], '.3f')})")
    )
    emit(
        {"stages": {name: stage.manifest for name, stage in outcome.stages}, "model": str(outcome.expand.path)},
        "\n".join(lines) + what_changed(Manifest.of(outcome.expand.manifest, outcome.expand.path).stats) + _neighbours(outcome.align.path),
        as_json=as_json,
    )


def _neighbours(align_dir: Path) -> str:
    from greenadapt.adaptation.align import neighbours_of

    return neighbours_lines(neighbours_of(align_dir))


declared_command(AdaptSettings, api.adapt, _show,
                 help="Adapt a model to a domain corpus: train word2vec, align it, expand the vocabulary.")
