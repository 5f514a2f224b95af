"""Unigram / SentencePiece (DeBERTa-v3, XLM-R): new whole-word pieces scored one step above T_LM's best split.

A word in running text is one Metaspace piece, ``▁disease``. T̂ appends
``▁<word>`` for each new word with the score ``s = nextafter(B, +inf)``,
where ``B`` is the score (sum of log-probabilities) of T_LM's own best
segmentation of ``▁<word>``. Unigram picks the highest-scoring segmentation
of each piece, so:

- a new word is one token: its piece now has a segmentation scoring ``s > B``;
- ``▁`` begins every piece, so a new entry can only match at the start of a
  piece; for a piece ``▁<word><rest>``, the new path scores
  ``s + B(rest)``, which beats T_LM's best only where T_LM's best itself
  splits right after ``<word>`` (then ``B(piece) = B + B(rest)``). That is
  the prefix case of WordPiece: "tachycardias" becomes ``▁tachycardia s``
  only when T_LM splits it as ``<tachycardia's pieces> s``; any piece T_LM
  splits elsewhere keeps T_LM's split;
- every piece that does not start with a new word is split exactly as by
  T_LM (no entry of its can match).

Ids below ``first_id`` that T_LM's list does not fill get placeholder pieces
with a score no segmentation will choose.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from greenadapt.families.base import CONTINUATION, GAP_TOKEN, TokenizerFamily, check_unique

_NEVER = -1e9  # below any real log-probability and T_LM's unknown-piece score
_UNK_PENALTY = 10.0  # tokenizers' Unigram scores an unknown piece at (lowest score - 10)


class UnigramFamily(TokenizerFamily):
    name = "Unigram"
    word_prefix = " "

    def __init__(self, spec: Mapping[str, Any]) -> None:
        super().__init__(spec)
        # read once: word_token runs for every word2vec word (a million)
        pre = spec.get("pre_tokenizer") or {}
        nodes = [pre, *(pre.get("pretokenizers") or [])]
        self.marker = next((str(n.get("replacement", "\u2581")) for n in nodes if n.get("type") == "Metaspace"), "\u2581")

    def word_token(self, word: str) -> str:
        return self.marker + word

    def is_word_initial(self, token: str) -> bool:
        return token.startswith(self.marker)

    def readable(self, token: str) -> str:
        return (token[len(self.marker):] or "<0x20>") if self.is_word_initial(token) else CONTINUATION + token  # "▁": a space

    def write(self, general: Any, new_words: Sequence[str], first_id: int, dest: Path) -> dict[str, Any]:
        entries = [list(entry) for entry in general.spec["model"]["vocab"]]
        added_by_id = {i: token for token, i in general.added.items()}
        entries += [[added_by_id.get(i, GAP_TOKEN.format(i)), _NEVER] for i in range(len(entries), first_id)]
        pieces = self.word_tokens(new_words)
        scores = self.best_scores(general, pieces)
        entries += [[piece, math.nextafter(score, math.inf)] for piece, score in zip(pieces, scores, strict=True)]
        check_unique([entry[0] for entry in entries])
        spec = {**general.spec, "model": {**general.spec["model"], "vocab": entries}}
        (dest / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
        return {}

    def write_without(self, general: Any, dropped: set[str], dest: Path) -> None:
        # Viterbi never picks a piece scored below any real log-probability
        entries = [[entry[0], _NEVER if entry[0] in dropped else entry[1]] for entry in general.spec["model"]["vocab"]]
        spec = {**general.spec, "model": {**general.spec["model"], "vocab": entries}}
        (dest / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")

    def best_scores(self, general: Any, pieces: Sequence[str]) -> list[float]:
        """The score of T_LM's best segmentation of each piece (the model alone, as Viterbi sums it)."""
        from tokenizers import Tokenizer

        vocab = general.spec["model"]["vocab"]
        scores = [float(entry[1]) for entry in vocab]
        unk_id = general.spec["model"].get("unk_id")
        unk_score = min(scores) - _UNK_PENALTY
        model_only = Tokenizer.from_str(json.dumps({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
                                                    "normalizer": None, "pre_tokenizer": None, "post_processor": None,
                                                    "decoder": None, "model": general.spec["model"]}))
        result = []
        for encoding in model_only.encode_batch(list(pieces), add_special_tokens=False):
            total = 0.0
            for token_id in encoding.ids:  # left to right, as Viterbi accumulates
                total += unk_score if token_id == unk_id else scores[token_id]
            result.append(total)
        return result
