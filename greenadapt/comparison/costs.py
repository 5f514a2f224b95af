"""What a compared model cost: its fine-tunings, and the stages it was made from."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from greenadapt.artifacts import kinds


def adaptation_cost(spec: str) -> dict[str, float]:
    """What making the model cost: its stage manifest and those of the stages it was made from (w2v, align, expand,
    pretrain), read from the folders they record; empty for a model greenadapt did not make."""
    from greenadapt.artifacts.manifest import read_manifest
    from greenadapt.machine.energy import cost_of

    folder = Path(spec)
    seen: set[Path] = set()
    costs = []
    todo = [folder] if folder.is_dir() else []
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        manifest = read_manifest(current)
        if manifest is None or manifest.get("kind") not in (*kinds.ADAPTATION, kinds.PRETRAIN):
            continue
        costs.append(cost_of(manifest))
        for recorded in manifest.get("inputs") or []:
            if isinstance(recorded, dict) and recorded.get("stage") and recorded.get("path"):
                todo.append(Path(str(recorded["path"])))
    return cost_figures(costs) if costs else {}


def cost_figures(costs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The summed figures compare shows (a figure some stage lacks, such as CO₂ of an old manifest, is left out)."""
    from greenadapt.machine.energy import sum_costs

    total = sum_costs(costs)
    return {k: float(total[k]) for k in ("wall_seconds", "cpu_seconds", "gpu_seconds", "energy_kwh", "co2_kg") if total.get(k) is not None}
