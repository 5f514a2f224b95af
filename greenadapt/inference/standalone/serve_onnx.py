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

import argparse
import json
import re  # noqa: F401  (the sentence splitter put in by the export uses it)
import sys
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from tokenizers import Tokenizer

# Sentences: the rule greenadapt's predict uses (greenadapt.corpus.words.split_sentences), put here by the export.
# @sentences@


# Entities from tags: conlleval's rules as greenadapt reads them (greenadapt.data.metrics.chunks), put here by the export.
# @chunks@


# A live input's pauses: greenadapt predict's reader (greenadapt.inference.windows.flushed_on_stalls), put here by the export.
# @stalls@


BATCH = 64  # windows per ONNX call, sorted by length within a group of lines (greenadapt predict's batch)
LINES = 256  # input lines read before they are answered (a pipe gets its answers in groups of this many)
PAUSE = 1.0  # seconds a live input may pause before what it gave is answered


class ServeError(Exception):
    """What serve_onnx.py tells its user in one line (exit 2: the command line; 3: the folder or the input)."""

    def __init__(self, message: str, code: int = 3) -> None:
        super().__init__(message)
        self.code = code


class Exported:
    """A folder of ``greenadapt export --onnx``."""

    def __init__(self, folder: Path, *, int8: bool | None = None) -> None:
        import onnxruntime as ort  # (here, not above: greenadapt imports this file where only the export needs it)

        if not folder.is_dir():
            raise ServeError(f"{folder}: no such folder (pass the folder `greenadapt export --onnx` wrote)")
        recipe, labels = _json(folder / "pooling.json"), _json(folder / "labels.json")
        try:
            self.labels = list(labels["labels"])
            views, models = list(recipe["views"]), dict(recipe["models"])
            self.budget = int(recipe["max_length"]) - 2  # [CLS] and [SEP]
            for key in ("words", "cls_id", "sep_id", "unk_id", "task"):
                recipe[key]
        except (KeyError, TypeError, ValueError) as exc:
            raise ServeError(f"{folder}: pooling.json or labels.json lacks {exc} "
                             "(export the run again with greenadapt export --onnx)") from None
        if recipe["task"] != "ner" or not self.labels:
            raise ServeError(f"{folder}: this script serves NER exports; this one is {recipe['task']!r} (run it with greenadapt predict)")
        self.recipe = recipe
        self.views = []
        for name in views:
            try:
                tokenizer = Tokenizer.from_file(str(folder / name))
            except Exception as exc:  # tokenizers raises its own exception type
                raise ServeError(f"{folder / name}: cannot read this tokenizer "
                                 f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
            tokenizer.no_padding()
            tokenizer.no_truncation()
            self.views.append(tokenizer)
        self.words = Tokenizer.from_file(str(folder / recipe["words"])).pre_tokenizer
        if int8 is None:  # no flag: the fp32 graph, or the one graph an int8-only export has
            int8 = "fp32" not in models
        fmt = "int8" if int8 else "fp32"
        if fmt not in models:
            raise ServeError(f"{folder}: this export has no {fmt} model (it has {', '.join(models)}); "
                             + ("leave out --int8" if int8 else "pass --int8"), code=2)
        try:
            self.session = ort.InferenceSession(str(folder / models[fmt]), providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ServeError(f"{folder / models[fmt]}: ONNX Runtime cannot load it ({str(exc).splitlines()[0][:200]})") from None
        self.inputs = {i.name for i in self.session.get_inputs()}

    def entities(self, text: str) -> list[dict]:
        """The entities of one document."""
        return self.entities_of([text])[0]

    def entities_of(self, texts: list[str]) -> list[list[dict]]:
        """The entities of each document: every window of every sentence of the documents, under each view, run in
        batches of similar length (one ONNX call per batch, as greenadapt predict runs them)."""
        sentences = []  # (document, spans of its words)
        for number, text in enumerate(texts):
            for start, end in split_sentences(text):  # type: ignore[name-defined]  # noqa: F821  (put in by the export)
                spans = [(a + start, b + start) for _, (a, b) in self.words.pre_tokenize_str(text[start:end]) if b > a]
                if spans:
                    sentences.append((number, spans))
        probabilities = self.word_probabilities_of([[texts[n][a:b] for a, b in spans] for n, spans in sentences])
        found: list[list[dict]] = [[] for _ in texts]
        for (number, spans), words_probabilities in zip(sentences, probabilities):
            text = texts[number]
            best = words_probabilities.argmax(axis=1)
            tags = [self.labels[i] for i in best]
            scores = words_probabilities[np.arange(len(spans)), best]
            for first, last, kind in chunks(tags):  # type: ignore[name-defined]  # noqa: F821  (put in by the export)
                a, b = spans[first][0], spans[last][1]
                found[number].append({"start": a, "end": b, "text": text[a:b], "label": kind or "ENTITY",
                                      "score": float(np.mean(scores[first : last + 1]))})
        return found

    def word_probabilities_of(self, sentences: list[list[str]]) -> list[np.ndarray]:
        """Each sentence's words' label probabilities (the views' first-piece logits averaged, then a softmax), the
        windows of every sentence batched together."""
        pieces = [[self._pieces(view, words) for view in self.views] for words in sentences]
        logits = [np.zeros((len(words), len(self.labels)), dtype=np.float64) for words in sentences]
        windows = [(s, a, b) for s, views in enumerate(pieces) for a, b in self._windows(views)]
        for v in range(len(self.views)):
            for batch in self._batches([pieces[s][v][a:b] for s, a, b in windows]):
                for index, rows in batch:
                    s, a, b = windows[index]
                    logits[s][a:b] += rows / len(self.views)
        probabilities = []
        for sentence_logits in logits:
            shifted = np.exp(sentence_logits - sentence_logits.max(axis=1, keepdims=True))
            probabilities.append(shifted / shifted.sum(axis=1, keepdims=True))
        return probabilities

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

    def _batches(self, windows: list[list[list[int]]]) -> Any:
        """Each window's first-piece logits, in batches of up to ``BATCH`` windows of similar length: yields lists of
        (window's index, its rows)."""
        sequences: list[tuple[list[int], list[int]]] = []
        for words in windows:
            window_ids, rows = [self.recipe["cls_id"]], []
            for word_pieces in words:
                rows.append(len(window_ids))
                window_ids.extend(word_pieces[: self.budget])
            window_ids.append(self.recipe["sep_id"])
            sequences.append((window_ids, rows))
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i][0]))
        for start in range(0, len(order), BATCH):
            members = order[start : start + BATCH]
            width = max(len(sequences[i][0]) for i in members)
            ids = np.full((len(members), width), self.recipe["pad_id"], dtype=np.int64)
            mask = np.zeros((len(members), width), dtype=np.int64)
            for row, i in enumerate(members):
                ids[row, : len(sequences[i][0])] = sequences[i][0]
                mask[row, : len(sequences[i][0])] = 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            logits = self.session.run(["logits"], {k: v for k, v in feed.items() if k in self.inputs})[0]
            yield [(i, logits[row][sequences[i][1]].astype(np.float64)) for row, i in enumerate(members)]


