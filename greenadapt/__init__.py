"""greenadapt: cheap domain adaptation of pretrained language models.

Kept import-free on purpose: ``greenadapt --help`` must not pay for torch,
transformers or gensim.
"""

__version__ = "0.1.0"
