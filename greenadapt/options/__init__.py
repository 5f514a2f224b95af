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
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from greenadapt.errors import UsageError
from greenadapt.progress import NULL_PROGRESS, Progress
from greenadapt.options.declaration import (
    ADAPTATION,
    EVALUATION,
    INPUT_OUTPUT,
    MODEL,
    OPTION_METADATA,
    OPTIONS_FILE,
    PANELS,
    PERFORMANCE,
    REQUIRED,
    RUN_CONTROL,
    TRAINING,
    Declaration,
    model_paths,
    option,
    option_as_in,
)
from greenadapt.options.python_terms import named_for_python, on_the_command_line
from greenadapt.options.values import checked, coerced, plain, type_hints

S = TypeVar("S", bound="Settings")

__all__ = ["ADAPTATION", "DEFAULT_RUN", "EVALUATION", "INPUT_OUTPUT", "MODEL", "OPTIONS_FILE", "PANELS", "PERFORMANCE", "REQUIRED",
           "RUN_CONTROL", "RUN_OPTIONS", "TRAINING", "Declaration", "Run", "Settings", "call_command", "declared_fields", "model_paths",
           "option", "option_as_in", "read_config", "recorded_settings", "recording", "refuse_remote_output", "required"]


def declared_fields(cls: type[Settings] | Settings) -> tuple[tuple[dataclasses.Field[Any], Declaration], ...]:
    """The options of a settings class (or of its instance's), own first; refuses an option declared twice."""
    kind: type = cls if isinstance(cls, type) else type(cls)
    found = _FIELDS.get(kind)
    if found is None:  # a class's fields do not change: worked out once, not at every settings object made
        found = _FIELDS[kind] = _declared_fields(kind)
    return found


_FIELDS: dict[type, tuple[tuple[dataclasses.Field[Any], Declaration], ...]] = {}


def _declared_fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], Declaration], ...]:
    by_name = {f.name: f for f in dataclasses.fields(cls) if OPTION_METADATA in f.metadata}
    # A command's own options first, then each mixin's (the order of --help's panels and of options.json).
    order = [name for klass in cls.__mro__ if issubclass(klass, Settings) for name in vars(klass).get("__annotations__", {})
             if name in by_name]
    twice = sorted({name for name in order if order.count(name) > 1})
    if twice:  # a subclass that declares a mixin's option again: two declarations, one silently winning
        raise TypeError(f"{cls.__name__}: {', '.join(twice)} declared twice (in the class and a mixin it takes): declare each option once")
    found = tuple((by_name[name], by_name[name].metadata[OPTION_METADATA]) for name in order)
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
        raise UsageError(f"{option} {path}: remote outputs are not supported",
                         hint=f"give {option} a local path; copy the result up afterwards")


DEFAULT_RUN = Run()  # outputs at their default places, nothing redone, no progress shown

# The run settings each command may take, declared once; a command names which it takes (Settings.run_options)
# and may word their help its own way (Settings.run_help).
RUN_OPTIONS: dict[str, tuple[Any, Declaration]] = {
    "workdir": (Path | None,
                Declaration(("--workdir",), "Workspace for stage outputs (default: $GREENADAPT_WORKDIR, else ./greenadapt-work).",
                            INPUT_OUTPUT)),
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
        hints = type_hints(type(self))
        with named_for_python(type(self)):  # FinetuneSettings(lr=-1) is told "lr", as greenadapt.finetune(lr=-1) is
            for field, declared in declared_fields(self):
                value = coerced(getattr(self, field.name), hints[field.name], declared)
                object.__setattr__(self, field.name, checked(value, declared))
            self.check()

    def check(self) -> None:
        """Checks between options (one option's own checks are in its declaration); raises UsageError."""

    def configure_process(self) -> None:
        """What these options set in this process before the command runs (DeviceSettings: torch's CPU threads)."""

    def given_options(self, names: Iterable[str]) -> list[str]:
        """Each option of ``names`` set away from its declared default, as the user named it (a flag turned off: its off
        switch), in the order of ``names``: what a refusal of options that do not apply names."""
        declared = {field.name: (field, declaration) for field, declaration in declared_fields(self)}
        return [declared[name][1].as_given(getattr(self, name)) for name in names
                if name in declared and getattr(self, name) != declared[name][0].default]

    def fingerprinted(self, group: type[Settings] | None = None) -> dict[str, Any]:
        """The options (of ``group``, else all) a stage's fingerprint covers: those declared ``fingerprint="always"``, and
        ``"when set"`` ones that differ from their default (so the outputs made before such an option stay up to date)."""
        return {field.name: getattr(self, field.name) for field, declared in declared_fields(group or self)
                if declared.fingerprint == "always"
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
        with named_for_python(cls):  # (the line in a Python caller's keywords, once the file is named or not)
            for name, (field, declared) in fields.items():
                if required(field) and given.get(name) is None:
                    raise UsageError(f"{declared.flag} is required", hint=f"give {declared.flag}"
                                     + (", or a --config FILE that has it" if config is None else f": {config} has none"))
            try:
                with on_the_command_line():  # checked in flags: a flag names an option unlike a keyword ("train")
                    return cls(**given)
            except UsageError as error:  # a bad value the file gave: the line says which file
                named = [re.escape(declared.flag) for name, (_, declared) in fields.items() if name in from_file]
                if not named or not re.search(rf"(?<![\w-])({'|'.join(named)})(?![\w-])", error.message):
                    raise
                raise UsageError(f"{_where(config)}: {error.message}", path=error.path, hint=error.hint) from None

    def to_json(self) -> dict[str, Any]:
        """Every recorded option as plain JSON values (paths absolute, so a replay from elsewhere reads the same files;
        secrets left out: a corpus URL's credentials are given again on the command line, never written)."""
        return {f.name: plain(d.public(getattr(self, f.name)) if d.public else getattr(self, f.name))
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


def call_command(settings_class: type[Settings], runner: str, *args: Any, config: Any = None, progress: Any = None, **keywords: Any) -> Any:
    """What ``greenadapt.<command>(...)`` does: the settings from ``args`` and ``keywords`` (or a settings object), the run
    from the run keywords, then ``runner`` (``"module:function"``, imported when called) while the stages record the settings.

    A module-level function, so ``functools.partial(call_command, FinetuneSettings, ...)`` is a callable a worker
    process can be handed (compare's workers).
    """
    import importlib

    with named_for_python(settings_class):  # (and the refusals a runner makes of its options before it starts)
        settings, run = _settings_and_run(settings_class, args, config, progress, keywords)
        module_name, _, function_name = runner.partition(":")
        settings.configure_process()
        with recording(settings):
            return getattr(importlib.import_module(module_name), function_name)(settings, run)


def _settings_and_run(settings_class: type[S], args: tuple[Any, ...], config: Any, progress: Any,
                      keywords: dict[str, Any]) -> tuple[S, Run]:
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
    return settings, run