def _json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ServeError(f"{path}: missing (the folder is not a whole export of greenadapt export --onnx)") from None
    except (OSError, ValueError) as exc:
        raise ServeError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ServeError(f"{path}: not the JSON object an export writes")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, ours: not argparse's usage block
        raise ServeError(f"{message} (usage: python serve_onnx.py FOLDER [--int8] < text.txt)", code=2)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="serve_onnx.py", description="Entities of each input line (UTF-8), one JSON line each.", allow_abbrev=False)
    parser.add_argument("folder", type=Path, help="the folder greenadapt export --onnx wrote")
    parser.add_argument("--int8", action="store_true", default=None, help="run the int8 model (default: fp32 where the export has it)")
    answered = 0
    try:
        args = parser.parse_args(argv)
        exported = Exported(args.folder, int8=args.int8)
        waiting: list[str] = []

        def flush() -> None:
            nonlocal answered
            for text, entities in zip(waiting, exported.entities_of(waiting)):
                answered += 1
                print(json.dumps({"line": answered, "text": text, "entities": entities}, ensure_ascii=False))
            sys.stdout.flush()
            waiting.clear()

        # a reader of its own over stdin's descriptor: the thread that reads it may still be waiting in it when the
        # script ends early (a bad line), and the interpreter's shutdown then takes sys.stdin's lock, not this one's
        stdin = open(sys.stdin.fileno(), "rb", closefd=False)  # noqa: SIM115
        for raw in flushed_on_stalls(stdin, PAUSE, 4 * LINES):  # type: ignore[name-defined]  # noqa: F821
            if raw is STALLED:  # type: ignore[name-defined]  # noqa: F821  (a live input paused: answer what it gave)
                if waiting:
                    flush()
                continue
            try:
                text = raw.decode("utf-8").rstrip("\r\n")  # decoded line by line: a bad line is named by its number
            except UnicodeDecodeError:
                flush()  # the lines before it are answered
                raise
            waiting.append(text)
            if len(waiting) == LINES:
                flush()
        flush()
    except ServeError as exc:
        print(f"serve_onnx.py: {exc}", file=sys.stderr)
        return exc.code
    except UnicodeDecodeError:
        print(f"serve_onnx.py: line {answered + 1} of the input is not UTF-8 (convert it: iconv -f LATIN1 -t UTF-8)", file=sys.stderr)
        return 3
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
