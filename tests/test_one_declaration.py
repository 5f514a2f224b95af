"""An option is one declaration plus its use (issue 73): ``--label-smoothing`` as shipped, and a throwaway option added to a
copy of the package by one line, found in --help, the API, options.json, every run compare starts and the loop's object.

CONTRIBUTING.md's "Adding an option" walks through the label-smoothing change these tests hold.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import HANG_S, REPO
from finetune_helpers import build_tiny_expanded, comparison, set_dropout, write_ner_file

import greenadapt
from greenadapt.errors import UsageError

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("one-declaration")
    model = build_tiny_expanded(root / "model")
    set_dropout(model, 0.0)  # the first step's loss is then a function of the weights and the batch alone
    return {"root": root, "model": model, "train": write_ner_file(root / "train.tsv", 24, seed=1),
            "test": write_ner_file(root / "test.tsv", 8, seed=2)}


def test_the_smoothed_loss_is_torchs_label_smoothing_of_the_labelled_rows() -> None:
    from greenadapt.training.finetuning import FinetuneTask

    logits = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([0, 3, -100, 1, 2, -100])
    labelled = targets >= 0
    for epsilon in (0.0, 0.1, 0.5):
        task = FinetuneTask.__new__(FinetuneTask)
        task.trainer = SimpleNamespace(config=SimpleNamespace(label_smoothing=epsilon))  # type: ignore[assignment]
        log_p = torch.log_softmax(logits[labelled], dim=-1)
        by_hand = -((1 - epsilon) * log_p.gather(1, targets[labelled][:, None]).squeeze(1) + epsilon * log_p.mean(-1)).sum()
        assert torch.allclose(task.cross_entropy(logits, targets), by_hand, atol=1e-5)


def _first_loss(run: Path) -> float:
    return json.loads((run / "train_log.jsonl").read_text().splitlines()[0])["loss"]


def test_label_smoothing_changes_the_loss_and_the_fingerprint_only_when_set(files: dict[str, Path]) -> None:
    common = dict(task="ner", train=files["train"], model=str(files["model"]), max_steps=2, batch_size=8, seeds=[3], device="cpu")
    plain = greenadapt.finetune(**common, out=files["root"] / "plain")
    smoothed = greenadapt.finetune(**common, out=files["root"] / "smoothed", label_smoothing=0.2)
    assert "label_smoothing" not in plain.manifest["config"]["train"]  # runs made before the option keep their fingerprints
    assert smoothed.manifest["config"]["train"]["label_smoothing"] == 0.2
    assert smoothed.manifest["fingerprint"] != plain.manifest["fingerprint"]
    assert _first_loss(smoothed.path) != pytest.approx(_first_loss(plain.path), rel=1e-3)  # the same weights and batch, another loss
    recorded = json.loads((smoothed.path / "options.json").read_text())["options"]
    assert recorded["label_smoothing"] == 0.2
    again = greenadapt.finetune(**common, out=files["root"] / "plain", label_smoothing=0.0)  # 0 is the default: the same stage
    assert again.skipped


def test_label_smoothing_is_in_both_commands_and_qa_refuses_it(files: dict[str, Path], tmp_path: Path) -> None:
    for function in (greenadapt.finetune, greenadapt.compare):
        assert inspect.signature(function).parameters["label_smoothing"].default == 0.0
    for command in ("finetune", "compare"):
        shown = subprocess.run([sys.executable, "-m", "greenadapt", command, "--help"], capture_output=True, text=True,
                               env={**os.environ, "COLUMNS": "200"}, timeout=HANG_S)
        assert "--label-smoothing" in shown.stdout, command
    with pytest.raises(UsageError, match="label_smoothing does not apply to task qa"):
        greenadapt.finetune(task="qa", train=tmp_path / "squad.json", label_smoothing=0.1)
    with pytest.raises(UsageError, match="label_smoothing must be at most 0.99"):
        greenadapt.finetune(task="ner", train=files["train"], label_smoothing=1.5)
    from greenadapt.comparison.recipe import finetune_arguments

    models = (("a", str(files["model"])), ("b", str(files["model"])))
    smoothed = comparison(tmp_path / "cmp", task="ner", train=files["train"], test=files["test"], models=models, label_smoothing=0.1)
    assert finetune_arguments(smoothed, str(files["model"]), 1, tmp_path / "a", name="a")["label_smoothing"] == 0.1
    plain = comparison(tmp_path / "cmp", task="ner", train=files["train"], test=files["test"], models=models)
    assert "label_smoothing" not in finetune_arguments(plain, str(files["model"]), 1, tmp_path / "a", name="a")


def _package_with_throwaway(tmp_path: Path, module: str, anchor: str, panel: str, commands: tuple[str, ...]) -> tuple[Path, dict[str, str]]:
    """A copy of greenadapt/ whose one change is a ``--throwaway`` option declared before ``anchor`` in ``module``; each of
    ``commands`` shows it in --help. Returns the copy's root and the environment that imports it."""
    source = tmp_path / "src"
    shutil.copytree(REPO / "greenadapt", source / "greenadapt", ignore=shutil.ignore_patterns("__pycache__"))
    path = source / "greenadapt" / module
    text = path.read_text(encoding="utf-8")
    assert text.count(anchor) == 1
    path.write_text(text.replace(anchor, f'    throwaway: int = option(0, "--throwaway", panel={panel}, help="A test\'s option.")\n'
                                 + anchor), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(source), "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}
    for command in commands:
        shown = subprocess.run([sys.executable, "-m", "greenadapt", command, "--help"], capture_output=True, text=True,
                               env=env, timeout=HANG_S,
                               cwd=tmp_path)  # not the checkout's folder, whose greenadapt/ python -m would find first
        assert "--throwaway" in shown.stdout, (command, shown.stderr)
    return source, env


# The script run against a copy of greenadapt/ whose only change is one declared line.
PROBE = textwrap.dedent(
    """
    import inspect, json, sys
    from pathlib import Path

    import greenadapt
    from greenadapt.runners.finetune import run as finetune_run

    source, model, train_file, test_file, out = sys.argv[1:6]
    assert Path(greenadapt.__file__).resolve().is_relative_to(Path(source).resolve()), greenadapt.__file__
    received = []
    original = finetune_run.train

    def watched(model, units, config, *args, **kwargs):
        received.append(config.throwaway)
        return original(model, units, config, *args, **kwargs)

    finetune_run.train = watched
    api = {name: inspect.signature(getattr(greenadapt, name)).parameters["throwaway"].default for name in ("finetune", "compare")}
    greenadapt.compare("ner", train_file, test_file, models={"a": model, "b": model}, out=out, seeds=[1, 2], max_steps=1, batch_size=8,
                       device="cpu", keep_going=True, throwaway=7)
    print(json.dumps({"api": api, "received": received}))
    """
)


def test_a_training_option_declared_in_one_line_reaches_every_place(files: dict[str, Path], tmp_path: Path) -> None:
    source, env = _package_with_throwaway(tmp_path, "training/settings.py", "    label_smoothing: float = option(", "TRAINING",
                                          ("finetune", "compare"))
    out = tmp_path / "cmp"
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    done = subprocess.run([sys.executable, str(script), str(source), str(files["model"]), str(files["train"]),
                           str(files["test"]), str(out)],
                          capture_output=True, text=True, env=env, timeout=HANG_S, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"api": {"finetune": 0, "compare": 0}, "received": [7, 7, 7, 7]}  # two models x two seeds, each loop saw it
    runs = sorted(out.glob("*/seed-*/options.json"))
    assert len(runs) == 4 and all(json.loads(run.read_text())["options"]["throwaway"] == 7 for run in runs)
    assert json.loads((out / "options.json").read_text())["options"]["throwaway"] == 7


# The same for an option of the new rows: added by one line to the group expand and adapt share.
ROWS_PROBE = textwrap.dedent(
    """
    import inspect, json, sys
    from pathlib import Path

    import greenadapt
    from greenadapt.adaptation import expand

    source, model, corpus, work = sys.argv[1:5]
    assert Path(greenadapt.__file__).resolve().is_relative_to(Path(source).resolve()), greenadapt.__file__
    received = []
    original = expand._expand

    def watched(*args, **kwargs):
        received.append(kwargs["rows"].throwaway)
        return original(*args, **kwargs)

    expand._expand = watched
    api = {name: inspect.signature(getattr(greenadapt, name)).parameters["throwaway"].default for name in ("expand", "adapt")}
    adapted = greenadapt.adapt(corpus, model=model, workdir=work, epochs=1, min_count=2, workers=1, throwaway=7)
    print(json.dumps({"api": api, "received": received, "expand": str(adapted.expand.path)}))
    """
)


def test_an_expand_option_declared_in_one_line_reaches_the_row_writer_through_adapt(tiny_bert: Path, tmp_path: Path) -> None:
    source, env = _package_with_throwaway(tmp_path, "adaptation/settings.py", "    max_new: int | None = option(", "ADAPTATION",
                                          ("expand", "adapt"))
    words = "the heart rate of patients with tachycardia rose after covid infection and sleeplessness".split()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(words[(i + j) % len(words)] for j in range(10)) for i in range(200)) + "\n")
    script = tmp_path / "rows_probe.py"
    script.write_text(ROWS_PROBE)
    done = subprocess.run([sys.executable, str(script), str(source), str(tiny_bert), str(corpus), str(tmp_path / "work")],
                          capture_output=True, text=True, env=env, timeout=HANG_S, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["api"] == {"expand": 0, "adapt": 0} and report["received"] == [7]
    assert json.loads((Path(report["expand"]) / "options.json").read_text())["options"]["throwaway"] == 7


def test_the_training_loops_stand_ins_are_finetunes_declared_defaults() -> None:
    """A command without one of finetune's training options (multitask, pretrain) trains at TrainingRun's value and records
    it in its fingerprint: that value must be the one finetune declares, or the same recipe would read two ways."""
    from greenadapt.options import declared_fields
    from greenadapt.runners.finetune.settings import FinetuneSettings
    from greenadapt.training.config import TrainingRun

    declared = {field.name: field.default for field, _ in declared_fields(FinetuneSettings)}
    stand_ins = {name: value for name, value in vars(TrainingRun).items() if name in declared}
    assert set(stand_ins) >= {"grad_accum", "train_embeddings", "eval_every", "early_stopping", "pad_to_multiple", "cuda_graphs",
                              "agreement"}
    assert stand_ins == {name: declared[name] for name in stand_ins}
    assert set(TrainingRun.ALWAYS_RECORDED) - {"max_grad_norm"} <= set(stand_ins)  # each always-recorded value has its stand-in


def test_an_option_the_training_commands_share_is_declared_once() -> None:
    """An option multitask or pretrain shares with finetune agrees with finetune's declaration (flags, bounds, checks,
    choices, fingerprint; they take it through option_as_in): only the default and the words may differ, so the same
    flag cannot drift between commands. Options that share a flag but not a meaning are listed, each with why."""
    import dataclasses

    from greenadapt.options import declared_fields
    from greenadapt.runners.finetune.settings import FinetuneSettings
    from greenadapt.runners.multitask.settings import MultitaskSettings
    from greenadapt.runners.pretrain.settings import PretrainSettings

    own = {
        ("pretrain", "--mix"): "a share of packed sequences, recorded only when given",
        ("pretrain", "--train"): "what trains (all or new-rows), not a training file",
        ("multitask", "--task"): "a task specification, not a task name",
    }

    def shape(declaration: object) -> object:
        return dataclasses.replace(declaration, help="")  # type: ignore[type-var]

    finetune = {declaration.flags[0]: shape(declaration) for _, declaration in declared_fields(FinetuneSettings)}
    shared, exempt = 0, set()
    for settings in (MultitaskSettings, PretrainSettings):
        for _, declaration in declared_fields(settings):
            flag = declaration.flags[0]
            if (settings.command, flag) in own:
                assert shape(declaration) != finetune.get(flag), f"{settings.command} {flag} is finetune's: drop its exemption"
                exempt.add((settings.command, flag))
            elif flag in finetune:
                assert shape(declaration) == finetune[flag], f"{settings.command} {flag} drifted from finetune's declaration"
                shared += 1
    assert exempt == set(own)  # an exemption whose option left is dead weight: remove it
    assert shared >= 40


def test_qa_answers_with_the_declarations_every_inference_command_has() -> None:
    """`qa`'s --pool, --batch-size, --device, --general-model, --runtime, --quantize, --threads and --precision are
    predict's (LoadSettings'): its own defaults and words, the same bounds (--batch-size at most MAX_BATCH) and checks
    (a fingerprint is the command's own: qa's outputs made before --precision stay up to date)."""
    import dataclasses

    from greenadapt.inference.qa.settings import QaSettings
    from greenadapt.inference.settings import LoadSettings
    from greenadapt.options import declared_fields

    def shape(declaration: object) -> object:
        return dataclasses.replace(declaration, help="", fingerprint=None)  # type: ignore[type-var]

    load = {declaration.flags[0]: shape(declaration) for _, declaration in declared_fields(LoadSettings)}
    shared = {declaration.flags[0]: shape(declaration) for _, declaration in declared_fields(QaSettings) if declaration.flags[0] in load}
    assert set(shared) == {"--pool", "--batch-size", "--device", "--general-model", "--runtime", "--quantize", "--threads", "--precision"}
    assert shared == {flag: load[flag] for flag in shared}
