"""Continued masked-LM pretraining (domain-adaptive pretraining, the DAPT baseline), optionally with G-MAP memory.

Modules: ``settings`` (the command's options), ``data`` (the tokenized
corpus cache, packing into sequences, held-out split, BERT masking), ``train``
(the training loop: AdamW with warm-up and linear decay, gradient
accumulation, autocast, DDP, checkpoints), ``run`` (the ``pretrain`` stage and
``--eval-only``: what the CLI calls).

Kept import-free so ``greenadapt --help`` does not load torch.
"""

from __future__ import annotations
