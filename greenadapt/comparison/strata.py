"""Where a comparison's gain lives (NER): the paired difference split by the kind of test mention.

A *mention* is an entity span of the test set, gold or predicted. Each is put in a stratum by its words:

- **new words**: whether one of its words is kept whole by the expanded model's domain tokenizer as one of the
  rows it added (``with a new word``), or none is (``without a new word``);
- **pieces**: how many pieces the general tokenizer cuts the mention's most-cut word into (``1 piece per word``,
  ``2-3 pieces``, ``4+ pieces``): how much the model's own vocabulary struggles with it.
- **segmentations** (a pair with a two-tokenizer model): whether the mention's sentence is cut into the same pieces by
  both tokenizers (``same segmentation``) or not (``different segmentation``). Where the segmentations are the same,
  the two views are the same input and views that agree (``--agreement``) act as R-Drop does; the gain there is not
  the domain rows'.

Within a stratum a model's entity F1 counts only that stratum's mentions: a predicted mention is correct when the
same span and type is gold (the two fall in the same stratum, since the stratum is decided by the span's words).
Each stratum's paired difference gets the comparison's own statistics (:func:`compare_pair`: seeds, and the paired
bootstrap over test sentences), so a user sees whether the gain sat on the domain words the adaptation added.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from greenadapt.comparison.statistics import DEFAULT_REPLICATES, Contributions, compare_pair

WITH_NEW, WITHOUT_NEW = "with a new word", "without a new word"
ONE_PIECE, FEW_PIECES, MANY_PIECES = "1 piece per word", "2-3 pieces", "4+ pieces"
SAME_SEGMENTATION, DIFFERENT_SEGMENTATION = "same segmentation", "different segmentation"
SPLITS = {"new words": (WITH_NEW, WITHOUT_NEW), "pieces": (ONE_PIECE, FEW_PIECES, MANY_PIECES),
          "segmentations": (SAME_SEGMENTATION, DIFFERENT_SEGMENTATION)}


@dataclass(frozen=True)
class WordFacts:
    """Per test sentence and word: how many general-tokenizer pieces it takes, and whether it is one of the expanded
    model's new rows (None when neither model of the pair has a domain tokenizer, or it adds no row); per sentence,
    whether both tokenizers cut it into the same pieces (None when neither model has two tokenizers)."""

    pieces: list[list[int]]
    new: list[list[bool]] | None
    same_segmentation: list[bool] | None = None

    def strata(self, sentence: int, start: int, end: int) -> tuple[str, ...]:
        """The strata of the mention spanning words ``start``..``end`` (inclusive) of ``sentence``."""
        most = max(self.pieces[sentence][start : end + 1])
        found = [ONE_PIECE if most == 1 else FEW_PIECES if most <= 3 else MANY_PIECES]
        if self.new is not None:
            found.insert(0, WITH_NEW if any(self.new[sentence][start : end + 1]) else WITHOUT_NEW)
        if self.same_segmentation is not None:
            found.append(SAME_SEGMENTATION if self.same_segmentation[sentence] else DIFFERENT_SEGMENTATION)
        return tuple(found)

    def has(self, split: str) -> bool:
        """Whether this pair's facts can place a mention in ``split``'s strata."""
        return {"new words": self.new is not None, "segmentations": self.same_segmentation is not None}.get(split, True)


def word_facts(sentences: Sequence[Sequence[str]], general_model: Path, expanded_model: Path | None) -> WordFacts:
    """:class:`WordFacts` of ``sentences``: pieces from ``general_model``'s tokenizer (the general one of a two-tokenizer
    folder), new words from ``expanded_model``'s domain tokenizer."""
    from greenadapt.artifacts.model_folder import load_tokenizers
    from greenadapt.modeling.units import word_backend, word_pieces

    general = load_tokenizers(general_model, inference=True)
    pieces = word_pieces(word_backend(general.general), sentences, general.unk_id)
    new = same = None
    expanded = load_tokenizers(expanded_model, inference=True) if expanded_model is not None else None
    if expanded is not None and expanded.domain is not None:
        domain = word_pieces(word_backend(expanded.domain), sentences, expanded.unk_id)
        if len(expanded.domain) > expanded.general_vocab_size:  # (a second view adds no row)
            new = [[len(word) == 1 and word[0] >= expanded.general_vocab_size for word in sentence] for sentence in domain]
        own = pieces if expanded_model == general_model else word_pieces(word_backend(expanded.general), sentences, expanded.unk_id)
        same = [all(list(a) == list(b) for a, b in zip(g, d, strict=True)) for g, d in zip(own, domain, strict=True)]
    return WordFacts([[len(word) for word in sentence] for sentence in pieces], new, same)


