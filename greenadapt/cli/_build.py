"""Each command's options are made from its settings class (spaCy's ``cli/train.py`` shape: a thin command over a function).

:func:`declared_command` turns every declared option (:mod:`greenadapt.options`) into a typer option with
its flags, help, panel and bounds, adds the run options the command takes, ``--config FILE`` and the
output flags, and registers a command that passes the options *given* on the command line (the rest
come from ``--config`` or the declaration's default) to the command's API function.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer

from greenadapt.cli._common import JsonOption, QuietOption, VerboseOption, progress_for, setup_logging
from greenadapt.options import RUN_CONTROL, RUN_OPTIONS, Declaration, Settings, declared_fields, required
from greenadapt.options.python_terms import on_the_command_line
from greenadapt.options.values import is_switch

_OUTPUT_FLAGS = ("as_json", "quiet", "verbose")
_NEGATED = "no__"  # the parameter of an option's hidden --no- form


def config_option(settings_class: type[Settings]) -> Any:
    names = {field.name for field, _ in declared_fields(settings_class)}
    # the example overrides an option this command has (compare, predict and evaluate take no --seed)
    override = " --seed 2" if "seed" in names else " --out runs/y" if "out" in settings_class.run_options else ""
    return typer.Option(
        None, "--config", metavar="FILE", rich_help_panel=RUN_CONTROL,
        help=f"Start from a config file: a run folder's options.json (or the folder) or a TOML file of option = value; options "
             f"given here override it, --no-FLAG turns off a flag it set (greenadapt {settings_class.command} --config runs/x{override}).")


def declared_command(
    settings_class: type[Settings],
    api_function: Callable[..., Any],
    show: Callable[[Any, bool], None],
    *,
    help: str,  # noqa: A002 (typer's word)
    example: str | None = None,
    check: Callable[[Mapping[str, Any]], None] | None = None,
    app: Any = None,
    **command_settings: Any,
) -> Callable[..., None]:
    """Register ``greenadapt <settings_class.command>`` (``help``: its one-line description) on ``app`` (default: greenadapt's);
    ``check(values)``: what only the command line can get wrong."""
    from greenadapt.cli.help import EXAMPLES

    if app is None:
        from greenadapt.cli import app

    name = settings_class.command
    if example is not None:
        EXAMPLES[name] = example
    declared = {field.name: declaration for field, declaration in declared_fields(settings_class)}
    hints = typing.get_type_hints(settings_class)
    parameters = [_parameter(field, declaration, hints[field.name]) for field, declaration in declared_fields(settings_class)]
    # --no-cuda-graphs: a true flag a --config file gave is turned off on the command line (hidden: --config's help says so);
    # --no-both-views: a flag whose default depends on the model is turned off
    negated = {_NEGATED + field.name: field.name for field, declaration in declared_fields(settings_class)
               if is_switch(hints[field.name]) and declaration.flags[0].startswith("--")}
    parameters += [_keyword(name, bool, typer.Option(False, declared[field].negated, hidden=True,
                                                     rich_help_panel=declared[field].panel or RUN_CONTROL))
                   for name, field in negated.items()]
    for run_name in settings_class.run_options:
        kind, declaration = RUN_OPTIONS[run_name]
        help_text = settings_class.run_help.get(run_name, declaration.help)
        if run_name == "out" and settings_class.out_required:
            help_text += " (required)"
        parameters.append(_keyword(run_name, kind, _option(False if kind is bool else None,
                                                           dataclasses.replace(declaration, help=help_text))))
    parameters.append(_keyword("config", Path | None, config_option(settings_class)))
    parameters += [_keyword(flag, bool, default) for flag, default in zip(_OUTPUT_FLAGS,
                                                                          (JsonOption, QuietOption, VerboseOption), strict=True)]

    def command(**values: Any) -> None:
        setup_logging(quiet=values["quiet"], verbose=values["verbose"])
        if check is not None:
            check(values)
        given = {key: _parsed(value, declared.get(key)) for key, value in values.items()
                 if key not in _OUTPUT_FLAGS and key != "config" and key not in negated and _given(key)}
        for negation, name in negated.items():
            if values[negation]:
                if given.get(name):
                    from greenadapt.errors import UsageError

                    raise UsageError(f"{declared[name].flags[0]} and {declared[name].negated} were both given", hint="give one")
                given[name] = False
        with progress_for(values["quiet"]) as progress, on_the_command_line():
            result = api_function(config=values["config"], progress=progress, **given)
        show_scrubbed(show, result, values["as_json"])

    command.__name__ = f"{name}_command"
    command.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    app.command(name, help=help, **command_settings)(command)
    return command


def show_scrubbed(show: Callable[[Any, bool], None], result: Any, as_json: bool) -> None:
    """A command's summary (or JSON) on stdout, every line scrubbed of credentials; a prediction's own lines, which are
    the user's data, are written before this, as they are."""
    import sys

    from greenadapt.redaction import ScrubbedLines

    stdout = sys.stdout
    sys.stdout = ScrubbedLines(stdout)
    try:
        show(result, as_json)
    finally:
        sys.stdout.flush()
        sys.stdout = stdout


def _keyword(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def _parameter(field: dataclasses.Field[Any], declaration: Declaration, hint: Any) -> inspect.Parameter:
    annotation = declaration.cli_type if declaration.cli_type is not None else _cli_type(hint)
    default: Any
    if declaration.parse is not None:
        default = None if typing.get_origin(annotation) is not list else []
    elif required(field):
        default = [] if typing.get_origin(_without_none(annotation)) is list else None
    else:
        default = list(field.default) if isinstance(field.default, tuple) else field.default
    if declaration.argument:
        made = typer.Argument(default, metavar=declaration.metavar, help=declaration.help + (" (required)" if required(field) else ""),
                              show_default=False if default is None else True)
    else:
        made = _option(default, declaration, required_=required(field))
    return _keyword(field.name, annotation, made)


def _option(default: Any, declaration: Declaration, *, required_: bool = False) -> Any:
    extra: dict[str, Any] = {}
    if declaration.minimum is not None:
        extra["min"] = declaration.minimum
    if declaration.maximum is not None:
        extra["max"] = declaration.maximum
    if declaration.shown is not None:
        extra["show_default"] = declaration.shown
    return typer.Option(default, *declaration.flags, help=declaration.help + (" (required)" if required_ else ""),
                        metavar=declaration.metavar, rich_help_panel=declaration.panel, **extra)


def _without_none(hint: Any) -> Any:
    members = [m for m in (typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)) if m is not type(None)]
    return members[0] if len(members) == 1 else hint


def _cli_type(hint: Any) -> Any:
    """What the command line reads for a field of type ``hint``: a tuple is a repeatable option (a list)."""
    bare = _without_none(hint)
    if typing.get_origin(bare) is tuple:
        element = typing.get_args(bare)[0]
        return list[element]  # type: ignore[valid-type]
    return bare | None if bare is not bool else bool


def _parsed(value: Any, declaration: Declaration | None) -> Any:
    if declaration is None or declaration.parse is None:
        return value
    return declaration.parse(value)


def _given(name: str) -> bool:
    """Whether the running command's option ``name`` was given (on the command line or in the environment), not defaulted."""
    from typer._click.globals import get_current_context  # typer vendors click: its context, not click's

    ctx = get_current_context(silent=True)
    source = ctx.get_parameter_source(name) if ctx is not None else None
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")
