"""A word's QA score is the best score of any of its wordpieces, not its first piece's (the reference behaviour)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import build_tiny_bert

from greenadapt.artifacts.model_folder import load_tokenizers
from greenadapt.data.squad import Document, Question
from greenadapt.inference.qa.answering import answer_questions
from greenadapt.inference.qa.settings import AnswerSpanSettings


class _PeakAt:
    """A stand-in model whose start and end logits peak at the wordpiece ``target`` (0 elsewhere)."""

    fused = False
    memory_length = 512

    def __init__(self, target: int) -> None:
        self.target = target

    def logits(self, input_ids: np.ndarray, token_types: np.ndarray, attention: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        peak = np.where((input_ids == self.target) & (token_types == 1), 10.0, 0.0).astype(np.float32)
        return peak, peak.copy()


def test_the_answer_word_is_found_by_a_piece_that_is_not_its_first(tmp_path: Path) -> None:
    tokenizer = load_tokenizers(build_tiny_bert(tmp_path / "model", head="qa")).general
    context = "fever and tachycardias were seen"
    encoding = tokenizer(context, add_special_tokens=False)
    pieces = encoding.input_ids
    word_of = encoding.word_ids()
    # The last piece of the split word: it alone carries the peak.
    split_word = encoding.char_to_word(context.index("tachycardias"))
    assert word_of.count(split_word) > 1  # the tiny vocabulary splits it
    target = pieces[max(i for i, w in enumerate(word_of) if w == split_word)]
    assert pieces.count(target) == 1 and word_of.index(split_word) != pieces.index(target)
    question = Question("q", "what was seen?", None, False, "q")
    [(_, answers)] = list(
        answer_questions(_PeakAt(target), [Document(context, None, "d", (question,))], {"general": tokenizer},
                         max_length=32, batch_size=2, n_best=3, spans=AnswerSpanSettings(max_answer_chars=100))
    )
    assert answers[0]["text"] == "tachycardias"
