"""``greenadapt qa``'s options, each declared once (:mod:`greenadapt.options`): its data and model beside how it answers
(:class:`~greenadapt.inference.qa.settings.AnswerSettings`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from greenadapt.inference.qa.settings import AnswerSettings
from greenadapt.options import EVALUATION, INPUT_OUTPUT, MODEL, REQUIRED, model_paths, option


@dataclass(frozen=True, kw_only=True)
class QaSettings(AnswerSettings):
    """``greenadapt qa``: answer each question over its whole document with sliding windows (one or two tokenizers)."""

    command = "qa"
    positional = ("data", "out")
    run_options = ("out", "force", "wait")
    run_help = {"out": "Folder for predictions.json, nbest.json, metrics.json."}
    out_required = True

    model: str | None = option(None, "--model", "-m", public=model_paths, panel=MODEL, help="QA model folder (plain or from `greenadapt expand`) or Hub id.")
    data: Path = option(REQUIRED, "--data", "-d", panel=INPUT_OUTPUT, help="SQuAD v1/v2-style JSON file (e.g. Covid-QA).")
    limit: int | None = option(None, "--limit", panel=EVALUATION, minimum=1, help="Only the first N questions (quick runs).")
