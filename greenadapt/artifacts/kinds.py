"""The kinds of folder greenadapt writes: the ``kind`` field of a manifest, named once.

Readers (``predict``, ``report``, ``compare``, ``info``) recognise a folder by its kind, so the
names live below every stage and runner rather than in the runner that writes them.
"""

from __future__ import annotations

PRETOKENIZED = "pretok"
W2V = "w2v"
ALIGN = "align"
EXPAND = "expand"
MLM_TOKENS = "mlm-tokens"
PRETRAIN = "pretrain"
FINETUNE = "finetune"  # every fine-tuned run folder, QA's included
QA = "qa"  # answers to a SQuAD-style file
MULTITASK = "multitask"
ONNX_EXPORT = "onnx-export"  # an entry of a model folder's cache: its weights exported (and quantized) for ONNX Runtime
SECOND_VIEW = "second-view"  # a model's two-tokenizer folder with a second view of its own vocabulary (no new rows)

ADAPTATION = (W2V, ALIGN, EXPAND)
CACHES = (PRETOKENIZED, MLM_TOKENS, ONNX_EXPORT)  # stages no command is run for: they keep no options.json
TRAINED = (FINETUNE, PRETRAIN)
PREDICTIONS_DIR = "predictions"
COMPARE_RESULT = "compare.json"  # a compare folder's result (it has no manifest of its own)


def by_pool_file_name(split: str) -> str:
    """Where a run folder keeps ``split``'s gold and per-pooling-mode predictions (under ``predictions/``)."""
    return f"{split}.by_pool.json"
