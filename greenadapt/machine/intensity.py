"""The carbon intensity of the grid a run draws from: --co2-intensity, $GREENADAPT_CO2_INTENSITY, a country's yearly
figure (Ember 2023 via Our World in Data, bundled as co2_intensity.csv) or the world average."""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

from greenadapt.errors import UsageError

INTENSITY_ENV = "GREENADAPT_CO2_INTENSITY"
INTENSITY_FILE = "co2_intensity.csv"
WORLD = "WORLD"


# Set once per process by the CLI's global options (configure); beats the environment.
_override: dict[str, Intensity] = {}


@dataclass(frozen=True)
class Intensity:
    """Grid carbon intensity in g CO₂(e) per kWh and where the figure came from."""

    g_per_kwh: float
    source: str


def configure(*, intensity: float | None = None, country: str | None = None) -> None:
    """Set the process-wide intensity (the global CLI options call this once)."""
    if intensity is not None and country is not None:
        raise UsageError("pass either --co2-intensity or --country, not both")
    if intensity is not None and not intensity >= 0:
        raise UsageError(f"--co2-intensity must be a number of g/kWh >= 0, not {intensity}")
    _override.clear()
    if intensity is not None:
        _override["intensity"] = Intensity(float(intensity), "--co2-intensity")
    elif country is not None:
        _override["intensity"] = country_intensity(country, origin="--country")


def country_table() -> dict[str, tuple[float, str]]:
    """``{ISO code: (g/kWh, source)}`` from the shipped CSV (comment lines start with #)."""
    text = resources.files("greenadapt.machine").joinpath(INTENSITY_FILE).read_text(encoding="utf-8")
    rows = csv.DictReader(line for line in text.splitlines() if line and not line.startswith("#"))
    return {row["code"].upper(): (float(row["g_per_kwh"]), f"{row['name']}, {row['source']} {row['year']}") for row in rows}


def country_intensity(code: str, *, origin: str) -> Intensity:
    table = country_table()
    key = code.strip().upper()
    if key not in table:
        raise UsageError(
            f"{origin}: no grid intensity for {code!r}",
            hint=f"known: {', '.join(sorted(table))}; or give the number with --co2-intensity G (g CO2/kWh)",
        )
    value, source = table[key]
    return Intensity(value, f"{origin} {key}: {source}")


def resolve_intensity(environ: Mapping[str, str] | None = None) -> Intensity:
    """CLI option, then ``$GREENADAPT_CO2_INTENSITY`` (number or country code), then the world average."""
    if "intensity" in _override:
        return _override["intensity"]
    env = os.environ if environ is None else environ
    raw = env.get(INTENSITY_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            return country_intensity(raw, origin=f"${INTENSITY_ENV}")
        if not value >= 0:
            raise UsageError(f"${INTENSITY_ENV}={raw} is not a number of g/kWh >= 0")
        return Intensity(value, f"${INTENSITY_ENV}")
    value, source = country_table()[WORLD]
    return Intensity(value, f"default: {source}")
