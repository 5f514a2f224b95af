"""Extractive question answering at inference: windows over whole documents, word-level pooling over both tokenizers,
n-best spans; ``run`` is the ``greenadapt qa`` stage and ``settings`` its options (QA training is
:mod:`greenadapt.runners.qa`)."""
