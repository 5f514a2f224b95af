"""How a question-answering model answers, declared once: what ``greenadapt qa`` takes (beside its data), and the object
the answering code receives (``greenadapt.load`` of a QA folder builds one from its own keywords)."""

from __future__ import annotations

from dataclasses import dataclass

from greenadapt.inference.settings import RuntimeSettings
from greenadapt.options import EVALUATION, MODEL, PERFORMANCE, TRAINING, option
from greenadapt.training.settings import POOL_MODES


@dataclass(frozen=True, kw_only=True)
class AnswerSettings(RuntimeSettings):
    pool: str | None = option(None, "--pool", panel=EVALUATION, choices=POOL_MODES,
                              help="mean (average word logits of both tokenizers), general (T_LM) or domain (T̂). "
                                   "Default: mean for an expanded model, general for a plain one.")
    max_length: int | None = option(None, "--max-length", panel=TRAINING, help="Model input length. Default: the model's (512 for BERT).")
    batch_size: int = option(16, "--batch-size", panel=PERFORMANCE, minimum=1, help="Windows per forward pass.")
    n_best: int = option(20, "--n-best", panel=EVALUATION, minimum=1, help="Answers kept per question in nbest.json.")
    max_answer_chars: int = option(500, "--max-answer-chars", panel=EVALUATION, minimum=1, help="Longest answer in characters.")
    device: str = option("auto", "--device", panel=PERFORMANCE, help="auto, cpu, cuda or cuda:N (answering runs on no MPS device).")
    general_model: str | None = option(None, "--general-model", panel=MODEL,
                                       help="G-MAP model: its general model, if not where training found it (weights are checked).")
