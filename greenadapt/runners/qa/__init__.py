"""Fine-tuning a question-answering model on SQuAD-style data (``greenadapt finetune --task qa``) with one or two
tokenizers: ``features`` cuts the training windows, ``loop`` is QA's task of the one training runtime, ``train`` the
stage. Answering questions (``greenadapt qa``, QA training's dev evaluation, ``greenadapt.load``) is
:mod:`greenadapt.inference.qa`'s.

Kept import-free so ``greenadapt --help`` does not load numpy or torch.
"""
