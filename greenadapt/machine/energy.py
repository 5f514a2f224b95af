"""Energy and CO₂ accounting for stage manifests.

Every stage's manifest ``cost`` block gets, besides wall/CPU time and peak
memory (:class:`greenadapt.machine.cost.CostMeter`), GPU time and model, an energy
figure in kWh with the *method* that produced it, and a CO₂ estimate:

Measured, where the hardware exposes a counter
    ``rapl``  Intel/AMD RAPL through ``/sys/class/powercap/intel-rapl*``:
              the package domains plus any ``dram`` sub-domain, read at the
              stage's start and end (``energy_uj`` wraps at
              ``max_energy_range_uj``; one wrap per reading pair is undone).
              Scope: the whole socket, so on a shared machine it includes
              other processes' work. The counters are root-only on most
              kernels since 2020; unreadable counters fall back to the estimate.
    ``nvml``  NVIDIA's total-energy counter (Volta and newer) through the
              optional ``nvidia-ml-py`` package, for the GPUs CUDA uses.

With codecarbon, where it is installed (``pip install greenadapt[energy]``)
    ``codecarbon:<mode>``  codecarbon's ``OfflineEmissionsTracker`` (no network)
              fills in each part no counter above measured. Its ``mode`` says
              how it got the figure: ``intel_rapl``, ``intel_power_gadget``,
              ``windows_emi``, ``powermetrics`` (Apple) and ``nvml`` are
              counters; ``cpu_load`` (the CPU model's TDP × load) and
              ``constant`` are codecarbon's own estimates, and its memory
              figure is always a model. It starts only where it may read a
              counter greenadapt does not (macOS, Windows): on Linux greenadapt
              reads RAPL and NVML itself, and codecarbon's probe (about 1.3
              CPU-seconds a process, on a thread beside the stage's work)
              would buy only its TDP model. ``GREENADAPT_CODECARBON=1``
              starts it anyway, ``0`` never.

Estimated otherwise (``tdp-estimate``)
    power = TDP × utilisation, with utilisation = CPU seconds / (wall × cores),
    which makes the CPU energy simply ``CPU seconds × W per busy core``;
    plus ``wall × peak RSS (GiB) × W per GiB`` for memory, and for a GPU
    without NVML ``GPU seconds × board power`` (full load assumed):

    ============================  ======================================
    CPU, per busy core            10 W  (``GREENADAPT_CPU_WATTS_PER_CORE``)
    memory, per GiB resident      0.3725 W (Green Algorithms, Lannelongue
                                  et al. 2021)
    GPU board power               by model (vendor TDP), else 300 W
    ============================  ======================================

    10 W per core is the TDP per core of typical server CPUs (a 200 W,
    20-core part); desktop parts run higher, laptop parts lower.

Every figure is labelled ``measured`` (all its parts come from counters),
``estimated`` (none do) or ``partly measured``: ``energy_label`` in the
manifest, a column of the report.

CO₂ kg = kWh × grid intensity (g/kWh) / 1000. The intensity comes from, in
this order: ``greenadapt --co2-intensity G``, ``greenadapt --country XX``,
the environment variable ``GREENADAPT_CO2_INTENSITY`` (a number in g/kWh
or a country code), else the world average. Country averages ship in
``co2_intensity.csv`` (Ember 2023 via Our World in Data; see its header).
No figure includes a data-centre PUE factor.

Only the standard library is imported here: ``stage`` imports this module
and ``greenadapt --help`` must stay instant. torch is consulted only if the
stage already imported and initialised CUDA.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greenadapt.machine.codecarbon_meter import METHOD_CODECARBON, CodecarbonMeter, codecarbon_wanted
from greenadapt.machine.intensity import Intensity, resolve_intensity
from greenadapt.switches import WATTS_ENV, env_number

log = logging.getLogger(__name__)

RAPL_ROOT = Path("/sys/class/powercap")

CPU_WATTS_PER_CORE = 10.0
RAM_WATTS_PER_GIB = 0.3725
GPU_DEFAULT_WATTS = 300.0
# Nominal board power (vendor datasheets, SXM/reference variants); matched as substrings of the CUDA device name.
GPU_WATTS = (("H200", 700.0), ("H100", 700.0), ("A100", 400.0), ("V100", 300.0), ("A10", 150.0), ("L4", 72.0), ("T4", 70.0))

UJ_PER_KWH = 3.6e12
J_PER_KWH = 3.6e6

METHOD_RAPL = "rapl"
METHOD_NVML = "nvml"
METHOD_ESTIMATE = "tdp-estimate"
# codecarbon modes that read a hardware counter; anything else it reports is a model.
CODECARBON_COUNTERS = frozenset({"intel_rapl", "intel_power_gadget", "windows_emi", "powermetrics", "nvml"})
LABEL_MEASURED = "measured"
LABEL_ESTIMATED = "estimated"
LABEL_PARTLY = "partly measured"


def is_measured(method: str) -> bool:
    """Whether one part's method read a hardware counter (``rapl``, ``nvml``, ``codecarbon:intel_rapl``, …)."""
    if method in (METHOD_RAPL, METHOD_NVML):
        return True
    kind, _, mode = method.partition(":")
    return kind == METHOD_CODECARBON and mode in CODECARBON_COUNTERS


