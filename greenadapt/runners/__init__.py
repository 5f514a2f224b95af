"""The training commands, each a runner over the task registry and the training runtime.

``finetune/`` (ner, classify and any registered labelling task), ``qa/`` (extractive QA over
whole documents), ``pretrain/`` (continued masked-LM pretraining, the DAPT comparator) and
``multitask/`` (PALs); ``setup`` is what the runners that fine-tune resolve before reading data (the model, its
tokenizers, G-MAP's general model, the output folder, the model's identity). Only the API and the CLI import them:
what a runner shares with prediction or ``compare`` lives below it (``inference/``, ``tasks/``, ``artifacts/kinds``).
"""
