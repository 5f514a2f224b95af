"""Fine-tuning and prediction with two tokenizers (``greenadapt finetune`` / ``predict``).

The model folder may carry a domain tokenizer T̂ at its top and the general
tokenizer T_LM in ``general-tokenizer/`` (what ``greenadapt expand`` writes),
or be a plain transformers folder with one tokenizer. Training tokenizes each
example with T̂ with probability ``mix``; inference runs both tokenizers and
mean-pools the logits of each word (NER) or sequence (classification).

Modules: ``data`` (task files in and predictions out), ``tokenize`` (both
tokenizations, word ↔ wordpiece alignment, chunking), ``embeddings`` (the
word-embedding split that keeps very large added vocabularies cheap),
``train`` (the loop), ``infer`` (pooled logits), ``metrics`` (conlleval
entity F1, accuracy, F1, MCC), ``tasks`` (what differs between tasks),
``run`` (the stage functions the CLI calls).
"""

from __future__ import annotations

POOL_MODES = ("mean", "general", "domain")
