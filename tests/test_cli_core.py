"""The CLI shell: instant start-up, errors as one line with a meaningful exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_S

from greenadapt import errors
from greenadapt.artifacts import workspace
from greenadapt.errors import CorpusError, GreenAdaptError, StageError, UsageError


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "greenadapt", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=HANG_S,
    )


def test_help_and_version_do_not_import_heavy_libraries() -> None:
    probe = (
        "import sys\n"
        "sys.argv = ['greenadapt', '--help']\n"
        "from greenadapt.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'transformers', 'gensim', 'numpy', 'scipy', 'greenadapt.reporting.collection')\n"
        "         if m in sys.modules]\n"
        "sys.stderr.write(repr(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=HANG_S)
    assert result.stderr.strip().endswith("[]"), result.stderr
    for command in ("w2v", "align", "expand", "adapt"):
        assert command in result.stdout
    version = _cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("greenadapt ")


def test_a_command_imports_only_its_own_module() -> None:
    probe = (
        "import sys\n"
        "sys.argv = ['greenadapt', *sys.argv[1:]]\n"
        "from greenadapt.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(repr(sorted(m for m in sys.modules if m.startswith('greenadapt.cli.') and m != 'greenadapt.cli.help')))\n"
    )
    commands = "['greenadapt.cli._build', 'greenadapt.cli._common', 'greenadapt.cli._exits', 'greenadapt.cli.info']"  # (_build: declared)
    for argv in (["info", "--help"], ["--country", "DE", "info", "--help"], ["--heartbeat=5", "info", "--help"]):
        result = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=HANG_S)
        assert result.stderr.strip().endswith(commands), (argv, result.stderr)
        assert "Usage: greenadapt info" in result.stdout
    # The root's help before a command word lists every command.
    result = subprocess.run([sys.executable, "-c", probe, "--help", "info"], capture_output=True, text=True, timeout=HANG_S)
    assert "greenadapt.cli.w2v" in result.stderr and " w2v " in result.stdout
    # No command, or a word that is none: every command, for the list and for "did you mean".
    result = subprocess.run([sys.executable, "-c", probe, "inf"], capture_output=True, text=True, timeout=HANG_S)
    assert "Did you mean 'info'" in result.stderr and "greenadapt.cli.w2v" in result.stderr


def test_the_root_options_that_take_a_value_are_known_to_the_command_finder() -> None:
    from greenadapt.cli import ROOT_OPTIONS_WITH_VALUE, command

    root = command()
    taking_a_value = {name for param in root.params if not getattr(param, "is_flag", False) for name in param.opts}
    assert taking_a_value == ROOT_OPTIONS_WITH_VALUE


def test_unknown_command_is_a_usage_error() -> None:
    result = _cli("no-such-command")
    assert result.returncode == errors.EXIT_USAGE
    assert "Traceback" not in result.stderr


def test_one_line_formats_where_what_and_fix() -> None:
    error = CorpusError("looks binary,\nnot text", path="data/x.bin", line=3, hint="pass a text file")
    assert error.one_line() == "data/x.bin:3: looks binary, not text (pass a text file)"
    assert error.exit_code == errors.EXIT_BAD_INPUT
    assert StageError("x").exit_code == errors.EXIT_STAGE_CONFLICT
    assert isinstance(UsageError("x"), GreenAdaptError)


def test_typed_error_from_a_command_is_one_line_without_traceback(tmp_path: Path) -> None:
    result = _cli("align", "--corpus", "never-ran", "--workdir", str(tmp_path))
    assert result.returncode == errors.EXIT_STAGE_CONFLICT, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "no w2v output for corpus never-ran" in lines[0]
    assert "Traceback" not in result.stderr


def test_debug_env_shows_the_traceback(tmp_path: Path) -> None:
    result = _cli("align", "--corpus", "never-ran", "--workdir", str(tmp_path), env={"GREENADAPT_DEBUG": "1"})
    assert result.returncode != 0
    assert "Traceback" in result.stderr


@pytest.mark.parametrize(
    ("specs", "expected"),
    [(["cord19"], "cord19"), (["cord19", "pubmed"], "cord19+pubmed")],
)
def test_corpus_keys_for_names(specs: list[str], expected: str) -> None:
    assert workspace.corpus_key(specs) == expected


def test_corpus_keys_for_paths_do_not_collide(tmp_path: Path) -> None:
    a = workspace.corpus_key([str(tmp_path / "a" / "data.txt")])
    b = workspace.corpus_key([str(tmp_path / "b" / "data.txt")])
    assert a != b and a.startswith("data-") and b.startswith("data-")
    url_key = workspace.corpus_key(["s3://bucket/dump/*.jsonl.gz"])
    assert "/" not in url_key and "*" not in url_key
    assert url_key == workspace.corpus_key(["s3://bucket/dump/*.jsonl.gz"])


def test_find_stage_dir_needs_model_when_ambiguous(tmp_path: Path) -> None:
    for model in ("m1", "m2"):
        folder = tmp_path / "cord19" / model / "w2v"
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text("{}")
    with pytest.raises(UsageError, match="several models"):
        workspace.find_stage_dir(tmp_path, ["cord19"], None, "w2v")
    assert workspace.find_stage_dir(tmp_path, ["cord19"], "m2", "w2v") == tmp_path / "cord19" / "m2" / "w2v"


def test_workdir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(workspace.WORKDIR_ENV, raising=False)
    assert workspace.workdir(None) == Path("greenadapt-work")
    monkeypatch.setenv(workspace.WORKDIR_ENV, str(tmp_path))
    assert workspace.workdir(None) == tmp_path
    assert workspace.workdir(tmp_path / "x") == tmp_path / "x"


# --------------------------------------------------------------------------
# Help: panels, human metavars, an example, no truncation; shell completion

COMMANDS = ("adapt", "w2v", "align", "expand", "finetune", "qa", "predict", "pretrain", "multitask", "report", "info")
PYTHON_TYPE = r"<(int|float|str|bool|path|text|list\[|Path)[ >\]]"


@pytest.mark.parametrize("command", COMMANDS)
def test_help_groups_options_shows_human_metavars_and_an_example(command: str) -> None:
    import re

    result = _cli(command, "--help", env={"COLUMNS": "80", "TERM": "dumb"})
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert not re.search(PYTHON_TYPE, text), re.search(PYTHON_TYPE, text)
    assert "…" not in text  # nothing cut at 80 columns
    assert f"Example: greenadapt {command}" in " ".join(text.split()) or f"| greenadapt {command}" in " ".join(text.split())
    assert "Run control" in text and "─ Options ─" not in text  # every option in a named panel, --help included


def test_every_option_of_every_command_has_a_panel() -> None:
    from greenadapt.cli import command
    from greenadapt.options import PANELS

    group = command()
    missing = [f"{name} --{p.name}" for name, cmd in group.commands.items() for p in cmd.params
               if p.param_type_name == "option" and p.rich_help_panel not in PANELS]
    assert not missing, f"give these a panel= in their declaration (or greenadapt/cli/help.py for the hand-made ones): {missing}"


def test_shell_completion_offers_tasks_and_registered_corpora(tmp_path: Path) -> None:
    def complete(words: str) -> list[str]:
        env = {"COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
               "_GREENADAPT_COMPLETE": "complete_bash"}
        result = subprocess.run([sys.executable, "-m", "greenadapt"], capture_output=True, text=True, env={**os.environ, **env},
                                cwd=tmp_path, timeout=HANG_S)
        return result.stdout.split()

    assert complete("greenadapt finetune --task ") == ["ner", "classify", "qa"]
    assert complete("greenadapt finetune --task c") == ["classify"]
    assert "sample" in complete("greenadapt w2v --corpus ")
    from greenadapt.adaptation.methods import METHODS

    for command in ("adapt", "align", "expand"):
        assert complete(f"greenadapt {command} --method ") == list(METHODS), command
    assert complete("greenadapt align --method fo") == ["focus"]
    # The shell is named, not detected from the parent process (which is `sh` under some CI runners).
    script = subprocess.run([sys.executable, "-m", "greenadapt", "--show-completion", "bash"], capture_output=True, text=True,
                            env={**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}, cwd=tmp_path, timeout=HANG_S)
    assert script.returncode == 0 and "_GREENADAPT_COMPLETE=complete_bash" in script.stdout, script.stderr


def test_the_same_option_has_the_same_name_in_every_command() -> None:
    """-m/--model wherever a model is taken, -o/--out wherever something is written, one --batch-size, one --device."""
    from greenadapt.cli import command

    for name, cmd in command().commands.items():
        flags = {p.name: set(p.opts) for p in cmd.params if p.param_type_name == "option"}
        if "model" in flags:
            assert {"-m", "--model"} <= flags["model"], name
        written = flags.get("out") or flags.get("output")
        if written is not None:
            assert {"-o", "--out"} <= written, name
        assert not {"batch", "bs", "batchsize"} & set(flags), name
        if "device" in flags:
            assert flags["device"] == {"--device"}, name


# typer before 0.28 hands click's own parameter types (and has no ``type_descriptor``); both must read the same.

@pytest.mark.parametrize(("make_type", "metavar"), [
    (lambda click: click.INT, "N"),
    (lambda click: click.IntRange(min=1), "N"),
    (lambda click: click.FLOAT, "FLOAT"),
    (lambda click: click.STRING, "TEXT"),
    (lambda click: click.Path(), "PATH"),
    (lambda click: type("TyperPath", (click.ParamType,), {"name": "path"})(), "PATH"),
    (lambda click: click.Choice(["a", "b"]), None),
    (lambda click: click.UUID, "VALUE"),
])
def test_a_click_typed_parameter_gets_the_same_human_metavar(make_type, metavar) -> None:  # type: ignore[no-untyped-def]
    import click

    from greenadapt.cli.help import metavar_for

    assert metavar_for(click.Option(["--value"], type=make_type(click))) == metavar
    assert metavar_for(click.Option(["--switch"], is_flag=True)) == ""


def test_a_click_typed_argument_shows_no_type_beside_its_metavar() -> None:
    import click

    from greenadapt.cli.help import dress

    argument = click.Argument(["path"], type=click.STRING, metavar="PATH")
    option = click.Option(["--check"], type=click.INT)
    option.rich_help_panel = None  # typer's options carry one; dress fills it
    group = click.Group("greenadapt", commands=[click.Command("info", params=[argument, option])])
    dress(group)
    context = click.Context(group.commands["info"])
    assert argument.type.get_metavar(param=argument, ctx=context) == ""  # older typer shows <text> otherwise
    assert click.STRING.get_metavar(param=option, ctx=context) is None  # click's shared STRING is left alone
    assert option.metavar == "N" and option.rich_help_panel == "Evaluation"


def test_one_corpus_spelled_three_ways_is_one_workspace_folder_and_trained_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 57, point 1: `--corpus ../data/slice.txt` from the CLI, the absolute path from Python and `slice.txt`
    from the data folder are one corpus: one workspace folder, word2vec trained once."""
    import greenadapt
    from cli_helpers import run_cli
    from conftest import build_tiny_bert

    data = tmp_path / "data"
    data.mkdir()
    words = "the patients with tachycardia and leukemia were in the study of cells insulin kinase".split()
    (data / "slice.txt").write_text("".join(" ".join(words[i:] + words[:i]) + "\n" for i in range(13)) * 20)
    model = build_tiny_bert(tmp_path / "bert")
    work = tmp_path / "work"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    common = ["--model", str(model), "--workdir", str(work), "--epochs", "1", "--w2v-min-count", "1", "--workers", "1"]
    code, err = run_cli(["w2v", "--corpus", "../data/slice.txt", *common], monkeypatch, capsys)
    assert code == 0, err

    def corpora() -> list[Path]:
        return [p for p in work.iterdir() if p.name != "cache"]  # cache/: the pre-tokenized text, shared

    (folder,) = corpora()
    made = next(folder.glob("*/w2v/manifest.json")).stat().st_mtime_ns
    outcome = greenadapt.w2v(str(data / "slice.txt"), model=str(model), workdir=work, epochs=1, min_count=1, workers=1)
    assert outcome.skipped and outcome.path.parent.parent == folder
    monkeypatch.chdir(data)
    code, err = run_cli(["w2v", "--corpus", "slice.txt", *common], monkeypatch, capsys)
    assert code == 0, err
    assert corpora() == [folder] and next(folder.glob("*/w2v/manifest.json")).stat().st_mtime_ns == made
    # A workspace an earlier greenadapt keyed on the spelling as typed is found, not trained again.
    earlier = work / workspace.corpus_key(["slice.txt"], as_given=True)
    folder.rename(earlier)
    assert workspace.corpus_folder(work, ["slice.txt"]) == earlier
    code, err = run_cli(["w2v", "--corpus", "slice.txt", *common], monkeypatch, capsys)
    assert code == 0, err
    assert corpora() == [earlier] and next(earlier.glob("*/w2v/manifest.json")).stat().st_mtime_ns == made


def test_a_changed_adapt_option_is_named_as_adapt_spells_it(tmp_path: Path, tiny_bert: Path) -> None:
    """Issue 57, point 4: `adapt --min-count-new 2` over a run made with 1 was reported as `changed: min_count`,
    which reads as word2vec's --min-count."""
    from greenadapt.api import adapt

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the heart rate of patients with tachycardia rose after infection\n" * 50)
    common = {"model": str(tiny_bert), "workdir": tmp_path / "w", "dim": 8, "min_count": 1, "epochs": 1, "workers": 1,
              "out": tmp_path / "out", "progress": False}
    adapt([str(corpus)], min_count_new=1, **common)  # type: ignore[arg-type]
    with pytest.raises(StageError) as info:
        adapt([str(corpus)], min_count_new=2, **common)  # type: ignore[arg-type]
    assert "changed: min_count (adapt's --min-count-new) 1 -> 2" in info.value.one_line()
    assert info.value.exit_code == errors.EXIT_STAGE_CONFLICT
