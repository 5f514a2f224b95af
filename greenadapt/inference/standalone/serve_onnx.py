"""Entities from a model exported by ``greenadapt export --onnx``, with onnxruntime, tokenizers and numpy alone.

    python serve_onnx.py EXPORT_FOLDER [--int8] < notes.txt > entities.jsonl      # one document per line

Each output line is the JSON that ``greenadapt predict`` writes for the same line of text: ``{"line", "text",
"entities": [{"start", "end", "text", "label", "score"}]}``. It follows the recipe in ``pooling.json``: the text cut into
sentences, each sentence into the model's words (its general tokenizer's pre-tokenizer); every word tokenized by
each view (the general tokenizer, and the domain tokenizer that keeps the domain words whole); the logits of each
word's first piece taken from each view and averaged; a softmax; the best label of each word; entity spans from
B-/I- tags as conlleval reads them, their score the mean of their words' probabilities. A sentence longer than the
model's input is scored in consecutive windows that fit under every view, as greenadapt does.

This file is written by greenadapt, and runs without it: copy the folder anywhere with Python, numpy, onnxruntime
and tokenizers (or port these 200 lines to Java, C#, Rust or JavaScript: the same ONNX file and tokenizer.json).
"""

from __future__ import annotations

import json
import re  # noqa: F401  (the sentence splitter put in by the export uses it)
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

# Sentences: the rule greenadapt's predict uses (greenadapt.corpus.words.split_sentences), put here by the export.
# @sentences@


# Entities from tags: conlleval's rules as greenadapt reads them (greenadapt.data.metrics.chunks), put here by the export.
# @chunks@


class Exported:
    """A folder of ``greenadapt export --onnx``."""

    def __init__(self, folder: Path, *, int8: bool = False) -> None:
        import onnxruntime as ort  # (here, not above: greenadapt imports this file where only the export needs it)

        recipe = json.loads((folder / "pooling.json").read_text(encoding="utf-8"))
        self.recipe = recipe
        self.labels = json.loads((folder / "labels.json").read_text(encoding="utf-8"))["labels"]
        self.views = []
        for name in recipe["views"]:
            tokenizer = Tokenizer.from_file(str(folder / name))
            tokenizer.no_padding()
            tokenizer.no_truncation()
            self.views.append(tokenizer)
        self.words = Tokenizer.from_file(str(folder / recipe["words"])).pre_tokenizer
        model = recipe["models"]["int8" if int8 else "fp32"]
        self.session = ort.InferenceSession(str(folder / model), providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.budget = recipe["max_length"] - 2  # [CLS] and [SEP]

    def entities(self, text: str) -> list[dict]:
        found = []
        for start, end in split_sentences(text):  # type: ignore[name-defined]  # noqa: F821  (put in by the export)
            spans = [(a + start, b + start) for _, (a, b) in self.words.pre_tokenize_str(text[start:end]) if b > a]
            if not spans:
                continue
            words = [text[a:b] for a, b in spans]
            probabilities = self.word_probabilities(words)
            best = probabilities.argmax(axis=1)
            tags = [self.labels[i] for i in best]
            scores = probabilities[np.arange(len(words)), best]
            for first, last, kind in chunks(tags):  # type: ignore[name-defined]  # noqa: F821  (put in by the export)
                a, b = spans[first][0], spans[last][1]
                found.append({"start": a, "end": b, "text": text[a:b], "label": kind or "ENTITY",
                              "score": float(np.mean(scores[first : last + 1]))})
        return found

    def word_probabilities(self, words: list[str]) -> np.ndarray:
        """Each word's label probabilities: the views' first-piece logits averaged, then a softmax."""
        pieces = [self._pieces(view, words) for view in self.views]
        logits = np.zeros((len(words), len(self.labels)), dtype=np.float64)
        for a, b in self._windows(pieces):
            for view_pieces in pieces:
                logits[a:b] += self._window_logits(view_pieces[a:b]) / len(pieces)
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)

    def _pieces(self, view: Tokenizer, words: list[str]) -> list[list[int]]:
        encoding = view.encode(words, is_pretokenized=True, add_special_tokens=False)
        pieces: list[list[int]] = [[] for _ in words]
        for token, word in zip(encoding.ids, encoding.word_ids):
            if word is not None:
                pieces[word].append(token)
        return [p if p else [self.recipe["unk_id"]] for p in pieces]

    def _windows(self, pieces: list[list[list[int]]]) -> list[tuple[int, int]]:
        """Consecutive ranges of words whose pieces fit the model under every view (a long word keeps its first pieces)."""
        windows, start, n = [], 0, len(pieces[0])
        while start < n:
            end = start + 1
            while end < n and all(sum(len(p) for p in view[start : end + 1]) <= self.budget for view in pieces):
                end += 1
            windows.append((start, end))
            start = end
        return windows

    def _window_logits(self, words: list[list[int]]) -> np.ndarray:
        ids, rows = [self.recipe["cls_id"]], []
        for pieces in words:
            rows.append(len(ids))
            ids.extend(pieces[: self.budget])
        ids.append(self.recipe["sep_id"])
        feed = {"input_ids": np.array([ids], dtype=np.int64), "attention_mask": np.ones((1, len(ids)), dtype=np.int64),
                "token_type_ids": np.zeros((1, len(ids)), dtype=np.int64)}
        logits = self.session.run(["logits"], {k: v for k, v in feed.items() if k in self.inputs})[0][0]
        return logits[rows].astype(np.float64)


def main() -> None:
    folder = Path(sys.argv[1])
    exported = Exported(folder, int8="--int8" in sys.argv[2:])
    for number, line in enumerate(sys.stdin, 1):
        text = line.rstrip("\r\n")
        print(json.dumps({"line": number, "text": text, "entities": exported.entities(text)}, ensure_ascii=False))


if __name__ == "__main__":
    main()
