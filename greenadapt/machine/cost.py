"""What a stage costs: wall time, CPU seconds and peak memory of its process and children, energy and CO₂.

A training stage may take several processes: one stopped by SIGTERM (a pre-empted spot instance) or killed, then
``--resume``. Each checkpoint records what the run had spent up to it (:meth:`CostMeter.spent`), and the process that
resumes from it carries that forward (:meth:`CostMeter.carry`), so the manifest's cost is the whole run's, not its
last process's alone. What a killed process spent after its last checkpoint is not on record anywhere and stays out.
"""

from __future__ import annotations

import math
import resource
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from greenadapt.machine.cores import usable_cores
from greenadapt.machine.energy import METHOD_ESTIMATE, EnergyProbe, cpu_utilisation, energy_label, sum_costs, tdp_estimate_kwh


@dataclass
class CostMeter:
    """Wall time, CPU seconds and peak memory of this process and its children,
    plus GPU time, energy (measured or estimated, method stated) and CO₂: see greenadapt.machine.energy."""

    wall_start: float = field(default_factory=time.perf_counter)
    cpu_start: float = field(default_factory=lambda: _cpu_seconds())
    probe: EnergyProbe = field(default_factory=EnergyProbe)
    attempt: str = field(default_factory=lambda: uuid.uuid4().hex)  # this process's part of the run
    earlier: dict[str, float] = field(default_factory=dict)  # what the run's earlier processes spent

    def spent(self) -> dict[str, Any]:
        """The run's cost so far, for a checkpoint: earlier processes' and this one's, wall and CPU seconds."""
        return {"attempt": self.attempt, "processes": int(self.earlier.get("processes", 0)) + 1,
                "wall_seconds": round(self.earlier.get("wall_seconds", 0.0) + time.perf_counter() - self.wall_start, 3),
                "cpu_seconds": round(self.earlier.get("cpu_seconds", 0.0) + _cpu_seconds() - self.cpu_start, 3)}

    def carry(self, spent: Mapping[str, Any] | None) -> None:
        """Count what a checkpoint says the run spent before this process; one this process wrote adds nothing."""
        if not spent or spent.get("attempt") == self.attempt:
            return
        try:
            earlier = {key: float(spent[key]) for key in ("processes", "wall_seconds", "cpu_seconds")}
        except (KeyError, TypeError, ValueError):  # a checkpoint of an older greenadapt, or a damaged record: unknown
            earlier = {}
        self.earlier = earlier if all(math.isfinite(v) and v >= 0 for v in earlier.values()) else {}

    def snapshot(self) -> dict[str, Any]:
        self_usage = resource.getrusage(resource.RUSAGE_SELF)
        child_usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        # ru_maxrss is KiB on Linux; the children figure is the largest child's.
        peak_kib = max(self_usage.ru_maxrss, child_usage.ru_maxrss)
        cost: dict[str, Any] = {
            "wall_seconds": round(time.perf_counter() - self.wall_start, 3),
            "cpu_seconds": round(_cpu_seconds() - self.cpu_start, 3),
            "peak_rss_mib": round(peak_kib / 1024, 1),
            "cpu_count": usable_cores(),
            "host": socket.gethostname(),
        }
        cost.update(
            self.probe.finish(
                wall_seconds=cost["wall_seconds"],
                cpu_seconds=cost["cpu_seconds"],
                peak_rss_mib=cost["peak_rss_mib"],
                cpu_count=cost["cpu_count"],
            )
        )
        return _with_earlier(cost, self.earlier) if self.earlier else cost


def _with_earlier(cost: dict[str, Any], earlier: Mapping[str, float]) -> dict[str, Any]:
    """``cost`` (this process's) with the earlier processes' added, their energy as the TDP estimate makes it from
    their seconds, at this process's assumptions, memory peak and GPUs: their own measurements were not kept."""
    wall, cpu = earlier["wall_seconds"], earlier["cpu_seconds"]
    gpus = int(cost.get("gpu_count") or 0)
    watts = (cost.get("energy_assumptions") or {}).get("cpu_watts_per_core")
    kwh = sum(tdp_estimate_kwh(cpu_seconds=cpu, wall_seconds=wall, peak_rss_gib=float(cost["peak_rss_mib"]) / 1024,
                               gpu_seconds=wall * gpus, gpu_model=cost.get("gpu_model"),
                               **({"watts_per_core": float(watts)} if watts else {})).values())
    intensity = cost.get("co2_intensity_g_per_kwh")
    part = {"kwh": round(kwh, 9), "method": METHOD_ESTIMATE, "label": energy_label([METHOD_ESTIMATE])}
    before = {"wall_seconds": wall, "cpu_seconds": cpu, "gpu_seconds": wall * gpus, "energy_kwh": kwh,
              "co2_kg": None if intensity is None else kwh * float(intensity) / 1000, "energy_method": METHOD_ESTIMATE,
              "energy_parts": {"earlier_processes_kwh": part}, "co2_intensity_g_per_kwh": intensity}
    total = sum_costs([cost, before])
    last = {key: cost.get(key) for key in ("wall_seconds", "cpu_seconds", "gpu_seconds", "energy_kwh", "co2_kg")}
    cost.update({key: None if total[key] is None else round(total[key], 3 if key.endswith("seconds") else 9) for key in last})
    cost.update({
        "processes": int(earlier["processes"]) + 1,
        "last_process": last,  # what the process that finished the run spent, as every stage measures its own
        "energy_parts": {**(cost.get("energy_parts") or {}), "earlier_processes_kwh": part},
        "energy_method": total["energy_method"],
        "energy_label": total["energy_label"],
        "cpu_utilisation": cpu_utilisation(cost["cpu_seconds"], cost["wall_seconds"], int(cost.get("cpu_count") or 1)),
    })
    return cost


def _cpu_seconds() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
