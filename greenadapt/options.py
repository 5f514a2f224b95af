"""One declaration per option: every command's options are the fields of one settings class.

A command's settings class (``FinetuneSettings``, ``W2vSettings``, ... beside the code that runs it) declares each option
once, as a dataclass field made by :func:`option` (name, type, default, help, flags, panel, bounds, check, fingerprint).
The command line (``cli/_build.py``), the Python API (``api/build.py``), the ``options.json`` every run folder keeps (and
``--config FILE`` replays) and the manifest's ``options`` are built from it, and the library receives the settings object
itself. It is valid once built: :meth:`Settings.__post_init__` coerces each value to its declared type and runs its checks,
once, each error one line naming the option and the fix. Where a run's outputs go (``workdir``, ``out``, ``force``,
``wait``, ``progress``) is not an option of the result: it travels as one :class:`Run`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from greenadapt.defaults import MAX_OPTION_INT
from greenadapt.errors import UsageError
from greenadapt.progress import NULL_PROGRESS, Progress

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
_META = "greenadapt.option"

S = TypeVar("S", bound="Settings")


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
    return dataclasses.field(default=default, metadata={_META: Declaration(tuple(flags), help, **declared)})


def declared_fields(cls: type[Settings] | Settings) -> tuple[tuple[dataclasses.Field[Any], Declaration], ...]:
    """The options of a settings class (or of its instance's), own first; refuses an option declared twice."""
    kind: type = cls if isinstance(cls, type) else type(cls)
    found = _FIELDS.get(kind)
    if found is None:  # a class's fields do not change: worked out once, not at every settings object made
        found = _FIELDS[kind] = _declared_fields(kind)
    return found


_FIELDS: dict[type, tuple[tuple[dataclasses.Field[Any], Declaration], ...]] = {}


def _declared_fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], Declaration], ...]:
    by_name = {f.name: f for f in dataclasses.fields(cls) if _META in f.metadata}
    # A command's own options first, then each mixin's (the order of --help's panels and of options.json).
    order = [name for klass in cls.__mro__ if issubclass(klass, Settings) for name in vars(klass).get("__annotations__", {}) if name in by_name]
    twice = sorted({name for name in order if order.count(name) > 1})
    if twice:  # a subclass that declares a mixin's option again: two declarations, one silently winning
        raise TypeError(f"{cls.__name__}: {', '.join(twice)} declared twice (in the class and a mixin it takes): declare each option once")
    found = tuple((by_name[name], by_name[name].metadata[_META]) for name in order)
    seen: dict[str, str] = {}
    for field, declared in found:
        for flag in declared.flags:
            if flag in seen:
                raise TypeError(f"{cls.__name__}: {flag} is declared twice ({seen[flag]} and {field.name}): declare each option once")
            seen[flag] = field.name
    return found


def required(field: dataclasses.Field[Any]) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class Run:
    """How a command runs, apart from what it computes: where its outputs go, whether it redoes them, its progress."""

    workdir: Path | None = None
    out: Path | None = None
    force: bool = False
    wait: bool = False
    progress: Progress = NULL_PROGRESS

    def __post_init__(self) -> None:
        for name in ("force", "wait"):  # force=1 or "yes" from Python is a slip, not a choice
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{name}={getattr(self, name)!r}: True or False", hint=f"greenadapt.<command>(..., {name}=True)")
        for name in ("workdir", "out"):
            value = getattr(self, name)
            if value is not None:
                refuse_remote_output(os.fspath(value), f"--{name}")
            if value is not None and not isinstance(value, Path):
                object.__setattr__(self, name, Path(os.fspath(value)))


def refuse_remote_output(path: Any, option: str) -> None:
    """One line (the URL shown without its credentials) for an output option given a remote address: greenadapt
    writes only local files, and a URL taken for a folder name would carry its password onto the disk."""
    from greenadapt.redaction import looks_remote

    if looks_remote(path):
        raise UsageError(f"{option} {path}: remote outputs are not supported", hint=f"give {option} a local path; copy the result up afterwards")


DEFAULT_RUN = Run()  # outputs at their default places, nothing redone, no progress shown

