"""An option's declaration: the settings field :func:`option` makes, and what the command line and the checks read
of it (:class:`Declaration`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The panels of a command's --help, in the order they are shown.
INPUT_OUTPUT = "Input and output"
MODEL = "Model"
ADAPTATION = "Adaptation"
TRAINING = "Training"
EVALUATION = "Evaluation"
PERFORMANCE = "Performance"
RUN_CONTROL = "Run control"
PANELS = (INPUT_OUTPUT, MODEL, ADAPTATION, TRAINING, EVALUATION, PERFORMANCE, RUN_CONTROL)

REQUIRED: Any = dataclasses.MISSING  # option(REQUIRED, "--train", ...): no default
OPTIONS_FILE = "options.json"  # the resolved options a run folder keeps (``--config`` replays it)
OPTION_METADATA = "greenadapt.option"  # where a settings field keeps its Declaration



@dataclasses.dataclass(frozen=True)
class Declaration:
    """What the command line and the checks need to know of one option, beside its field's name, type and default."""

    flags: tuple[str, ...]  # "--out", "-o": the first is the option's name in messages
    help: str
    panel: str | None = None
    metavar: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None
    check: Callable[[Any], Any] | None = None  # value -> the value to keep; raises UsageError
    parse: Callable[[Any], Any] | None = None  # the command line's text (or list of texts) -> the value
    shown: str | None = None  # the default as --help shows it, for an option whose text is parsed
    cli_type: Any = None  # what the command line reads, where it is not the field's type (parsed options)
    argument: bool = False  # a positional command-line argument (predict's INPUT)
    recorded: bool = True  # in options.json and the manifest (False: an alias whose value another option holds)
    public: Callable[[Any], Any] | None = None  # the value as it may be written down (a corpus URL without its credentials)
    # In its stage's fingerprint (Settings.fingerprinted): "always", or "when set" for an option newer than the outputs
    # that exist (left out at its default, so those stay up to date). None: speed only, or recorded elsewhere.
    fingerprint: str | None = None

    @property
    def flag(self) -> str:
        """How messages name the option: its long flag, or a positional argument's metavar."""
        return self.metavar if self.argument and self.metavar else self.flags[0]

    @property
    def negated(self) -> str:
        """A flag's hidden off switch on the command line (``--no-both-views``)."""
        return f"--no-{self.flags[0][2:]}"

    def as_given(self, value: Any) -> str:
        """How the user named the option that gave ``value``: a flag turned off came as its off switch."""
        return self.negated if value is False else self.flag


def model_paths(value: Any) -> Any:
    """A ``--model`` as options.json records it: a local folder by its absolute path (so ``--config`` replays it from any
    folder, as it does the data files), a Hub id as given; also a list of them, or of (name, model) pairs."""
    if isinstance(value, str):
        return str(Path(value).absolute()) if Path(value).exists() else value
    if isinstance(value, tuple | list):
        return tuple(model_paths(item) if not isinstance(item, tuple | list) else (item[0], model_paths(item[1])) for item in value)
    return value


def option(default: Any = dataclasses.MISSING, *flags: str, help: str, **declared: Any) -> Any:  # noqa: A002 (help is the word)
    """A settings field: ``lr: float | None = option(None, "--lr", help="Peak learning rate.", panel=TRAINING)``.

    Leave ``default`` out for a required option. A list-like default is given as a tuple (fields are immutable).
    """
    if not flags:
        raise TypeError("an option needs its command-line flag, e.g. option(3, '--epochs', help=...)")
    if isinstance(default, list | dict | set):
        raise TypeError(f"{flags[0]}: a mutable default is shared between runs; give a tuple")
    return dataclasses.field(default=default, metadata={OPTION_METADATA: Declaration(tuple(flags), help, **declared)})


def option_as_in(settings: type, name: str, default: Any, *, help: str | None = None,  # noqa: A002
                 fingerprint: str | None = None) -> Any:
    """The option ``settings`` declares as field ``name``, for another command with its own default (and help): its flags,
    bounds, checks and fingerprint stay declared once, so ``multitask --epochs`` cannot drift from ``finetune --epochs``.
    ``fingerprint`` ``"when set"``: where the option is newer than the command's outputs, which stay up to date."""
    declared = {field.name: field for field in dataclasses.fields(settings)}[name].metadata[OPTION_METADATA]
    changed = dataclasses.replace(declared, help=help or declared.help, fingerprint=fingerprint or declared.fingerprint)
    return dataclasses.field(default=default, metadata={OPTION_METADATA: changed})
