"""greenadapt: cheap domain adaptation of pretrained language models.

The Python API (:mod:`greenadapt.api`) is re-exported here, loaded on first
use so that importing the package stays free of torch, transformers and
gensim and ``greenadapt --help`` stays instant. No subpackage shares a name
with an API function, so ``greenadapt.finetune`` is always the function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from greenadapt.version import __version__ as __version__

if TYPE_CHECKING:  # what type checkers and editors see of the lazily loaded functions whose signatures are typed
    from greenadapt.api.using import load as load


def __getattr__(name: str) -> Any:
    # ``__all__`` too is read from the API on first use, so a new command's function needs no line here.
    # import_module, not ``from greenadapt import api``: that asks this very function for ``api`` again.
    import importlib

    if name.startswith("__") and name != "__all__":  # what inspect and pickle probe for: not the API
        raise AttributeError(f"module 'greenadapt' has no attribute {name!r}")
    api = importlib.import_module("greenadapt.api")
    if name == "__all__":
        return list(api.FUNCTIONS)
    if name in api.FUNCTIONS:
        return getattr(api, name)
    raise AttributeError(f"module 'greenadapt' has no attribute {name!r}")


def __dir__() -> list[str]:
    """What ``dir(greenadapt)`` and a notebook's completion show: the commands too (the API is loaded on first use)."""
    import importlib

    dunders = {name for name in globals() if name.startswith("__")}  # not the typing names this module imports
    return sorted({*dunders, *importlib.import_module("greenadapt.api").FUNCTIONS})
