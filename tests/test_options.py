"""One declaration per option (issue 56): a settings field is the command line's option, the API's keyword, the
manifest's record and the config file's entry; declared twice, it is refused; a run folder's options replay."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from cli_helpers import run_cli
from typer.testing import CliRunner

from greenadapt.adaptation.settings import W2vSettings
from greenadapt.api.build import command_function
from greenadapt.cli._build import declared_command
from greenadapt.errors import UsageError
from greenadapt.options import ADAPTATION, OPTIONS_FILE, TRAINING, Settings, declared_fields, option


@dataclass(frozen=True, kw_only=True)
class ThrowawaySettings(W2vSettings):
    """``greenadapt w2v`` with one more option, added the way a contributor adds one: a field."""

    throwaway_knob: int = option(7, "--throwaway-knob", panel=ADAPTATION, minimum=0, help="A knob this test adds and nothing reads.")


def _corpus_and_model(tmp_path: Path) -> tuple[Path, Path]:
    from conftest import build_tiny_bert

    corpus = tmp_path / "c.txt"
    corpus.write_text("the patients with leukemia were in the study of insulin kinase cells\n" * 50, encoding="utf-8")
    return corpus, build_tiny_bert(tmp_path / "bert")


def test_an_option_added_once_is_in_the_help_the_api_and_the_manifest(tmp_path: Path) -> None:
    import inspect

    app = typer.Typer()
    function = command_function(ThrowawaySettings, "greenadapt.adaptation.w2v:run_w2v", "w2v with a knob")
    declared_command(ThrowawaySettings, function, lambda result, as_json: None, help="w2v with a knob", app=app)
    app.command("other")(lambda: None)  # two commands, so typer keeps the command's name
    shown = CliRunner().invoke(app, ["w2v", "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "--throwaway-knob" in shown.output and "A knob this test adds" in shown.output
    parameter = inspect.signature(function).parameters["throwaway_knob"]
    assert parameter.default == 7 and parameter.kind is inspect.Parameter.KEYWORD_ONLY
    corpus, model = _corpus_and_model(tmp_path)
    outcome = function(str(corpus), model=str(model), workdir=tmp_path / "work", epochs=1, min_count=1, workers=1,
                       throwaway_knob=3, progress=False)
    assert outcome.manifest["options"]["command"] == "w2v" and outcome.manifest["options"]["options"]["throwaway_knob"] == 3
    kept = json.loads((outcome.path / OPTIONS_FILE).read_text(encoding="utf-8"))
    assert kept["options"]["throwaway_knob"] == 3 and kept["options"]["epochs"] == 1
    # and on the command line, through the same builder
    ran = CliRunner().invoke(app, ["w2v", "-c", str(corpus), "-m", str(model), "--workdir", str(tmp_path / "cli"), "--epochs", "1",
                                   "--w2v-min-count", "1", "--workers", "1", "--throwaway-knob", "5", "-q"])
    assert ran.exit_code == 0, ran.output
    (folder,) = (tmp_path / "cli").rglob(OPTIONS_FILE)
    assert json.loads(folder.read_text(encoding="utf-8"))["options"]["throwaway_knob"] == 5


def test_an_option_declared_twice_is_refused() -> None:
    @dataclass(frozen=True, kw_only=True)
    class SameFlagTwice(Settings):
        command = "twice"
        lr: float = option(0.1, "--lr", panel=TRAINING, help="One.")
        learning_rate: float = option(0.2, "--lr", panel=TRAINING, help="The same flag again.")

    @dataclass(frozen=True, kw_only=True)
    class MixinOptionAgain(W2vSettings):
        epochs: int = option(9, "--epochs", panel=TRAINING, help="word2vec's --epochs, declared a second time.")

    for settings_class, says in ((SameFlagTwice, "--lr is declared twice"), (MixinOptionAgain, "epochs declared twice")):
        with pytest.raises(TypeError, match=says):
            declared_fields(settings_class)
        with pytest.raises(TypeError, match=says):
            declared_command(settings_class, lambda: None, lambda result, as_json: None, help="x", app=typer.Typer())
        with pytest.raises(TypeError, match=says):
            command_function(settings_class, "x:y", "doc")


def test_settings_are_valid_once_built_and_errors_name_the_option() -> None:
    from greenadapt.runners.finetune.settings import FinetuneSettings

    built = FinetuneSettings(task="NER", train="train.tsv", seeds=[3, 1])
    assert built.task == "ner" and built.train == Path("train.tsv") and built.seeds == (3, 1)
    for values, says in (
        ({"header": "maybe"}, "unknown header 'maybe'"),
        ({"epochs": "3"}, "epochs must be an integer"),
        ({"seeds": (1, 1)}, "seeds '1,1' repeats a seed"),
        ({"seeds": (1, 2), "seed": 7}, "seed and seeds were both given"),
        ({"pad_to_multiple": 0}, "pad_to_multiple must be at least 1"),
        ({"task": "translation"}, "translation"),
    ):
        with pytest.raises(UsageError, match=says):
            FinetuneSettings(**{"task": "ner", "train": "x", **values})
    with pytest.raises(UsageError, match="^train is required") as refused:  # a Python caller's keywords, not flags
        FinetuneSettings.build(task="ner")
    assert refused.value.hint == "give train, or a config=FILE that has it"
    with pytest.raises(TypeError, match="did you mean epochs"):
        FinetuneSettings.build(task="ner", train="x", epoch=3)


def test_a_refusal_names_the_option_as_the_caller_gave_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The same check, one line each: a Python caller reads its keywords (``lr=5e-5``), the command line its flags."""
    import greenadapt
    from greenadapt.runners.finetune.settings import FinetuneSettings

    train = tmp_path / "train.tsv"
    for keywords, python, command_line in (
        ({"lr": -1.0}, "lr must be positive, not -1 (e.g. lr=5e-5)", ["--lr", "-1"]),
        ({"task": "qa", "metric": "f1"}, "metric does not apply to task qa (leave it out)", ["--metric", "f1"]),
        ({"task": "qa", "both_views": False}, "both_views=False does not apply to task qa", ["--no-both-views"]),
        ({"train_on": "train+dev"}, "train_on='train+dev' needs dev", ["--train-on", "train+dev"]),
        ({"epochs": "three"}, "epochs must be an integer, not 'three' (see help(greenadapt.finetune) for epochs)",
         ["--epochs", "three"]),
    ):
        keywords = {"task": "ner", **keywords}
        with pytest.raises(UsageError) as refused:
            greenadapt.finetune(train=train, out=tmp_path / "run", **keywords)
        assert refused.value.one_line().startswith(python), refused.value.one_line()
        with pytest.raises(UsageError) as refused:  # the typed route: the settings object built by hand
            FinetuneSettings(train=train, **keywords)
        assert refused.value.one_line().startswith(python), refused.value.one_line()
        code, err = run_cli(["finetune", "--task", keywords["task"], "--train", str(train), "--out", str(tmp_path / "run"),
                             *command_line], monkeypatch, capsys)
        flags = [word for word in command_line if word.startswith("--")]
        assert code == 2 and all(flag in err for flag in flags) and err.count("\n") == 1, err
    with pytest.raises(UsageError, match=r"^quantize='int8' is for runtime='onnx' \(leave runtime out, or give runtime='onnx'\)$"):
        greenadapt.load(tmp_path, runtime="torch", quantize="int8")
    with pytest.raises(UsageError, match=r"^compare needs at least two models NAME=MODEL.*\(e\.g\. models base="):
        greenadapt.compare(task="ner", train=train, test=train, models={"base": str(tmp_path)}, out=tmp_path / "cmp")  # the runner's
    with pytest.raises(UsageError) as refused:  # a shell command in the line stays one
        greenadapt.export(tmp_path, out=tmp_path / "onnx")
    assert refused.value.one_line() == "export writes ONNX: pass onnx=True (greenadapt export --onnx --model RUN --out DIR)"
    assert not (tmp_path / "run").exists()


