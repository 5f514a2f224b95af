"""Every option's default is one value: the CLI's, the Python API's and the library config's agree, for every command.

The CLI and the API are built from one declaration, each command's settings class
(:mod:`greenadapt.options`); the first walk checks that the builders carry its defaults
faithfully. The library's own configurations (the dataclasses a runner builds, or the function it
calls) still hold defaults of their own, for library callers: the second walk fails on the first
that differs from the declaration, and when an option with a default is matched by no
configuration field (the allowlist says why each exception has no config field).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from greenadapt import api

EMPTY = (None, (), [])  # "nothing given": typer's [] for a repeatable option, the API's None or ()

# Parameters that steer a run rather than configure a result, or exist only in the API or CLI shape.
NOT_CONFIG = {"force", "wait", "progress", "out", "workdir", "model", "corpus", "train", "test", "dev", "task", "data", "config"}


@dataclasses.dataclass
class Source:
    """A library configuration: a dataclass (instance) or a function; ``names`` maps API names to its own."""

    config: Any
    names: dict[str, str | None] = dataclasses.field(default_factory=dict)  # None: this source has no such setting
    prefix: str = ""

    def defaults(self) -> dict[str, Any]:
        if dataclasses.is_dataclass(self.config):  # an instance built with its defaults (and placeholders for required fields)
            return {f.name: getattr(self.config, f.name) for f in dataclasses.fields(self.config)}
        return {n: p.default for n, p in inspect.signature(self.config).parameters.items() if p.default is not inspect.Parameter.empty}

    def default_for(self, api_name: str) -> tuple[bool, Any]:
        if api_name in self.names and self.names[api_name] is None:
            return (False, None)
        own = self.names.get(api_name)
        if own is None and self.prefix:
            own = api_name.removeprefix(self.prefix) if api_name.startswith(self.prefix) else None
        own = own or api_name
        defaults = self.defaults()
        return (own in defaults, defaults.get(own))


def _sources(command: str) -> tuple[Callable[..., Any], list[Source], dict[str, str], dict[str, str]]:
    """The API function, its config sources, CLI→API name aliases and the API parameters no config holds (with why)."""
    from greenadapt.adaptation.align import align_stage
    from greenadapt.adaptation.expand import expand_stage
    from greenadapt.adaptation.settings import MethodSettings, NewRowsSettings
    from greenadapt.options import declared_fields

    # The method's options reach the methods as the MethodSettings object itself: no library default to compare.
    method_options = {field.name: "received as the settings object itself" for field, _ in declared_fields(MethodSettings)
                      if field.name != "method"}
    table: dict[str, tuple[Callable[..., Any], list[Source], dict[str, str], dict[str, str]]] = {
        # these commands' libraries receive their settings objects as they are (no mirror to compare)
        "w2v": (api.w2v, [], {}, {}),
        "align": (api.align, [Source(align_stage)], {}, {"probe": "what the report shows, not a setting", **method_options}),
        "expand": (api.expand, [Source(expand_stage)], {},
                   {**{field.name: "received as the settings group itself" for field, _ in declared_fields(NewRowsSettings)},
                    "min_count_spelled": "--min-count, the deprecated spelling of --min-count-new: its value becomes min_count"}),
        "adapt": (api.adapt, [], {}, {}),
        "finetune": (api.finetune, [], {}, {}),
        "qa": (api.qa, [], {}, {}),
        "multitask": (api.multitask, [], {}, {}),
        "pretrain": (api.pretrain, [], {}, {}),
        "predict": (api.predict, [], {}, {}),  # predict_input receives the settings object itself (issue 85, item 6)
        "compare": (api.compare, [], {}, {}),
    }
    return table[command]


# Options whose default depends on the task or the model: None where that is decided later (greenadapt.tasks).
TASK_DEPENDENT = ("epochs", "batch_size", "lr", "max_length", "max_words", "pool", "device")

COMMANDS = ["w2v", "align", "expand", "adapt", "finetune", "qa", "multitask", "pretrain", "predict", "compare"]
MIRRORED = ["align", "expand"]  # commands whose library still keeps a config of its own


def _cli_params(command: str) -> list[Any]:
    import typer.main

    from greenadapt.cli import _register, app

    _register()
    return typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]


def _same(a: Any, b: Any) -> bool:
    if a in EMPTY and b in EMPTY:
        return True
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return list(a) == list(b)
    if isinstance(a, str) and isinstance(b, list | tuple):  # a comma-separated CLI list, e.g. --seeds 1,2,3
        return a == ",".join(map(str, b))
    return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)


@pytest.mark.parametrize("command", COMMANDS)
def test_the_cli_default_of_every_option_is_the_api_default(command: str) -> None:
    function, _, aliases, _ = _sources(command)
    signature = inspect.signature(function).parameters
    compared = 0
    for param in _cli_params(command):
        name = aliases.get(param.name, param.name)
        if name not in signature or param.required or param.param_type_name == "argument":
            continue
        if signature[name].default is inspect.Parameter.empty:  # required: checked when the settings are built (--config may hold it)
            continue
        api_default = signature[name].default
        assert api_default is not inspect.Parameter.empty, \
            f"{command} --{param.name} has a CLI default but greenadapt.{command}({name}) has none"
        shown = param.show_default if isinstance(param.show_default, str) else param.default  # a parsed option shows its text
        assert _same(shown, api_default), f"{command} --{param.name}: CLI {shown!r}, API {api_default!r}"
        compared += 1
    assert compared >= 5, f"{command}: only {compared} options compared"


@pytest.mark.parametrize("command", MIRRORED)
def test_the_api_default_of_every_setting_is_the_library_configs(command: str) -> None:
    function, sources, _, unconfigured = _sources(command)
    unmatched = []
    compared = 0
    for name, param in inspect.signature(function).parameters.items():
        if param.default is inspect.Parameter.empty or name in NOT_CONFIG or name in unconfigured:
            continue
        matched = False
        for source in sources:
            known, default = source.default_for(name)
            if not known:
                continue
            matched = True
            if None in (default, param.default) and name in TASK_DEPENDENT:
                continue  # None on one side: "the task's (or the model's)" value, which the other side spells out

            declared_by = type(source.config).__name__ if dataclasses.is_dataclass(source.config) else source.config.__name__
            assert _same(default, param.default), f"greenadapt.{command}({name}={param.default!r}) but {declared_by} says {default!r}"
            compared += 1
        if not matched:
            unmatched.append(name)
    assert not unmatched, f"greenadapt.{command}: parameters with a default that no library config holds: {unmatched}"
    assert compared >= 3, f"{command}: only {compared} defaults compared"


def test_the_defaults_the_generic_walk_cannot_name_agree_too() -> None:
    from greenadapt.inference.prediction_input import STDIO

    def default_of(function: Callable[..., Any], name: str) -> Any:
        return inspect.signature(function).parameters[name].default

    assert default_of(api.predict, "output") == STDIO
    from greenadapt.data.task_files import ReaderOptions

    assert default_of(api.predict, "file_format") == ReaderOptions().format  # --format is the reader's format when a task file is read


def test_the_walk_fails_when_one_default_changes_in_one_place(monkeypatch: pytest.MonkeyPatch) -> None:
    # The guard itself: change one API default and the walk must notice, in both directions.
    signature = inspect.signature(api.w2v)
    changed = signature.parameters["min_count"].replace(default=signature.parameters["min_count"].default + 1)
    monkeypatch.setattr(api.w2v, "__signature__", signature.replace(parameters=[changed if p.name == "min_count" else p
                                                                                for p in signature.parameters.values()]))
    with pytest.raises(AssertionError, match="min_count"):
        test_the_cli_default_of_every_option_is_the_api_default("w2v")
    with pytest.raises(AssertionError, match="min_count"):
        test_the_api_default_of_every_setting_is_the_library_configs("w2v")


def test_load_takes_every_option_of_a_loaded_model_with_its_default() -> None:
    """greenadapt.load's keywords are LoadOptions' options (LoadSettings' and a QA folder's window and answer length),
    each with the declared default: made from the declaration, with no copy of it to keep in step."""
    from greenadapt.inference.qa.settings import LoadOptions
    from greenadapt.inference.settings import LoadSettings
    from greenadapt.options import declared_fields

    keywords = {name: p.default for name, p in inspect.signature(api.load).parameters.items() if name != "path"}
    declared = {field.name: getattr(LoadOptions(), field.name) for field, _ in declared_fields(LoadOptions)}
    assert keywords == declared and {"max_length", "max_answer_chars", "runtime", "threads"} <= set(keywords)
    assert {field.name for field, _ in declared_fields(LoadSettings)} < set(keywords)
