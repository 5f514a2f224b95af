"""The training commands, each a runner over the task registry and the training runtime.

``finetune/`` (ner, classify and any registered labelling task), ``qa/`` (extractive QA over
whole documents), ``pretrain/`` (continued masked-LM pretraining, the DAPT comparator) and
``multitask/`` (PALs). Nothing outside the CLI, the API, ``inference`` and ``comparison`` imports them.
"""