def test_a_command_lines_worker_refuses_in_flags_in_any_process(tmp_path: Path) -> None:
    """compare hands its runs to other processes (pickled, as to a worker or a Ray task): a run of `greenadapt compare`
    still names flags there, one of `greenadapt.compare(...)` keywords."""
    import pickle
    from functools import partial

    from greenadapt.options import call_command
    from greenadapt.options.python_terms import as_called_here, on_the_command_line
    from greenadapt.runners.finetune.settings import FinetuneSettings

    finetune = partial(call_command, FinetuneSettings, "greenadapt.runners.finetune.run:run_finetune")
    with on_the_command_line():
        from_the_command_line = pickle.loads(pickle.dumps(as_called_here(finetune)))
    from_python = pickle.loads(pickle.dumps(as_called_here(finetune)))
    for function, says in ((from_the_command_line, "^--lr must be positive"), (from_python, "^lr must be positive")):
        with pytest.raises(UsageError, match=says):
            function(task="ner", train=tmp_path / "train.tsv", lr=-1.0, out=tmp_path / "run")


def test_a_training_option_several_commands_take_is_declared_once() -> None:
    """multitask and pretrain take finetune's --epochs/--max-steps/--batch-size/--lr/--max-length with their own default
    and help only: the same bounds, checks and fingerprint, so a limit changed in one place holds for all three."""
    from dataclasses import replace

    from greenadapt.runners.finetune.settings import FinetuneSettings
    from greenadapt.runners.multitask.settings import MultitaskSettings
    from greenadapt.runners.pretrain.settings import PretrainSettings

    shared = ("epochs", "max_steps", "batch_size", "lr", "max_length")
    finetune = {field.name: declared for field, declared in declared_fields(FinetuneSettings) if field.name in shared}
    for other in (MultitaskSettings, PretrainSettings):
        theirs = {field.name: (field.default, declared) for field, declared in declared_fields(other) if field.name in shared}
        assert theirs.keys() == finetune.keys()
        for name, (default, declared) in theirs.items():
            assert replace(declared, help="") == replace(finetune[name], help=""), (other.__name__, name)
            assert default is not None or name == "max_steps"  # their own defaults, not finetune's "the task's"
        with pytest.raises(UsageError, match="epochs must be at most"):
            other.build(**{other.positional[0]: ("x",), "epochs": 10**6})


