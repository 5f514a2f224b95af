#!/usr/bin/env python3
"""Re-score fine-tuned NER runs under three rules for cutting test sentences (issue 38, part 1).

The BioBERT recipe trains on sentences cut into chunks of ``--max-words`` (30)
words. How the *test* sentences are cut changes every reported F1:

- ``label-guided``: 30-word chunks whose boundaries avoid the gold entities
  (greenadapt before e9dd321; it reads the answer key, so prediction on raw
  text could not reproduce it);
- ``label-blind``: 30-word chunks cut without the labels (e9dd321 to 0.x);
- ``whole``: each sentence is one sequence wherever the window holds it, cut
  only where it does not, at the window (today's rule, the paper's protocol).

The same weights are scored under each rule and each pooling mode, so only the
cut differs::

    python bench/rescore_ner.py --test ../shared/data/ner/NCBI-disease/test.tsv \\
        runs/base/seed-1 runs/base/seed-2 runs/green/seed-1 runs/green/seed-2 --json rescore.json

Prints a markdown table (rule x pooling mode, one row per run) and writes
the figures as JSON when ``--json`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

RULES = ("label-guided", "label-blind", "whole")


def rule_units(rule: str, task_file: Any, settings: Any, tokenizers: Any) -> list[Any]:
    from greenadapt.modeling.units import ner_units
    max_words = None if rule == "whole" else settings.max_words
    units, _ = ner_units(
        task_file.examples, settings.label2id, tokenizers,
        max_words=max_words, max_length=settings.max_length, cut_at_entities=rule == "label-guided",
    )
    return units


def rescore(run: Path, test: Path, *, batch_size: int = 64) -> dict[str, dict[str, float]]:
    """``{rule: {pool: f1}}`` for one fine-tuned run on ``test`` (entity F1 x 100)."""
    from greenadapt.inference.labelling import find_model_folder, open_finetuned
    from greenadapt.inference.settings import LoadSettings
    from greenadapt.tasks.base import argmax_labels

    opened = open_finetuned(*find_model_folder(run), LoadSettings(device="cpu", batch_size=batch_size))
    task = opened.task
    task_file = task.read(test, opened.settings, require_labels=True)
    pools = ("mean", "general", "domain") if opened.tokenizers.has_domain else ("general",)
    scores: dict[str, dict[str, float]] = {}
    for rule in RULES:
        units = rule_units(rule, task_file, opened.settings, opened.tokenizers)
        scores[rule] = {}
        for pool in pools:
            logits = opened.logits(units, task_file.examples, pool)
            predictions = task.decode(task_file, argmax_labels(logits, opened.settings.labels))
            scores[rule][pool] = round(100 * task.score(task_file, predictions, opened.settings)["f1"], 2)
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="fine-tuned run folders (one seed each)")
    parser.add_argument("--test", type=Path, required=True, help="the labelled test file the runs were scored on")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    results = {str(run): rescore(run, args.test) for run in args.runs}
    print("| run | pool | " + " | ".join(RULES) + " | whole − blind |")
    print("|---|---|" + "---:|" * (len(RULES) + 1))
    for run, scores in results.items():
        for pool in scores["whole"]:
            cells = " | ".join(f"{scores[rule][pool]:.2f}" for rule in RULES)
            print(f"| {run} | {pool} | {cells} | {scores['whole'][pool] - scores['label-blind'][pool]:+.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"test": str(args.test), "rules": list(RULES), "runs": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
