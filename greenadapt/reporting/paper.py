"""The paper's published adaptation-cost figures, for the report's side-by-side table.

Source: Poerner, Waltinger & Schütze (2020), "Inexpensive Domain Adaptation of
Pretrained Language Models: Case Studies on Biomedical NER and Covid-19 QA",
Findings of EMNLP 2020, cost table; the figures as recorded in the project's
method notes (DESIGN-NOTES.md §1, "Published figures"):

    GreenBioBERT 12 h on 12 CPUs (28 lbs CO₂, $16–76)
    BioBERT v1.0 240 h on 8 V100 (544 lbs, $1421–4762)

The notes give no figures for BioBERT v1.1, so its row stays empty rather
than guessed. Device-hours are wall hours × devices as listed (an upper
bound on use), and kg = lbs × 0.45359237. The paper's CO₂ figures follow
Strubell et al. (2019)'s method, which includes a data-centre overhead
factor that our own figures do not.
"""

from __future__ import annotations

from typing import Any

LB_TO_KG = 0.45359237
SOURCE = "Poerner, Waltinger & Schütze (2020), Inexpensive Domain Adaptation of Pretrained Language Models, Findings of EMNLP, cost table"


def _row(name: str, hardware: str, wall: float | None, devices: int | None, device: str, co2_lbs: float | None,
         usd: str | None) -> dict[str, Any]:
    return {
        "name": name,
        "hardware": hardware,
        "wall_hours": wall,
        "device_hours": None if wall is None or devices is None else wall * devices,
        "device": device,
        "energy_kwh": None,
        "co2_lbs": co2_lbs,
        "co2_kg": None if co2_lbs is None else co2_lbs * LB_TO_KG,
        "cost_usd": usd,
        "source": SOURCE if wall is not None else "not stated in the paper's cost table",
    }


PUBLISHED: tuple[dict[str, Any], ...] = (
    _row("BioBERT v1.0 (paper)", "8 × V100 GPU", 240.0, 8, "GPU", 544.0, "$1421–4762"),
    _row("BioBERT v1.1 (paper)", "not stated", None, None, "GPU", None, None),
    _row("GreenBioBERT (paper)", "12 CPUs", 12.0, 12, "CPU", 28.0, "$16–76"),
)