def _recorded(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["options"]["options"]


def test_a_finetune_run_replays_from_its_folder_with_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import greenadapt
    from finetune_helpers import build_tiny_expanded, write_ner_file

    model = build_tiny_expanded(tmp_path / "model")
    train = write_ner_file(tmp_path / "train.tsv", 12, seed=1)
    first = tmp_path / "runs" / "first"
    args = ["finetune", "--task", "ner", "--train", str(train), "--model", str(model), "--max-steps", "2", "--batch-size", "4",
            "--lr", "1e-4", "--max-words", "12", "--device", "cpu"]
    code, err = run_cli([*args, "--out", str(first)], monkeypatch, capsys)
    assert code == 0, err
    recorded = _recorded(first)
    assert recorded["lr"] == 1e-4 and recorded["max_steps"] == 2 and recorded["train"] == str(train.absolute())
    assert json.loads((first / OPTIONS_FILE).read_text(encoding="utf-8"))["options"] == recorded

    # From another directory, by the folder or its options.json: the same options.
    monkeypatch.chdir(tmp_path / "runs")
    code, err = run_cli(["finetune", "--config", str(first), "--out", str(tmp_path / "again")], monkeypatch, capsys)
    assert code == 0, err
    assert _recorded(tmp_path / "again") == recorded
    # Options on the command line override the file's.
    code, err = run_cli(["finetune", "--config", str(first / OPTIONS_FILE), "--seed", "7", "--out", str(tmp_path / "seed7")],
                        monkeypatch, capsys)
    assert code == 0, err
    assert _recorded(tmp_path / "seed7") == {**recorded, "seed": 7}
    # The Python API takes the same file, keywords overriding it.
    outcome = greenadapt.finetune(config=first / OPTIONS_FILE, lr=2e-4, out=tmp_path / "api", progress=False)
    assert _recorded(outcome.path) == {**recorded, "lr": 2e-4}


def test_a_config_file_by_hand_and_its_mistakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from greenadapt.runners.finetune.settings import FinetuneSettings

    toml = tmp_path / "recipe.toml"
    toml.write_text('task = "ner"\ntrain = "train.tsv"\nmax-length = 64\nseeds = [1, 2]\n', encoding="utf-8")
    built = FinetuneSettings.build(toml, lr=3e-5)
    assert (built.max_length, built.seeds, built.lr, built.train) == (64, (1, 2), 3e-5, Path("train.tsv"))

    toml.write_text('task = "ner"\ntrain = "x"\nepochs = "three"\n', encoding="utf-8")
    code, err = run_cli(["finetune", "--config", str(toml)], monkeypatch, capsys)
    assert code == 2 and f"{toml}: --epochs must be an integer" in err, err
    with pytest.raises(UsageError, match=f"^{re.escape(str(toml))}: epochs must be an integer"):  # the file named in Python too
        FinetuneSettings.build(toml)
    # A mistake of the caller's own is not the file's, though the file gave an option named in the line ("train").
    toml.write_text('task = "ner"\ntrain = "x"\n', encoding="utf-8")
    code, err = run_cli(["finetune", "--config", str(toml), "--train-on", "train+dev"], monkeypatch, capsys)
    assert code == 2 and "--train-on train+dev needs --dev" in err and str(toml) not in err, err
    with pytest.raises(UsageError, match=r"^train_on='train\+dev' needs dev"):
        FinetuneSettings.build(toml, train_on="train+dev")
    code, err = run_cli(["finetune", "--config", str(toml), "--epochs", "1", "--header", "maybe"], monkeypatch, capsys)
    assert code == 2 and "unknown --header 'maybe'" in err and str(toml) not in err, err  # the command line's own mistake

    toml.write_text('task = "ner"\ntrain = "x"\nlearning_rate = 3\n', encoding="utf-8")
    code, err = run_cli(["finetune", "--config", str(toml)], monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{toml}: 'learning_rate' is not an option of greenadapt finetune" in err, err

    other = tmp_path / "w2v.json"
    other.write_text(json.dumps({"command": "w2v", "options": {"corpus": ["c.txt"]}}), encoding="utf-8")
    code, err = run_cli(["finetune", "--config", str(other)], monkeypatch, capsys)
    assert code == 2 and "holds the options of `greenadapt w2v`" in err and "greenadapt w2v --config" in err, err

    broken = tmp_path / "broken.json"
    broken.write_text('{"task": "ner",\n "train": }', encoding="utf-8")
    code, err = run_cli(["finetune", "--config", str(broken)], monkeypatch, capsys)
    assert code == 2 and f"{broken}:2: not valid JSON" in err, err

    code, err = run_cli(["finetune", "--config", str(tmp_path / "missing.toml")], monkeypatch, capsys)
    assert code == 2 and "missing.toml" in err and "Traceback" not in err, err
