"""The Python API: every command the notebooks and services need, as typed functions.

Every command is a function here, re-exported from the package
(``greenadapt.w2v``, ``align``, ``expand``, ``adapt``, ``finetune``, ``qa``, ``multitask``, ``pretrain``,
``compare``, ``predict``, ``evaluate``, ``export``, ``info``, ``report``; and ``load``, ``pipeline``). Each command's
function and its command-line options are built from one declaration, the command's settings class
(:mod:`greenadapt.options`), so a script and a shell pipeline given the same arguments name the same
outputs and reuse each other's finished stages.

This module stays import-light (torch, transformers and gensim are imported
inside the functions) because the command line imports it for its defaults.

Example::

    import greenadapt

    adapted = greenadapt.adapt(["notes/*.txt"], out="runs/clinical-minilm")
    run = greenadapt.finetune("ner", "train.tsv", test="test.tsv", model=adapted.expand.path)
    model = greenadapt.load(run.path)
    model.predict("BRCA1 mutations cause breast cancer.")
"""

from __future__ import annotations

from greenadapt.api import adapting, training, using
from greenadapt.api.adapting import *  # noqa: F403 (each module's __all__ is its commands)
from greenadapt.api.common import PathLike
from greenadapt.api.training import *  # noqa: F403
from greenadapt.api.using import *  # noqa: F403

# The functions ``greenadapt`` re-exports: a new command's function joins by its module's ``__all__``.
FUNCTIONS = sorted([*adapting.__all__, *training.__all__, *using.__all__])
__all__ = ["FUNCTIONS", "PathLike"]
__all__ += adapting.__all__
__all__ += training.__all__
__all__ += using.__all__