# The run settings each command may take, declared once; a command names which it takes (Settings.run_options)
# and may word their help its own way (Settings.run_help).
RUN_OPTIONS: dict[str, tuple[Any, Declaration]] = {
    "workdir": (Path | None, Declaration(("--workdir",), "Workspace for stage outputs (default: $GREENADAPT_WORKDIR, else ./greenadapt-work).", INPUT_OUTPUT)),
    "out": (Path | None, Declaration(("--out", "-o"), "Output folder.", INPUT_OUTPUT)),
    "force": (bool, Declaration(("--force",), "Redo the stage even if an up-to-date output exists.", RUN_CONTROL)),
    "wait": (bool, Declaration(("--wait",), "If another process is writing the same output, wait for it instead of failing.", RUN_CONTROL)),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """The base of every command's settings: a frozen dataclass whose fields are :func:`option` s; the class attributes
    below say how the command uses them (``positional``: the API's positional parameters, in order)."""

    command: ClassVar[str] = ""
    positional: ClassVar[tuple[str, ...]] = ()
    run_options: ClassVar[tuple[str, ...]] = ("workdir", "out", "force", "wait")
    run_help: ClassVar[Mapping[str, str]] = {}
    out_required: ClassVar[bool] = False
    # A stage's config key this command fills from an option of another name: {stage kind: {key: option}}.
    stage_names: ClassVar[Mapping[str, Mapping[str, str]]] = {}
    # Options that say the same thing another way: given as an override, one replaces the other a --config file gave.
    replaces: ClassVar[Mapping[str, tuple[str, ...]]] = {}

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for field, declared in declared_fields(self):
            value = _coerced(getattr(self, field.name), hints[field.name], declared)
            object.__setattr__(self, field.name, _checked(value, declared))
        self.check()

    def check(self) -> None:
        """Checks between options (one option's own checks are in its declaration); raises UsageError."""

    def configure_process(self) -> None:
        """What these options set in this process before the command runs (DeviceSettings: torch's CPU threads)."""

    def fingerprinted(self, group: type[Settings] | None = None) -> dict[str, Any]:
        """The options (of ``group``, else all) a stage's fingerprint covers: those declared ``fingerprint="always"``, and
        ``"when set"`` ones that differ from their default (so the outputs made before such an option stay up to date)."""
        return {field.name: getattr(self, field.name) for field, declared in declared_fields(group or self) if declared.fingerprint == "always"
                or (declared.fingerprint == "when set" and getattr(self, field.name) != field.default)}

    def replaced(self: S, **values: Any) -> S:
        """A copy with ``values`` valid by construction (one of its seeds, a task's defaults), not checked again: once per run."""
        copy = object.__new__(type(self))
        for field in dataclasses.fields(self):
            object.__setattr__(copy, field.name, values.pop(field.name, getattr(self, field.name)))
        if values:
            raise TypeError(f"{type(self).__name__} has no option {', '.join(values)}")
        return copy

    @classmethod
    def build(cls: type[S], config: str | os.PathLike[str] | Mapping[str, Any] | None = None, /, **values: Any) -> S:
        """The settings from ``config`` (a run folder or its options.json, a TOML file, or a mapping), ``values`` overriding it."""
        given = dict(read_config(config, cls)) if config is not None else {}
        for name in values:  # an option given here replaces what the file says of the same thing (--seed for its seeds)
            for other in cls.replaces.get(name, ()):
                if other not in values:
                    given.pop(other, None)
        from_file = set(given) - set(values)
        given.update(values)
        fields = {f.name: (f, d) for f, d in declared_fields(cls)}
        unknown = sorted(set(given) - set(fields))
        if unknown:
            raise TypeError(f"greenadapt.{cls.command}() got unexpected option(s) {', '.join(unknown)}{_suggestion(unknown[0], fields)}")
        for name, (field, declared) in fields.items():
            if required(field) and given.get(name) is None:
                raise UsageError(f"{declared.flag} is required", hint=f"give {declared.flag}" + (", or a --config FILE that has it" if config is None else f": {config} has none"))
        try:
            return cls(**given)
        except UsageError as error:  # a bad value the file gave: the line says which file
            named = [re.escape(declared.flag) for name, (_, declared) in fields.items() if name in from_file]
            if not named or not re.search(rf"(?<![\w-])({'|'.join(named)})(?![\w-])", error.message):
                raise
            raise UsageError(f"{_where(config)}: {error.message}", path=error.path, hint=error.hint) from None

    def to_json(self) -> dict[str, Any]:
        """Every recorded option as plain JSON values (paths absolute, so a replay from elsewhere reads the same files;
        secrets left out: a corpus URL's credentials are given again on the command line, never written)."""
        return {f.name: _plain(d.public(getattr(self, f.name)) if d.public else getattr(self, f.name))
                for f, d in declared_fields(self) if d.recorded}

    def names_in(self, kind: str) -> dict[str, str]:
        """How a refusal of stage ``kind`` names the keys this command spells otherwise (see :attr:`stage_names`)."""
        flags = {field.name: declared.flag for field, declared in declared_fields(self)}
        return {key: f"{key} ({self.command}'s {flags[name]})" for key, name in self.stage_names.get(kind, {}).items()}

    def document(self) -> dict[str, Any]:
        from greenadapt.version import __version__

        return {"command": self.command, "greenadapt_version": __version__, "options": self.to_json()}


def _where(config: str | os.PathLike[str] | Mapping[str, Any] | None) -> str:
    if config is None or isinstance(config, Mapping):
        return "the config"
    path = Path(os.fspath(config))
    return str(path / OPTIONS_FILE if path.is_dir() else path)


def _suggestion(name: str, fields: Mapping[str, Any]) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(fields), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def read_config(config: str | os.PathLike[str] | Mapping[str, Any], cls: type[Settings]) -> dict[str, Any]:
    """A config file's options for ``cls``'s command: ``options.json`` as a run folder keeps it, or TOML/JSON by hand.

    A file may hold ``{"command": ..., "options": {...}}`` or the options alone; keys are option names
    (``max_length``) or flags (``max-length``). A key no option has, or another command's file, is refused in one line.
    """
    from greenadapt.structured_text import NestedTooDeeply, check_depth

    where = _where(config)
    if isinstance(config, Mapping):
        document = dict(config)
        try:
            check_depth(document)
        except NestedTooDeeply as exc:
            raise UsageError(f"{where}: {exc}", hint="options are plain values and lists") from None
    else:
        path = Path(where)
        try:
            if path.exists() and not path.is_file():  # a FIFO nothing writes would wait for ever; a device, for ever more
                raise UsageError(f"--config {path}: not a regular file", hint="give a run folder's options.json or a TOML file")
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--config {path}: {exc.strerror or exc}", hint="give a run folder's options.json or a TOML file") from None
        except UnicodeDecodeError:
            raise UsageError(f"{path}: not UTF-8 text", hint="give a run folder's options.json or a TOML file saved as UTF-8") from None
        from greenadapt.structured_text import options_document

        document = options_document(text, path)
    if "options" in document and isinstance(document["options"], Mapping):
        command = document.get("command")
        if command and command != cls.command:
            raise UsageError(f"{where} holds the options of `greenadapt {command}`, not of {cls.command}",
                             hint=f"replay it with greenadapt {command} --config {where}")
        document = dict(document["options"])
    # a field's own name wins over a flag spelled like it (options.json keeps field names: min_count is --w2v-min-count's
    # field, though --min-count, its deprecated spelling, reads "min_count" too)
    names = {flag.lstrip("-").replace("-", "_"): f.name for f, d in declared_fields(cls) for flag in d.flags if flag.startswith("--")}
    names |= {f.name: f.name for f, _ in declared_fields(cls)}
    options: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in document.items():
        name = names.get(str(key).lstrip("-").replace("-", "_"))
        if name is None:
            raise UsageError(f"{where}: {key!r} is not an option of greenadapt {cls.command}{_suggestion(str(key), names)}",
                             hint=f"see greenadapt {cls.command} --help")
        if name in options:  # max_length and max-length, or an option and its alias: which one wins is no rule to guess
            raise UsageError(f"{where}: {spelled[name]!r} and {key!r} both set {name}", hint="give each option once")
        options[name], spelled[name] = value, str(key)
    return options


# The settings of the command being run: stages write them into the folders they make (options.json).
_RECORDING: ContextVar[Settings | None] = ContextVar("greenadapt_recording", default=None)


@contextmanager
def recording(settings: Settings) -> Iterator[None]:
    """While a command runs: every stage folder it makes keeps ``settings`` (see :func:`recorded_settings`)."""
    token = _RECORDING.set(settings)
    try:
        yield
    finally:
        _RECORDING.reset(token)


def recorded_settings() -> Settings | None:
    return _RECORDING.get()


# -- values ---------------------------------------------------------------------------------------

def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


_HINTS: dict[type, dict[str, Any]] = {}


def _members(hint: Any) -> tuple[Any, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def _coerced(value: Any, hint: Any, declared: Declaration) -> Any:
    """``value`` as the field's type: paths as Path, sequences as tuples; a value of another type is refused."""
    if value is None:
        if type(None) in _members(hint):
            return None
        raise UsageError(f"{declared.flag} needs a value", hint=f"see --help for {declared.flag}")
    for member in _members(hint):
        if member is type(None):
            continue
        try:
            return _as(value, member)
        except (TypeError, ValueError):
            continue
    if declared.parse is not None and _command_line_form(value):
        # a config file may spell a value as the command line does: models = ["base=bert", "green=models/green"]
        text = [value] if isinstance(value, str) and typing.get_origin(declared.cli_type) is list else value
        return _coerced(declared.parse(text), hint, dataclasses.replace(declared, parse=None))
    raise UsageError(f"{declared.flag} must be {_type_words(hint)}, not {value!r}", hint=f"see --help for {declared.flag}")


def _command_line_form(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, list | tuple) and all(isinstance(item, str) for item in value))


def _as(value: Any, kind: Any) -> Any:
    origin = typing.get_origin(kind)
    if origin is tuple:
        args = typing.get_args(kind)
        if isinstance(value, Mapping):  # {"green": "models/green"}: its (name, value) pairs
            value = tuple(value.items())
        items = (value,) if isinstance(value, str | os.PathLike) or not hasattr(value, "__iter__") else tuple(value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_as(item, args[0]) for item in items)
        if len(items) != len(args):
            raise ValueError(f"{len(args)} values")
        return tuple(_as(item, arg) for item, arg in zip(items, args, strict=True))
    if kind is Path:
        if isinstance(value, str | os.PathLike):
            return Path(os.fspath(value))
        raise TypeError("a path")
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise TypeError("true or false")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError("an integer")
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer past float's range (300-odd digits)
                raise ValueError("a number within range") from None
        raise TypeError("a number")
    if kind is str:
        if isinstance(value, str | os.PathLike):  # a model folder given as a Path
            return os.fspath(value)
        raise TypeError("text")
    if kind is Any:
        return value
    if isinstance(kind, type) and isinstance(value, kind):
        return value
    raise TypeError(f"a {getattr(kind, '__name__', kind)}")


def _type_words(hint: Any) -> str:
    words = {int: "an integer", float: "a number", str: "text", bool: "true or false", Path: "a path"}
    parts = []
    for member in _members(hint):
        if member is type(None):
            continue
        origin = typing.get_origin(member)
        parts.append("a list" if origin is tuple else words.get(member, getattr(member, "__name__", str(member))))
    return " or ".join(parts)


def _checked(value: Any, declared: Declaration) -> Any:
    if value is None:
        return value
    for item in value if isinstance(value, tuple) and declared.choices else (value,):
        if declared.choices is not None and item not in declared.choices:
            raise UsageError(f"unknown {declared.flag} {item!r}", hint=f"choose one of {', '.join(declared.choices)}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):  # nan passes every bound: refused whatever its source
            raise UsageError(f"{declared.flag} must be a finite number, not {value}")
        if declared.minimum is not None and value < declared.minimum:
            raise UsageError(f"{declared.flag} must be at least {declared.minimum:g}, not {_shown(value)}")
        if declared.maximum is not None and value > declared.maximum:
            raise UsageError(f"{declared.flag} must be at most {declared.maximum:g}, not {_shown(value)}")
        if isinstance(value, int) and abs(value) > MAX_OPTION_INT:  # (an option with no bound of its own)
            raise UsageError(f"{declared.flag} must be at most {MAX_OPTION_INT:,}, not {_shown(value)}")
    return declared.check(value) if declared.check is not None else value


def _shown(value: int | float) -> str:
    """A number for a message: a huge integer by its size (as a float it overflows, as text it may pass Python's digit limit)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"a number of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    return f"{value:g}"


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value.absolute())
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def call_command(settings_class: type[Settings], runner: str, *args: Any, config: Any = None, progress: Any = None, **keywords: Any) -> Any:
    """What ``greenadapt.<command>(...)`` does: the settings from ``args`` and ``keywords`` (or a settings object), the run
    from the run keywords, then ``runner`` (``"module:function"``, imported when called) while the stages record the settings.

    A module-level function, so ``functools.partial(call_command, FinetuneSettings, ...)`` is a callable a worker
    process can be handed (compare's workers).
    """
    import importlib

    from greenadapt.progress import as_progress

    positional = settings_class.positional
    if len(args) > len(positional) or (args and isinstance(args[0], settings_class) and len(args) > 1):
        raise TypeError(f"greenadapt.{settings_class.command}() takes {len(positional)} positional argument(s): {', '.join(positional)}")
    run_values = {name: keywords.pop(name) for name in settings_class.run_options if name in keywords}
    if args and isinstance(args[0], settings_class):
        settings = dataclasses.replace(args[0], **keywords) if keywords else args[0]
    else:
        named = dict(zip(positional, args, strict=False))
        for name in list(named):
            if name in keywords or name in run_values:
                raise TypeError(f"greenadapt.{settings_class.command}() got {name} twice")
            if name in settings_class.run_options:
                run_values[name] = named.pop(name)
        settings = settings_class.build(config, **named, **keywords)
    run = Run(**run_values, progress=as_progress(progress))
    if settings_class.out_required and run.out is None:
        raise UsageError("--out is required", hint=f"give the folder greenadapt {settings_class.command} writes")
    module_name, _, function_name = runner.partition(":")
    settings.configure_process()
    with recording(settings):
        return getattr(importlib.import_module(module_name), function_name)(settings, run)
