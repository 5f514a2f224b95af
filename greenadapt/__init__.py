"""greenadapt: cheap domain adaptation of pretrained language models.

The Python API (:mod:`greenadapt.api`) is re-exported here, loaded on first
use so that importing the package stays free of torch, transformers and
gensim and ``greenadapt --help`` stays instant. No subpackage shares a name
with an API function, so ``greenadapt.finetune`` is always the function.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["adapt", "align", "compare", "expand", "finetune", "load", "multitask", "pipeline", "predict", "pretrain", "qa", "w2v"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from greenadapt import api

        return getattr(api, name)
    raise AttributeError(f"module 'greenadapt' has no attribute {name!r}")
