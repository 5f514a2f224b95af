"""codecarbon's offline tracker around one stage, where it is installed and wanted (see :mod:`greenadapt.machine.energy`).

Only the standard library is imported at module level: codecarbon itself (pandas, a ``cpuinfo``
subprocess) is imported on the tracker's thread.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Mapping
from typing import Any
from greenadapt.switches import CODECARBON_ENV, switch

log = logging.getLogger(__name__)

METHOD_CODECARBON = "codecarbon"


def codecarbon_wanted(environ: Mapping[str, str] | None = None, platform: str | None = None) -> bool:
    """Whether to start codecarbon (whether it is installed is checked on start). ``$GREENADAPT_CODECARBON``
    0/false/no/off: never; 1/true/yes/on: always; unset or ``auto``: only where it may read a counter
    greenadapt does not read itself. Not on Linux: there greenadapt reads RAPL and NVML (codecarbon's own
    dependency) itself, so codecarbon could add only its TDP model, for a probe of about 1.3 CPU-seconds."""
    wanted = switch(CODECARBON_ENV, default=None, environ=environ)
    return wanted if wanted is not None else not (platform or sys.platform).startswith("linux")


class CodecarbonMeter:
    """codecarbon's offline tracker around one stage, started in a thread so its hardware probe overlaps the work.

    :meth:`stop` returns ``{"cpu_kwh": (kWh, method), ...}`` or None when codecarbon is missing or failed:
    energy accounting must never fail a stage.
    """

    def __init__(self) -> None:
        self._tracker: Any = None
        self._failed = False
        self._thread = threading.Thread(target=self._start, name="greenadapt-codecarbon", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            from codecarbon import OfflineEmissionsTracker

            # codecarbon sets up its own logger on import and logs at INFO/WARNING before log_level applies;
            # our stderr is the user's.
            logging.getLogger("codecarbon").setLevel(logging.ERROR)

            # The country only feeds codecarbon's own CO2 figure, which is not used: greenadapt applies its intensity.
            # output_methods=[] is explicit so that no .codecarbon.config makes it write emissions.csv into the cwd.
            tracker = OfflineEmissionsTracker(country_iso_code="USA", output_methods=[], log_level="error", tracking_mode="process")
            tracker.start()
            self._tracker = tracker
        except Exception as error:  # ImportError included: the estimate stands in
            self._failed = True
            log.debug("codecarbon not used: %s", error)

    def stop(self, timeout: float = 30.0) -> dict[str, tuple[float, str]] | None:
        self._thread.join(timeout)
        tracker, self._tracker = self._tracker, None  # stopped once, whoever asks first
        if tracker is None or self._failed or self._thread.is_alive():
            return None
        try:
            tracker.stop()
            data = tracker.final_emissions_data
            modes = codecarbon_modes(tracker)
        except Exception as error:
            log.debug("codecarbon failed to stop: %s", error)
            return None
        parts = {
            "cpu_kwh": (float(data.cpu_energy), f"{METHOD_CODECARBON}:{modes.get('cpu', 'unknown')}"),
            "ram_kwh": (float(data.ram_energy), f"{METHOD_CODECARBON}:model"),
        }
        if "gpu" in modes:
            parts["gpu_kwh"] = (float(data.gpu_energy), f"{METHOD_CODECARBON}:{modes['gpu']}")
        return parts


def codecarbon_modes(tracker: Any) -> dict[str, str]:
    """How codecarbon measured each device. It keeps this on private attributes, read defensively:
    an unknown mode is labelled an estimate, never a measurement."""
    modes: dict[str, str] = {}
    for device in getattr(tracker, "_hardware", None) or []:
        kind = type(device).__name__
        if kind == "CPU":
            modes["cpu"] = str(getattr(device, "_mode", "unknown"))
        elif kind == "AppleSiliconChip":
            modes["cpu"] = "powermetrics"
        elif kind == "GPU":
            modes["gpu"] = "nvml"
    return modes