def energy_label(methods: Iterable[str]) -> str:
    """``measured``, ``estimated`` or ``partly measured`` for a figure made of parts with these methods."""
    measured = [is_measured(m) for m in methods]
    if measured and all(measured):
        return LABEL_MEASURED
    return LABEL_PARTLY if any(measured) else LABEL_ESTIMATED


# --------------------------------------------------------------------------
# Grid intensity


# --------------------------------------------------------------------------
# RAPL


@dataclass(frozen=True)
class RaplDomain:
    name: str
    path: Path
    max_uj: int


def rapl_domains(root: Path = RAPL_ROOT) -> list[RaplDomain]:
    """Package domains (``intel-rapl:N``) and their ``dram`` sub-domains; core/uncore are inside the package figure."""
    domains: list[RaplDomain] = []
    if not root.is_dir():
        return domains
    for folder in sorted(root.glob("intel-rapl:*")):
        parts = folder.name.split(":")
        try:
            name = (folder / "name").read_text().strip()
        except OSError:
            continue
        if len(parts) == 2 or (len(parts) == 3 and name == "dram"):
            try:
                max_uj = int((folder / "max_energy_range_uj").read_text())
            except (OSError, ValueError):
                max_uj = 0
            domains.append(RaplDomain(f"{folder.name}:{name}", folder / "energy_uj", max_uj))
    return domains


def read_rapl(domains: list[RaplDomain]) -> dict[str, int] | None:
    """Current counters in µJ, or None if any cannot be read (e.g. root-only)."""
    if not domains:
        return None
    values = {}
    try:
        for domain in domains:
            values[domain.name] = int(domain.path.read_text())
    except (OSError, ValueError):
        return None
    return values


def rapl_delta_uj(start: int, end: int, max_uj: int) -> int:
    """Energy between two readings of one counter, undoing one wrap-around."""
    if end >= start:
        return end - start
    if max_uj <= 0:
        return 0
    return end + max_uj - start


# --------------------------------------------------------------------------
# GPU