def stratum_contributions(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], facts: WordFacts,
                          stratum: str) -> Contributions:
    """Per sentence (correct, predicted, gold) counts of the mentions in ``stratum``: entity F1 within it."""
    from greenadapt.data.metrics import chunks

    rows = np.zeros((len(gold), 3), dtype=np.int64)
    for i, (gold_tags, pred_tags) in enumerate(zip(gold, predicted, strict=True)):
        gold_in = {c for c in chunks(gold_tags) if stratum in facts.strata(i, c[0], c[1])}
        pred_in = {c for c in chunks(pred_tags) if stratum in facts.strata(i, c[0], c[1])}
        rows[i] = (len(gold_in & pred_in), len(pred_in), len(gold_in))
    return Contributions(rows, _f1)


def _f1(sums: np.ndarray) -> float:
    correct, predicted, gold = (float(x) for x in sums)
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def stratified_differences(
    variant: str, baseline: str, gold: Sequence[Sequence[str]],
    predicted: Mapping[int, tuple[Sequence[Sequence[str]], Sequence[Sequence[str]]]],
    facts: WordFacts, *, replicates: int = DEFAULT_REPLICATES, seed: int = 0,
) -> list[dict[str, Any]]:
    """Per stratum: the gold mentions in it, each model's entity F1 there (mean over seeds), and the paired difference
    with compare's intervals. ``predicted[seed] = (variant's tags, baseline's tags)`` per sentence."""
    rows = []
    for split, strata in SPLITS.items():
        if not facts.has(split):
            continue
        for stratum in strata:
            contributions = {s: (stratum_contributions(gold, v, facts, stratum), stratum_contributions(gold, b, facts, stratum))
                             for s, (v, b) in predicted.items()}
            mentions = int(next(iter(contributions.values()))[0].values[:, 2].sum()) if contributions else 0
            scores = {s: (v.score(), b.score()) for s, (v, b) in contributions.items()}
            pair = compare_pair(variant, baseline, "f1", scores, contributions, replicates=replicates, seed=seed)
            rows.append({
                "split": split, "stratum": stratum, "mentions": mentions,
                "predicted": {variant: _mean([float(v.values[:, 1].sum()) for v, _ in contributions.values()]),
                              baseline: _mean([float(b.values[:, 1].sum()) for _, b in contributions.values()])},
                "f1": {variant: _mean([v for v, _ in scores.values()]), baseline: _mean([b for _, b in scores.values()])},
                "difference": pair.mean, "seed_interval95": list(pair.seed_interval) if pair.seed_interval else None,
                "bootstrap_interval95": list(pair.bootstrap_interval) if pair.bootstrap_interval else None,
                "significant95": pair.significant,
            })
    return rows


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def strata_lines(pair: Mapping[str, Any], scale: float = 100.0) -> list[str]:
    """A pair's strata (its ``strata`` rows as compare.json keeps them) as lines under its verdict."""
    rows = pair.get("strata") or []
    if not rows:
        return []
    if pair.get("not_a_verdict"):
        return ["  where it lives: not shown (not a verdict: a run of this pair learned nothing)"]
    variant, baseline = pair["variant"], pair["baseline"]
    lines = [f"  where it lives: entity F1 x {scale:g} by test mention ({variant} | {baseline} | difference, "
             f"test-set bootstrap 95%; mentions: gold)"]
    for row in rows:
        boot = row.get("bootstrap_interval95")
        interval = f" [{boot[0] * scale:+.2f}, {boot[1] * scale:+.2f}]" if boot else ""
        f1 = row["f1"]
        lines.append(f"    {row['stratum']:<22} {row['mentions']:>6,} mentions  {f1[variant] * scale:6.2f} | {f1[baseline] * scale:6.2f} | "
                     f"{row['difference'] * scale:+.2f}{interval}{' *' if row.get('significant95') else ''}")
    return lines

