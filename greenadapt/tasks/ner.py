"""Named-entity recognition: word-per-line files (or token JSON lines), BIO/BIOES labels, entity F1.

Reader: :func:`greenadapt.data.task_files.read_task_file` (columns, token JSON lines).
Units: training sentences cut into chunks of at most ``max_words`` words without
splitting a labelled span (the BioBERT recipe); sentences that are scored or
predicted are kept whole wherever the window holds them, as the paper scores
them, and only what does not fit is cut, at the window, without looking at the
labels (:func:`greenadapt.modeling.units.ner_units`); labels on word-initial
wordpieces. Head: ``AutoModelForTokenClassification``.
Collator: :func:`greenadapt.compute.batches.collate`. Metric: seqeval-style
entity F1 (:func:`greenadapt.data.metrics.entity_scores`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from greenadapt.tasks.base import LabellingTask, TaskDefaults, TaskSettings

if TYPE_CHECKING:
    from greenadapt.artifacts.model_folder import TokenizerPair
    from greenadapt.data.task_files import TaskFile
    from greenadapt.modeling.units import Unit


class NerTask(LabellingTask):
    name = "ner"
    pipeline_tag = "token-classification"
    summary = "named entities: a word and its BIO/BIOES label per line (or token JSON lines); entity F1"
    defaults = TaskDefaults()
    unused_options = ("positive_label", "doc_stride")
    auto_model = "AutoModelForTokenClassification"
    metrics = ("f1", "precision", "recall", "accuracy")
    default_metric = "f1"
    finds_entities = True

    def order_labels(self, labels: Sequence[str]) -> list[str]:
        from greenadapt.data.metrics import split_tag

        # O first, then by entity type, B/I/E/S within a type: a readable, stable label map.
        def key(label: str) -> tuple[int, str, int]:
            prefix, kind = split_tag(label)
            return (0 if label == "O" else 1, kind, "BIES".find(prefix))

        return sorted(set(labels), key=key)

    def units(
        self, task_file: TaskFile, settings: TaskSettings, tokenizers: TokenizerPair, *, training: bool = False
    ) -> tuple[list[Unit], dict[str, int]]:
        from greenadapt.modeling.units import ner_units

        return ner_units(
            task_file.examples,
            settings.label2id if task_file.labelled else None,
            tokenizers,
            # Scored and predicted sentences stay whole where the window holds them: a 30-word cut of test sentences
            # cost every model about 1.5 F1 on NCBI-disease (issue 38) and is not how the paper scores.
            max_words=settings.max_words if training else None,
            max_length=settings.max_length,
            cut_at_entities=training,
        )

    def decode(self, task_file: TaskFile, row_labels: Sequence[str]) -> list[Any]:
        predictions = []
        position = 0
        for sentence in task_file.examples:
            n = len(sentence.words)
            predictions.append(list(row_labels[position : position + n]))
            position += n
        if position != len(row_labels):
            raise RuntimeError("word rows and sentences do not line up")
        return predictions

    def score(self, task_file: TaskFile, predictions: Sequence[Any], settings: TaskSettings) -> dict[str, Any]:
        from greenadapt.data.metrics import entity_scores
        from greenadapt.data.task_files import NerSentence

        gold = [s.labels for s in task_file.examples if isinstance(s, NerSentence) and s.labels is not None]
        return entity_scores(gold, predictions)