def cuda_in_use() -> bool:
    """True if this process has initialised CUDA (never imports torch itself)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:  # a broken CUDA setup must not break a stage's manifest
        return False


def gpu_info() -> tuple[str | None, int]:
    """Model name and the number of GPUs this job uses (one per torchrun rank)."""
    torch = sys.modules.get("torch")
    try:
        name = torch.cuda.get_device_name(torch.cuda.current_device()) if torch is not None else None
    except Exception:
        name = None
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    return name, max(1, world)


def gpu_watts(model: str | None) -> float:
    for key, watts in GPU_WATTS:
        if model and key in model:
            return watts
    return GPU_DEFAULT_WATTS


def _nvml_handles() -> tuple[Any, list[Any]] | None:
    try:
        import pynvml  # the nvidia-ml-py package; optional
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible:
            indices = [int(i) for i in visible.split(",") if i.strip().isdigit()]
        else:
            indices = list(range(pynvml.nvmlDeviceGetCount()))
        return pynvml, [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
    except Exception:
        return None


def read_nvml_mj() -> int | None:
    """Total energy of the visible GPUs in mJ since driver load, or None."""
    found = _nvml_handles()
    if found is None:
        return None
    pynvml, handles = found
    try:
        return sum(int(pynvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in handles) if handles else None
    except Exception:
        return None


# --------------------------------------------------------------------------
# Estimate and the probe a CostMeter holds


def cpu_watts_per_core(environ: Mapping[str, str] | None = None) -> float:
    return float(env_number(WATTS_ENV, CPU_WATTS_PER_CORE, environ=environ))


def tdp_estimate_kwh(
    *,
    cpu_seconds: float,
    wall_seconds: float,
    peak_rss_gib: float,
    gpu_seconds: float = 0.0,
    gpu_model: str | None = None,
    watts_per_core: float = CPU_WATTS_PER_CORE,
) -> dict[str, float]:
    """TDP × utilisation: ``cpu_seconds × W/core`` (= cores × W/core × util × wall), memory and GPU terms."""
    return {
        "cpu_kwh": cpu_seconds * watts_per_core / J_PER_KWH,
        "ram_kwh": wall_seconds * peak_rss_gib * RAM_WATTS_PER_GIB / J_PER_KWH,
        "gpu_kwh": gpu_seconds * gpu_watts(gpu_model) / J_PER_KWH,
    }


@dataclass
class EnergyProbe:
    """Counter readings taken when a stage starts; :meth:`finish` turns them into the manifest's fields."""

    rapl_root: Path = RAPL_ROOT
    environ: Mapping[str, str] | None = None
    platform: str | None = None  # sys.platform unless given
    _domains: list[RaplDomain] = field(default_factory=list, init=False)
    _rapl_start: dict[str, int] | None = field(default=None, init=False)
    _nvml_start: int | None = field(default=None, init=False)
    _intensity: Intensity | None = field(default=None, init=False)
    _codecarbon: CodecarbonMeter | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        # Resolved at the start, so a bad $GREENADAPT_CO2_INTENSITY fails before the work, not after it.
        self._intensity = resolve_intensity(self.environ)
        self._domains = rapl_domains(self.rapl_root)
        self._rapl_start = read_rapl(self._domains)
        # Read NVML now whenever it is installed: a stage initialises CUDA only after its meter started,
        # and finish() uses the difference only if CUDA was in use by then.
        self._nvml_start = read_nvml_mj()

    def track(self) -> None:
        """Start codecarbon (where installed and wanted) for a stage that will run; a skipped stage never pays its probe.
        Not where greenadapt reads RAPL itself: RAPL replaces codecarbon's CPU figure, whose hardware probe (about
        1.3 CPU-seconds a process, docs/benchmarks.md) would then buy only a RAM model like the estimate's."""
        wanted = self._rapl_start is None and codecarbon_wanted(self.environ, self.platform)
        if self._codecarbon is None and wanted and importlib.util.find_spec("codecarbon") is not None:
            self._codecarbon = CodecarbonMeter()

    def close(self) -> None:
        """Stop codecarbon if :meth:`finish` did not (the stage failed): no tracker outlives its stage."""
        if self._codecarbon is not None:
            self._codecarbon.stop()
            self._codecarbon = None

    def _measured_parts(self, parts: dict[str, float], methods: dict[str, str | None], gpu_used: bool) -> None:
        """Replace estimated parts with the counters' readings where a counter was read at start and end (RAPL, NVML)."""
        rapl_end = read_rapl(self._domains) if self._rapl_start is not None else None
        if self._rapl_start is not None and rapl_end is not None:
            package = dram = 0
            for domain in self._domains:
                delta = rapl_delta_uj(self._rapl_start[domain.name], rapl_end[domain.name], domain.max_uj)
                if domain.name.endswith(":dram"):
                    dram += delta
                else:
                    package += delta
            parts["cpu_kwh"] = package / UJ_PER_KWH
            methods["cpu"] = METHOD_RAPL
            if any(d.name.endswith(":dram") for d in self._domains):
                parts["ram_kwh"] = dram / UJ_PER_KWH
                methods["ram"] = METHOD_RAPL
        if gpu_used:
            nvml_end = read_nvml_mj()
            if self._nvml_start is not None and nvml_end is not None and nvml_end >= self._nvml_start:
                parts["gpu_kwh"] = (nvml_end - self._nvml_start) / 1000 / J_PER_KWH
                methods["gpu"] = METHOD_NVML

    def finish(self, *, wall_seconds: float, cpu_seconds: float, peak_rss_mib: float, cpu_count: int | None) -> dict[str, Any]:
        gpu_used = cuda_in_use()
        gpu_model, gpu_count = gpu_info() if gpu_used else (None, 0)
        gpu_seconds = wall_seconds * gpu_count if gpu_used else 0.0
        estimate = tdp_estimate_kwh(
            cpu_seconds=cpu_seconds,
            wall_seconds=wall_seconds,
            peak_rss_gib=peak_rss_mib / 1024,
            gpu_seconds=gpu_seconds,
            gpu_model=gpu_model,
            watts_per_core=cpu_watts_per_core(self.environ),
        )
        parts = dict(estimate)
        methods = {"cpu": METHOD_ESTIMATE, "ram": METHOD_ESTIMATE, "gpu": METHOD_ESTIMATE if gpu_used else None}
        tracked = self._codecarbon.stop() if self._codecarbon is not None else None
        self._codecarbon = None
        for key, (kwh_part, method_part) in (tracked or {}).items():
            name = key.removesuffix("_kwh")
            if methods.get(name) is not None:  # a GPU codecarbon sees but this stage did not use stays out
                parts[key] = kwh_part
                methods[name] = method_part

        self._measured_parts(parts, methods, gpu_used)
        kwh = sum(parts.values())
        used = [m for m in methods.values() if m is not None]
        method = "+".join(dict.fromkeys(used))
        intensity = self._intensity or resolve_intensity(self.environ)
        cores = cpu_count or 1
        return {
            "cpu_utilisation": cpu_utilisation(cpu_seconds, wall_seconds, cores),
            "gpu_seconds": round(gpu_seconds, 3),
            "gpu_model": gpu_model,
            "gpu_count": gpu_count,
            # the GPUs this process was given (compare's workers each get theirs): what the energy above was read on
            **({"gpu_devices": os.environ["CUDA_VISIBLE_DEVICES"]} if gpu_used and os.environ.get("CUDA_VISIBLE_DEVICES") else {}),
            "energy_kwh": round(kwh, 9),
            "energy_method": method,
            "energy_label": energy_label(used),
            "energy_parts": {
                f"{k}_kwh": {"kwh": round(parts[f"{k}_kwh"], 9), "method": m, "label": energy_label([m])}
                for k, m in methods.items()
                if m is not None
            },
            "energy_assumptions": {
                "cpu_watts_per_core": cpu_watts_per_core(self.environ),
                "ram_watts_per_gib": RAM_WATTS_PER_GIB,
                **({"gpu_watts": gpu_watts(gpu_model)} if gpu_used else {}),
            },
            "co2_kg": round(kwh * intensity.g_per_kwh / 1000, 9),
            "co2_intensity_g_per_kwh": intensity.g_per_kwh,
            "co2_intensity_source": intensity.source,
        }


