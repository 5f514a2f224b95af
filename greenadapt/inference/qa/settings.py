"""How a question-answering model answers, declared once (the object the answering code receives; ``greenadapt.load`` of
a QA folder builds one from its own keywords), and ``greenadapt qa``'s options: its data and model beside it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from greenadapt.inference.settings import LoadSettings, ModelRunSettings, RuntimeSettings, TaskChoiceSettings
from greenadapt.options import EVALUATION, INPUT_OUTPUT, MODEL, REQUIRED, TRAINING, Settings, model_paths, option, option_as_in
from greenadapt.compute.settings import ThreadSettings


@dataclass(frozen=True, kw_only=True)
class AnswerSpanSettings(Settings):
    """Which spans of a context can be answers: declared once for answering (``qa``, ``greenadapt.load``) and for the
    scoring that ends QA training (``finetune --task qa``, and each run ``compare`` starts); the answer extraction
    (:func:`greenadapt.inference.qa.answer.nbest_answers`) receives the object whole."""

    max_answer_chars: int = option(500, "--max-answer-chars", panel=EVALUATION, minimum=1, fingerprint="when set",
                                   help="qa: the longest answer in characters.")


@dataclass(frozen=True, kw_only=True)
class WindowSettings(Settings):
    """A question-answering model's window: ``qa``'s and ``greenadapt.load``'s of a QA folder."""

    max_length: int | None = option(None, "--max-length", panel=TRAINING, help="Model input length. Default: the model's (512 for BERT).")


@dataclass(frozen=True, kw_only=True)
class AnswerSettings(RuntimeSettings, ThreadSettings, WindowSettings, AnswerSpanSettings):
    pool: str | None = option_as_in(LoadSettings, "pool", None,
                                    help="mean (average word logits of both tokenizers), general (T_LM) or domain (T̂). "
                                         "Default: mean for an expanded model, general for a plain one.")
    batch_size: int = option_as_in(LoadSettings, "batch_size", 16, help="Windows per forward pass.")
    n_best: int = option(20, "--n-best", panel=EVALUATION, minimum=1, help="Answers kept per question in nbest.json.")
    device: str = option_as_in(LoadSettings, "device", "auto", help="auto, cpu, cuda or cuda:N (answering runs on no MPS device).")
    precision: str = option_as_in(LoadSettings, "precision", "auto", fingerprint="when set")
    general_model: str | None = option_as_in(LoadSettings, "general_model", None)

    configure_process = ModelRunSettings.configure_process  # torch's threads wait for a torch model (ONNX: no torch)


@dataclass(frozen=True, kw_only=True)
class QaSettings(AnswerSettings):
    """``greenadapt qa``: answer each question over its whole document with sliding windows (one or two tokenizers)."""

    command = "qa"
    positional = ("data", "out")
    run_options = ("out", "force", "wait")
    run_help = {"out": "Folder for predictions.json, nbest.json, metrics.json."}
    out_required = True

    model: str | None = option(None, "--model", "-m", public=model_paths, panel=MODEL,
                               help="QA model folder (plain or from `greenadapt expand`) or Hub id.")
    data: Path = option(REQUIRED, "--data", "-d", panel=INPUT_OUTPUT, help="SQuAD v1/v2-style JSON file (e.g. Covid-QA).")
    limit: int | None = option(None, "--limit", panel=EVALUATION, minimum=1, help="Only the first N questions (quick runs).")


QA_ONLY = (WindowSettings, AnswerSpanSettings)  # what a labelling model has no use for


@dataclass(frozen=True, kw_only=True)
class LoadOptions(LoadSettings, WindowSettings, AnswerSpanSettings, TaskChoiceSettings):
    """``greenadapt.load``'s keywords (and ``greenadapt.pipeline``'s that open the model): how any fine-tuned folder runs,
    a question-answering folder's window and answer length (refused, when set, for a labelling folder), and the task
    of a multitask run."""


def answering_as(options: Settings) -> AnswerSettings:
    """A QA model's answering settings from another command's or ``greenadapt.load``'s: every option both declare, as it
    is; ``pool`` "mean" is QA's own default (both tokenizers where there are two, the one otherwise)."""
    from greenadapt.options import declared_fields

    answering = {field.name for field, _ in declared_fields(AnswerSettings)} - {"pool"}
    shared = {field.name: getattr(options, field.name) for field, _ in declared_fields(options) if field.name in answering}
    pool = getattr(options, "pool", None)
    return AnswerSettings(pool=None if pool == "mean" else pool, **shared)


def qa_options_set(options: Settings) -> list[str]:
    """The QA-only options ``options`` sets away from their defaults, by keyword (only ``greenadapt.load`` and
    ``greenadapt.pipeline`` take them with a labelling model's; a labelling model refuses them)."""
    from greenadapt.options import declared_fields

    qa_only = {field.name for group in QA_ONLY for field, _ in declared_fields(group)}
    return [field.name for field, _ in declared_fields(options) if field.name in qa_only and getattr(options, field.name) != field.default]
