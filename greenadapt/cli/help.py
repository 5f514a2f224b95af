"""How every command's ``--help`` reads: human metavars, options grouped into panels, a worked example.

Applied once to the whole command tree (:func:`dress`), so a new option gets its
metavar from its type and its panel from its declaration (:mod:`greenadapt.options`); the
tests check that every option of every command has a panel and no Python type shows.
"""

from __future__ import annotations

import copy
from typing import Any

from greenadapt.options import EVALUATION, INPUT_OUTPUT, RUN_CONTROL

# Panels of the options no settings class declares (each declared option names its own panel): the output
# flags every command shares and the read-only display commands' (report, info).
_GROUPS: dict[str, tuple[str, ...]] = {
    INPUT_OUTPUT: ("runs", "html", "path"),
    EVALUATION: ("check",),
    RUN_CONTROL: ("as_json", "quiet", "verbose"),
}
PANELS = {name: panel for panel, names in _GROUPS.items() for name in names}

EXAMPLES: dict[str, str] = {
    "adapt": "greenadapt adapt --corpus biomed.txt.gz --model bert-base-uncased",
    "w2v": "greenadapt w2v --corpus 'abstracts/*.jsonl.gz' --text-field abstract --workers 8",
    "align": "greenadapt align --w2v greenadapt-work/biomed-1a2b/minilm/w2v --method lstsq",
    "expand": "greenadapt expand --align greenadapt-work/biomed-1a2b/minilm/align --max-new 20000",
    "finetune": "greenadapt finetune --task ner --model greenadapt-work/biomed-1a2b/minilm/expand --train train.tsv --dev dev.tsv --test "
                "test.tsv --seeds 1,2,3",
    "qa": "greenadapt qa --model runs/covid-qa --data questions.json --out runs/answers",
    "predict": "cat abstracts.txt | greenadapt predict -m runs/ncbi - > entities.jsonl",
    "pretrain": "greenadapt pretrain --corpus biomed.txt.gz --model bert-base-uncased --max-steps 10000 --save-every 1000",
    "multitask": "greenadapt multitask --model MODEL --task name=ncbi,type=ner,train=ncbi/train.tsv --task "
                 "name=rte,type=classify,train=rte/train.tsv",
    "report": "greenadapt report greenadapt-work runs --html report.html",
    "compare": "greenadapt compare --task ner --model base=bert-base-uncased --model green=greenadapt-work/biomed-1a2b/minilm/expand "
               "--train train.tsv --dev dev.tsv --test test.tsv --seeds 1,2,3",
    "info": "greenadapt info greenadapt-work/biomed-1a2b/minilm/expand",
}


def complete_corpus(incomplete: str) -> list[str]:
    """Shell completion of ``--corpus``: the registered corpus names (files complete as files)."""
    from greenadapt.corpus.recipes import available_corpora

    return [name for name in sorted(available_corpora()) if name.startswith(incomplete)]


def complete_task(incomplete: str) -> list[str]:
    from greenadapt.tasks import TASKS

    return [name for name in TASKS if name.startswith(incomplete)]


def complete_method(incomplete: str) -> list[str]:
    from greenadapt.adaptation.methods import METHODS

    return [name for name in METHODS if name.startswith(incomplete)]


_COMPLETIONS = {"corpus": complete_corpus, "task": complete_task, "method": complete_method}


# A click parameter type's class (or a base of it) -> the metavar; typer before 0.28 hands click types.
_METAVAR_OF_CLICK_TYPE = {
    "Choice": None, "BoolParamType": None, "Path": "PATH", "TyperPath": "PATH", "File": "PATH",
    "IntParamType": "N", "FloatParamType": "FLOAT", "StringParamType": "TEXT",
}
_METAVAR_OF_ANNOTATION = {"int": "N", "float": "FLOAT", "str": "TEXT", "Path": "PATH", "bool": None}


def metavar_for(param: Any) -> str | None:
    """A human metavar from the parameter's type (None: keep what it declared, or a choice list).

    typer 0.28 and later describe a parameter by its annotation (``type_descriptor``); earlier
    releases by a click type, so both are read: ``pyproject.toml`` allows either.
    """
    if getattr(param, "is_flag", False):
        return ""  # a switch takes no value
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None:
        for kind in type(param.type).__mro__:
            if kind.__name__ in _METAVAR_OF_CLICK_TYPE:
                return _METAVAR_OF_CLICK_TYPE[kind.__name__]
        return "VALUE"
    if descriptor.is_choice:
        return None
    if descriptor.is_path:
        return "PATH"
    element = param.bare_type().removeprefix("list[").removesuffix("]")
    return _METAVAR_OF_ANNOTATION.get(element, "VALUE")


def _shell_complete(complete: Any) -> Any:
    def shell_complete(ctx: Any, param: Any, incomplete: str) -> list[str]:
        return complete(incomplete)  # typer wraps strings into completion items

    return shell_complete


def _no_type(ctx: Any) -> str:
    return ""


def _without_metavar(kind: Any) -> Any:
    """A copy of a click type whose metavar is empty (a copy: click shares one STRING, INT, ... everywhere)."""
    quiet = copy.copy(kind)
    quiet.get_metavar = lambda param, ctx=None: ""
    return quiet


def _with_dressed_help(get_help_option: Any, panel: str | None = RUN_CONTROL) -> Any:
    # click makes --help per invocation (get_help_option), so it is dressed as it is made.
    def dressed(ctx: Any) -> Any:
        option = get_help_option(ctx)
        if option is not None:
            option.metavar, option.rich_help_panel = "", panel
        return option

    return dressed


def dress(group: Any) -> Any:
    """Give every command of ``group`` its panels, metavars and example (in place); returns ``group``."""
    for param in group.params:  # the global options: one panel, metavars only
        if param.metavar is None:
            param.metavar = metavar_for(param)
    group.get_help_option = _with_dressed_help(group.get_help_option, panel=None)
    for name, command in group.commands.items():
        for param in command.params:
            if param.metavar is None:
                param.metavar = metavar_for(param)
            if param.name in _COMPLETIONS and name != "multitask":  # multitask's --task is a spec, not a name
                param._custom_shell_complete = _shell_complete(_COMPLETIONS[param.name])
            if getattr(param, "param_type_name", "") == "argument":
                # its metavar (INPUT, RUN, PATH) already says what it takes: no type column beside it
                if hasattr(type(param), "display_type_rich"):
                    param.display_type_rich = _no_type
                else:  # typer before 0.28 asks the click type
                    param.type = _without_metavar(param.type)
            if getattr(param, "param_type_name", "") == "option" and param.name != "help":
                param.rich_help_panel = param.rich_help_panel or PANELS.get(param.name)
        command.get_help_option = _with_dressed_help(command.get_help_option)
        example = EXAMPLES.get(name)
        if example and example not in (command.epilog or ""):
            command.epilog = f"Example: {example}" + (f"\n\n{command.epilog}" if command.epilog else "")
    return group