# --------------------------------------------------------------------------
# A stage's cost as readers show it (report, info, compare, expand's record of its parents)


def cpu_utilisation(cpu_seconds: float, wall_seconds: float, cores: int) -> float | None:
    """The share of ``cores`` busy over ``wall_seconds``; None for no time at all."""
    return round(cpu_seconds / (wall_seconds * cores), 4) if wall_seconds > 0 else None


def cost_of(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's cost block, with energy/CO₂ filled in by the TDP estimate for manifests older than them."""
    cost = dict(manifest.get("cost") or {})
    wall = float(cost.get("wall_seconds") or 0.0)
    cpu = float(cost.get("cpu_seconds") or 0.0)
    cost.setdefault("gpu_seconds", 0.0)
    cost.setdefault("gpu_model", None)
    if "energy_kwh" not in cost:
        parts = tdp_estimate_kwh(cpu_seconds=cpu, wall_seconds=wall, peak_rss_gib=float(cost.get("peak_rss_mib") or 0) / 1024)
        cost["energy_kwh"] = sum(parts.values())
        cost["energy_method"] = "tdp-estimate (made by the reader: the manifest predates energy accounting)"
        cost["co2_kg"] = None
        cost["co2_intensity_g_per_kwh"] = None
    cost.setdefault("energy_label", energy_label(methods_of(cost)))
    cost["cpu_hours"] = cpu / 3600
    cost["wall_hours"] = wall / 3600
    return cost


def methods_of(cost: Mapping[str, Any]) -> list[str]:
    """The part methods of a cost block; manifests older than per-part labels name them only in ``energy_method``."""
    parts = cost.get("energy_parts")
    if isinstance(parts, Mapping) and parts:
        return [str(p.get("method")) for p in parts.values() if isinstance(p, Mapping)]
    return [m.split(" ")[0] for m in str(cost.get("energy_method") or "").split("+") if m]


def sum_costs(costs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several stages' cost blocks as one (a figure is None when any stage lacks it)."""
    total: dict[str, Any] = {}
    for key in ("wall_seconds", "cpu_seconds", "gpu_seconds", "energy_kwh", "co2_kg"):
        values = [c.get(key) for c in costs]
        total[key] = None if any(v is None for v in values) else float(sum(values))  # type: ignore[arg-type]
    total["peak_rss_mib"] = max((float(c.get("peak_rss_mib") or 0) for c in costs), default=0.0)
    total["energy_method"] = "+".join(dict.fromkeys(str(c.get("energy_method")) for c in costs))
    total["energy_label"] = energy_label(m for c in costs for m in methods_of(c))
    intensities = {c.get("co2_intensity_g_per_kwh") for c in costs}
    total["co2_intensity_g_per_kwh"] = intensities.pop() if len(intensities) == 1 else None
    total["wall_hours"] = (total["wall_seconds"] or 0) / 3600
    total["cpu_hours"] = (total["cpu_seconds"] or 0) / 3600
    return total
