"""greenadapt: cheap domain adaptation of pretrained language models.

The Python API (:mod:`greenadapt.api`) is re-exported here lazily:
``greenadapt.adapt``, ``finetune``, ``qa``, ``load`` and ``pipeline``.
Importing the package stays free of torch, transformers and gensim, so
``greenadapt --help`` stays instant.

Three API functions share their names with modules (``greenadapt.adapt``,
``greenadapt.finetune``, ``greenadapt.qa``). Python binds a submodule on its
parent once it is imported, which would hide the function; so the package
watches those bindings and makes the module callable as the API function of
its name: ``greenadapt.finetune(...)`` works whatever was imported before,
and ``greenadapt.finetune.run`` is still the module.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__version__ = "0.1.0"
__all__ = ["adapt", "compare", "finetune", "load", "pipeline", "qa"]
_CALLABLE_MODULES = ("adapt", "finetune", "qa")  # modules that share an API function's name


def __getattr__(name: str) -> Any:
    if name in __all__:
        from greenadapt import api

        return getattr(api, name)
    raise AttributeError(f"module 'greenadapt' has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from greenadapt import api

        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _CALLABLE_MODULES and type(value) is types.ModuleType:
            value.__class__ = _CallableModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
