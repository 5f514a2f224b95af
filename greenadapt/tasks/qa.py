"""Extractive question answering: SQuAD-style JSON; exact match and F1 over whole documents.

Reader: :func:`greenadapt.data.squad.read_squad`. Units: ``[CLS] question [SEP]
context [SEP]`` windows with a stride, answer positions per window
(:func:`greenadapt.runners.qa.features.featurize`). Head: ``AutoModelForQuestionAnswering``.
Collator: :func:`greenadapt.runners.qa.loop.collate_windows`. Loss: transformers' (start + end) / 2.
Metric: SQuAD exact match and F1 over each question's whole context
(:mod:`greenadapt.data.squad_metrics`), answered as ``greenadapt qa`` answers.

Its defaults are the usual SQuAD recipe (BERT: 2 epochs, lr 3e-5, 384/128
windows); batch 16 fits a 12 GB GPU.
"""

from __future__ import annotations

from greenadapt.tasks.base import Task, TaskDefaults


class QaTask(Task):
    name = "qa"
    pipeline_tag = "question-answering"
    auto_model = "AutoModelForQuestionAnswering"
    answers_questions = True
    summary = "extractive question answering: SQuAD-style JSON (answer with `greenadapt qa`); exact match and F1"
    defaults = TaskDefaults(epochs=2, batch_size=16, lr=3e-5, max_length=None, pool=None)  # max length: 384, or the model's limit
    # Reader options, label options and per-seed runs belong to the labelling tasks (the QA loop keeps checkpoints as
    # finetune's does: --save-every, --save-minutes, --resume).
    unused_options = (
        "max_words", "metric", "positive_label", "train_on",
        "text_field", "pair_field", "label_field", "file_format", "header", "entity_type",
        "report_to",
        "agreement", "both_views", "label_smoothing",  # two views a step and smoothed labels are for NER and classification
        "eval_every", "early_stopping",  # the QA loop scores --dev once, after training
    )
