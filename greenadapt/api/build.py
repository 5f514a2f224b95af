"""Each API function is made from its command's settings class: the same options, names and defaults as the CLI.

``greenadapt.finetune("ner", "train.tsv", test="test.tsv", lr=3e-5)`` builds a
:class:`~greenadapt.runners.finetune.settings.FinetuneSettings` (every check runs there), a
:class:`~greenadapt.options.Run` from the run keywords (``workdir``, ``out``, ``force``, ``wait``,
``progress``), and calls the command's runner. The typed route is the settings object itself:
``greenadapt.finetune(FinetuneSettings(task="ner", train=...), out=...)``; ``config=FILE`` starts from a
run folder's ``options.json`` (or a TOML file), keywords overriding it.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from greenadapt.options import RUN_OPTIONS, Settings, call_command, declared_fields, required

# Every API function takes these besides its options (and the run options its command has).
_CONFIG = inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="PathLike | None")
_PROGRESS = inspect.Parameter("progress", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="Progress | bool | None")


def command_function(settings_class: type[Settings], runner: str, doc: str) -> Callable[..., Any]:
    """``greenadapt.<command>``: ``runner`` (``"module:function"``, imported when called) given the settings and the run."""

    def function(*args: Any, config: Any = None, progress: Any = None, **keywords: Any) -> Any:
        return call_command(settings_class, runner, *args, config=config, progress=progress, **keywords)

    function.__name__ = function.__qualname__ = settings_class.command.replace("-", "_")  # second-view: greenadapt.second_view
    function.__doc__ = doc
    function.__module__ = "greenadapt.api"
    function.__signature__ = signature_of(settings_class)  # type: ignore[attr-defined]
    function.settings_class = settings_class  # type: ignore[attr-defined]
    return function


def keyword_parameters(settings_class: type[Settings], skip: tuple[str, ...] = ()) -> list[inspect.Parameter]:
    """Every option of ``settings_class`` (but ``skip``) as a keyword-only parameter with its declared default."""
    hints = {f.name: f.type for f in dataclasses.fields(settings_class)}
    return [inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY,
                              default=inspect.Parameter.empty if required(field) else field.default, annotation=hints[field.name])
            for field, _ in declared_fields(settings_class) if field.name not in skip]


def signature_of(settings_class: type[Settings]) -> inspect.Signature:
    """What ``help(greenadapt.<command>)`` shows: the positional options, then every option with its default."""
    hints = {f.name: f.type for f in dataclasses.fields(settings_class)}
    fields = {f.name: f for f, _ in declared_fields(settings_class)}
    parameters = []
    for name in settings_class.positional:
        annotation = RUN_OPTIONS[name][0] if name in RUN_OPTIONS else hints[name]
        default = inspect.Parameter.empty if name not in fields or required(fields[name]) else fields[name].default
        parameters.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=annotation))
    parameters += keyword_parameters(settings_class, skip=settings_class.positional)
    for name in settings_class.run_options:
        if name not in settings_class.positional:
            kind, _ = RUN_OPTIONS[name]
            default = inspect.Parameter.empty if name == "out" and settings_class.out_required else (False if kind is bool else None)
            parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind))
    return inspect.Signature([*parameters, _CONFIG, _PROGRESS])
