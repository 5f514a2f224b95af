"""The ``greenadapt`` command line.

One module per command (``greenadapt/cli/<command>.py``); each parses its
options and calls a plain library function that knows nothing of typer.
Heavy libraries (torch, transformers, gensim) are imported inside the
commands, so ``greenadapt --help`` stays instant.
"""

from __future__ import annotations

import inspect
import os
import re
from typing import Any

import typer

from greenadapt.version import __version__

app = typer.Typer(
    name="greenadapt",
    help="Cheap domain adaptation of BERT-style models: w2v -> align -> expand on CPU, then finetune.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"greenadapt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
    co2_intensity: float | None = typer.Option(
        None, "--co2-intensity", min=0, metavar="G",
        help="Grid carbon intensity in g CO2/kWh for the manifests' CO2 figures (default: $GREENADAPT_CO2_INTENSITY, else world average).",
    ),
    country: str | None = typer.Option(
        None, "--country", metavar="XX", help="Take the grid carbon intensity of this country (ISO code, e.g. DE; Ember 2023 averages)."
    ),
    heartbeat: float | None = typer.Option(
        None, "--heartbeat", min=0, metavar="SECONDS",
        help="When stderr is not a terminal (cron, CI, nohup): a progress line every SECONDS (default: $GREENADAPT_HEARTBEAT, else 30; 0: "
             "none).",
    ),
) -> None:
    """greenadapt: domain vocabulary on CPUs in hours, the GPU only for fine-tuning."""
    if heartbeat is not None:
        from greenadapt.progress import HEARTBEAT_ENV

        os.environ[HEARTBEAT_ENV] = str(heartbeat)
    if co2_intensity is not None or country is not None:
        from greenadapt.machine.intensity import configure

        configure(intensity=co2_intensity, country=country)


# The root options that take a value (every one of _root's but the flags): the word after one is its value, not the command.
# An annotation is the string "bool" under `from __future__ import annotations`, the type bool without it.
ROOT_OPTIONS_WITH_VALUE = frozenset(
    name for p in inspect.signature(_root).parameters.values() if p.annotation not in ("bool", bool)
    for name in p.default.param_decls
)


def invoked_command(argv: list[str]) -> str | None:
    """The command word of a command line: the first word that is neither a root option nor its value; None
    when the root's help comes first (``greenadapt --help w2v`` lists every command)."""
    words = iter(argv)
    for word in words:
        if word in ROOT_OPTIONS_WITH_VALUE:
            next(words, None)
        elif word in ("-h", "--help"):
            return None
        elif not word.startswith("-"):
            return word
    return None


def refuse_repeated_options(root: Any, argv: list[str]) -> None:
    """A single-value option given twice (``predict -m a -m b``) is refused: click would keep the last silently."""
    from greenadapt.errors import UsageError

    name = invoked_command(argv)
    sub = getattr(root, "commands", {}).get(name) if name else None
    if sub is None or name is None:
        return
    single = {opt: param for param in sub.params if getattr(param, "opts", None) and not getattr(param, "multiple", True)
              and not getattr(param, "count", False) and not getattr(param, "is_flag", False) for opt in param.opts}
    seen: dict[str, list[str]] = {}
    words = argv[argv.index(name) + 1:]
    position = 0
    while position < len(words):
        word = words[position]
        if word == "--":
            break
        flag = word.partition("=")[0] if word.startswith("--") else word
        if flag in single:
            seen.setdefault(single[flag].name, []).append(flag)
            position += 0 if "=" in word else 1  # its value
        position += 1
    for flags in seen.values():
        if len(flags) > 1:
            raise UsageError(f"{flags[0]} was given {len(flags)} times", hint=f"give {flags[0]} once: only one value is used")
    given = {flag for flags in seen.values() for flag in flags}
    for param in sub.params:  # an old spelling and its new one together: even an explicit default is a second value
        renamed = re.match(r"Deprecated: the old spelling of (--[\w-]+)", getattr(param, "help", None) or "")
        old = [flag for flag in getattr(param, "opts", ()) if flag in given]
        if renamed and old and renamed.group(1) in given:
            raise UsageError(f"{old[0]} and {renamed.group(1)} were both given: {old[0]} is the old spelling of {renamed.group(1)}",
                             hint=f"give {renamed.group(1)} alone")


def _register(argv: list[str] | None = None) -> None:
    """Import the command modules, each for its @app.command side effect (each keeps heavy imports local).

    Given the command line, only the command it names, when it names one: the other modules' imports cost
    a tenth of a second a run. Otherwise (no command, a typo, shell completion) all of them; pkgutil lists
    them sorted, so commands are listed alphabetically."""
    import importlib
    import pkgutil

    names = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_") and m.name != "help"]
    invoked = invoked_command(argv) if argv is not None and "_GREENADAPT_COMPLETE" not in os.environ else None
    invoked = invoked.replace("-", "_") if invoked else None  # second-view's module is second_view
    for name in [invoked] if invoked in names else names:
        importlib.import_module(f"{__name__}.{name}")


def command(argv: list[str] | None = None) -> Any:
    """The command tree as click builds it from the typer app, with its help dressed (cli/help.py): every
    command, or with ``argv`` the one it invokes (see :func:`_register`)."""
    import typer.main

    from greenadapt.cli.help import dress

    _register(argv)
    return dress(typer.main.get_command(app))


# The program around the command tree: error lines, exit codes and stop signals (the console script's entry point).
from greenadapt.cli._exits import entry_point, main  # noqa: E402  (after app: _exits reaches the tree through this module)

__all__ = ["app", "command", "entry_point", "main"]
