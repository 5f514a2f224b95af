"""`greenadapt multitask`: task specs, errors, and a tiny end-to-end run with two tokenizers and --freeze-base."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import HANG_S
from interrupt_helpers import Crash, CrashAt
from finetune_helpers import build_tiny_expanded, write_classify_file, write_ner_file

from greenadapt.errors import EXIT_BAD_INPUT, EXIT_USAGE, UsageError
from greenadapt.runners.multitask.spec import collect_specs, parse_task_option, read_tasks_toml


def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``greenadapt *argv`` in-process: (exit code, stdout, stderr)."""
    from greenadapt.cli import main

    monkeypatch.setattr(sys, "argv", ["greenadapt", *argv])
    try:
        main()
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --------------------------------------------------------------------------
# Specs


def test_task_option_parses_keys_and_reader_options(tmp_path: Path) -> None:
    spec = parse_task_option("name=cola,type=classify,train=a.tsv,dev=b.tsv,text-field=3,label_field=1,header=no")
    assert (spec.name, spec.type, spec.train, spec.dev, spec.test) == ("cola", "classify", Path("a.tsv"), Path("b.tsv"), None)
    assert (spec.reader.text_field, spec.reader.label_field, spec.reader.header) == ("3", "1", "no")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name=a,type=ner", "no train="),
        ("name=a,type=pos,train=x", "unknown task type"),
        ("name=a,type=ner,train=x,colour=red", "unknown task key"),
        ("name=a/b,type=ner,train=x", "folder name"),
        ("name=a,type=ner,train", "not key=value"),
    ],
)
def test_bad_task_options(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_task_option(text)


def test_toml_tasks_resolve_paths_relative_to_the_file(tmp_path: Path) -> None:
    toml = tmp_path / "sub" / "tasks.toml"
    toml.parent.mkdir()
    toml.write_text('[[task]]\nname = "rte"\ntype = "classify"\ntrain = "rte/train.tsv"\n\n[[task]]\nname = "ncbi"\ntype = "ner"\ntrain = '
                    '"/abs/train.tsv"\n')
    specs = read_tasks_toml(toml)
    assert [s.name for s in specs] == ["rte", "ncbi"]
    assert specs[0].train == toml.parent / "rte" / "train.tsv"
    assert specs[1].train == Path("/abs/train.tsv")
    with pytest.raises(UsageError, match="two tasks are named 'rte'"):
        collect_specs(["name=rte,type=ner,train=x"], toml)


# --------------------------------------------------------------------------
# End to end (tiny model, synthetic data)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("multitask")
    model = build_tiny_expanded(root / "model")
    return {
        "root": root,
        "model": model,
        "ner_train": write_ner_file(root / "ner_train.tsv", 40, seed=1),
        "ner_dev": write_ner_file(root / "ner_dev.tsv", 12, seed=2),
        "pair_train": write_classify_file(root / "pair_train.tsv", 40, seed=3, pairs=True, fmt="tsv"),
        "pair_dev": write_classify_file(root / "pair_dev.tsv", 12, seed=4, pairs=True, fmt="tsv"),
    }


def _tasks(data: dict[str, Path]) -> list[str]:
    return [
        "--task", f"name=ncbi,type=ner,train={data['ner_train']},dev={data['ner_dev']},test={data['ner_dev']}",
        "--task", f"name=pair,type=classify,train={data['pair_train']},dev={data['pair_dev']}",
    ]


COMMON = ("--pal-size", "12", "--pal-heads", "3", "--batch-size", "8", "--epochs", "2", "--steps-per-epoch", "4", "--device", "cpu", "-q")


@pytest.fixture(scope="module")
def frozen_run(data: dict[str, Path]) -> dict:
    """One --freeze-base run on an expanded model (two tokenizers: mixed training, mean-pooled inference)."""
    from greenadapt.cli import main

    out = data["root"] / "run"
    argv = ["greenadapt", "multitask", "--model", str(data["model"]), *_tasks(data), "--out", str(out), "--freeze-base", "--lr", "1e-2",
            *COMMON, "--json"]
    buffer = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(buffer):
        mp.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exit_:
            main()
    assert not exit_.value.code, buffer.getvalue()
    return {"out": out, "manifest": json.loads(buffer.getvalue())}


def test_run_reports_parameters_scores_and_mixture(frozen_run: dict) -> None:
    stats = frozen_run["manifest"]["stats"]
    assert stats["tasks"] == ["ncbi", "pair"]
    counts = stats["parameters"]
    for name in ("ncbi", "pair"):
        assert counts["per_task"][name]["total"] == counts["formula_per_task"][name]
    assert counts["total"] == counts["base"] + sum(t["total"] for t in counts["per_task"].values())
    assert counts["relative_to_base"] == pytest.approx(counts["total"] / counts["base"])
    # frozen: only adapters, heads and layer norms train
    assert counts["trainable"] < counts["base"]
    assert stats["pool"] == "mean"
    assert 0.0 < stats["training"]["domain_fraction"] < 1.0
    assert stats["training"]["steps"] == 8
    assert sum(stats["training"]["task_steps"].values()) == 8
    metrics = json.loads((frozen_run["out"] / "metrics.json").read_text())
    assert set(metrics["tasks"]["ncbi"]["test"]) == {"mean", "general", "domain"}
    expected = (stats["scores"]["ncbi"]["dev"] + stats["scores"]["pair"]["dev"]) / 2
    assert stats["average"]["dev"] == pytest.approx(expected)


def test_info_shows_each_tasks_score_and_the_average(frozen_run: dict) -> None:
    from greenadapt.artifacts.info import describe_folder, render

    stats = frozen_run["manifest"]["stats"]
    shown = render(describe_folder(frozen_run["out"])).splitlines()
    assert "  tasks       ncbi, pair" in shown
    ncbi = stats["scores"]["ncbi"]
    assert f"  score       ncbi dev f1 {100 * ncbi['dev']:.2f}, test f1 {100 * ncbi['test']:.2f}" in shown
    assert f"  score       pair dev accuracy {100 * stats['scores']['pair']['dev']:.2f}" in shown
    assert f"  score       average dev {100 * stats['average']['dev']:.2f}" in shown  # (pair has no test file)


def test_the_report_has_each_tasks_results_under_each_pooling_mode(frozen_run: dict) -> None:
    from greenadapt.reporting.collection import collect
    from greenadapt.reporting.render import markdown

    tasks = json.loads((frozen_run["out"] / "metrics.json").read_text())["tasks"]
    rows = collect([frozen_run["out"]])["results"]
    got = {(row["group"], row["split"], row["pool"]): (row["task"], row["metric"], row["mean"]) for row in rows}
    wanted = {(f"{frozen_run['out'].name} ({name})", split, pool): ({"ncbi": "ner", "pair": "classify"}[name], task["metric"],
                                                                    task[split][pool][task["metric"]])
              for name, task in tasks.items() for split in ("dev", "test") if split in task for pool in task[split]}
    assert got == wanted and len(wanted) == 9  # ncbi dev and test, pair dev; three pooling modes each
    assert f"| {frozen_run['out'].name} (pair) | classify |" in markdown(collect([frozen_run["out"]]))


def test_a_run_that_learned_nothing_says_so_in_its_summary_manifest_and_info(
    data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The scoring's learned-nothing warnings reach what finetune's reach: the summary, the manifest and info (they
    were in metrics.json alone)."""
    from greenadapt.artifacts.info import describe_folder, render

    out = tmp_path / "run"
    code, stdout, stderr = cli(monkeypatch, capsys, "multitask", "--model", str(data["model"]), "--out", str(out), "--lr", "1e-12",
                               "--task", f"name=pair,type=classify,train={data['pair_train']},dev={data['pair_dev']}", *COMMON)
    assert code == 0, stderr
    warnings = json.loads((out / "manifest.json").read_text())["stats"]["warnings"]
    assert warnings == json.loads((out / "metrics.json").read_text())["tasks"]["pair"]["warnings"] and warnings
    assert all(f"\nwarning: {w}" in stdout for w in warnings)
    assert all(f"  warning     {w}" in render(describe_folder(out)).splitlines() for w in warnings)


def test_freeze_base_keeps_base_weights_bit_identical(frozen_run: dict, data: dict[str, Path]) -> None:
    from safetensors.torch import load_file

    before = load_file(str(data["model"] / "model.safetensors"))
    after = load_file(str(frozen_run["out"] / "base" / "model.safetensors"))
    norms_changed = 0
    for key, tensor in after.items():
        if "LayerNorm" in key:
            norms_changed += int(not tensor.equal(before[key]))
        else:
            assert tensor.equal(before[key]), key
    assert norms_changed > 0  # the layer norms did train


def test_predict_task_reproduces_the_runs_predictions(
    frozen_run: dict, data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from greenadapt.artifacts import manifest
    from greenadapt.artifacts.files import sha256_file

    out = frozen_run["out"]
    hashed: list[Path] = []
    monkeypatch.setattr(manifest, "sha256_file", lambda path: hashed.append(path) or sha256_file(path))
    for name, dev in (("ncbi", data["ner_dev"]), ("pair", data["pair_dev"])):
        target = tmp_path / f"{name}.tsv"
        hashed.clear()
        code, stdout, stderr = cli(monkeypatch, capsys, "predict", "--model", str(out), "--task", name, "--input", str(dev), "--output",
                                   str(target), "--device", "cpu", "--json")
        assert code == 0, stderr
        # the run's files are verified once, when the weights are read, not again to learn the task's kind first
        assert hashed and len(hashed) == len(set(hashed)), sorted(map(str, hashed))
        assert json.loads(stdout)["pool"] == "mean"
        assert target.read_text() == (out / "tasks" / name / "predictions" / "dev.tsv").read_text()
    code, _, stderr = cli(monkeypatch, capsys, "predict", "--model", str(out), "--input", str(data["pair_dev"]), "--output",
                          str(tmp_path / "x.tsv"))
    assert code == EXIT_USAGE and "--task" in stderr and "ncbi, pair" in stderr
    code, _, stderr = cli(monkeypatch, capsys, "predict", "--model", str(out), "--task", "rte", "--input", str(data["pair_dev"]),
                          "--output", str(tmp_path / "x.tsv"))
    assert code == EXIT_USAGE and "no task 'rte'" in stderr


def test_each_task_runs_in_onnx_runtime_from_its_own_cached_graph(
    frozen_run: dict, data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--runtime onnx`` serves a task as it serves a fine-tuned folder (refused before): the task's own graph of the
    encoder with its adapters and head, exported once and cached in the run under its own key, gives torch fp32's
    logits under every pooling mode and its predictions; int8 runs close to them."""
    pytest.importorskip("onnxruntime")
    import numpy as np

    from greenadapt.inference import multitask
    from greenadapt.inference.labelling import label_file_by_mode
    from greenadapt.inference.settings import LoadSettings

    out, logits = frozen_run["out"], {}
    for name, dev in (("ncbi", data["ner_dev"]), ("pair", data["pair_dev"])):
        for runtime, quantize in (("torch", "none"), ("onnx", "none"), ("onnx", "int8")):
            options = LoadSettings(runtime=runtime, quantize=quantize, precision="fp32" if runtime == "torch" else "auto", device="cpu")
            _, logits[name, quantize, runtime] = label_file_by_mode(multitask.open_task_model(out, name, options), dev, options=options,
                                                                    modes=())
        for mode, expected in logits[name, "none", "torch"].items():
            assert np.abs(logits[name, "none", "onnx"][mode] - expected).max() < 1e-4, (name, mode)
            assert np.abs(logits[name, "int8", "onnx"][mode] - expected).mean() < 0.05, (name, mode)
        target = tmp_path / f"{name}.tsv"
        code, _, stderr = cli(monkeypatch, capsys, "predict", "--model", str(out), "--task", name, "--input", str(dev), "--output",
                              str(target), "--runtime", "onnx")
        assert code == 0 and target.read_text() == (out / "tasks" / name / "predictions" / "dev.tsv").read_text(), stderr
    exports = sorted((out / ".greenadapt-cache" / "onnx").glob("*/model.onnx"))
    assert len(exports) == 4  # each task's fp32 and int8 graph under a key of its own
    monkeypatch.setattr(multitask, "_task_model", lambda *a, **k: pytest.fail("the cached graph was exported again"))
    assert multitask.open_task_model(out, "pair", LoadSettings(runtime="onnx")).model.num_labels == 2
    # export --onnx --task: the cached graphs, and a serve_onnx.py that gives predict's entities without greenadapt
    code, _, stderr = cli(monkeypatch, capsys, "export", "--onnx", "-m", str(out), "--out", str(tmp_path / "served"))
    assert code == EXIT_USAGE and "name the task" in stderr, stderr
    code, _, stderr = cli(monkeypatch, capsys, "export", "--onnx", "-m", str(out), "--task", "ncbi", "--out", str(tmp_path / "served"))
    assert code == 0, stderr
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("".join(" ".join(line.split("\t")[0] for line in block.splitlines()) + "\n"
                                 for block in data["ner_dev"].read_text().split("\n\n") if block.strip()))
    code, _, stderr = cli(monkeypatch, capsys, "predict", "--model", str(out), "--task", "ncbi", str(sentences), "-o",
                          str(tmp_path / "entities.jsonl"), "--runtime", "onnx")
    assert code == 0, stderr
    served = subprocess.run([sys.executable, str(tmp_path / "served" / "serve_onnx.py"), str(tmp_path / "served")],
                            input=sentences.read_text(), capture_output=True, text=True, timeout=HANG_S, check=False)
    assert served.returncode == 0, served.stderr
    expected = [json.loads(line)["entities"] for line in (tmp_path / "entities.jsonl").read_text().splitlines()]
    got = [json.loads(line)["entities"] for line in served.stdout.splitlines()]
    assert len(got) == len(expected) == 12 and sum(map(len, got)) > 0  # the tiny task found entities: a comparison of something
    assert [[(e["start"], e["end"], e["label"]) for e in line] for line in got] == [[(e["start"], e["end"], e["label"]) for e in line]
                                                                                    for line in expected]


def test_raw_text_reaches_one_task_through_predict_and_load(
    frozen_run: dict, data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A multitask run serves raw text as a fine-tuned folder does: ``predict --task`` on a text file and
    ``greenadapt.load(run, task=...)`` tag each word, and label each pair, as the run's own predictions of the same data."""
    import greenadapt

    out = frozen_run["out"]
    blocks = [b for b in (out / "tasks" / "ncbi" / "predictions" / "dev.tsv").read_text().split("\n\n") if b.strip()]
    sentences = [[line.split("\t") for line in block.splitlines()] for block in blocks]  # word, gold, predicted
    words = [[row[0] for row in sentence] for sentence in sentences]
    tagger = greenadapt.load(out, task="ncbi", device="cpu")
    tags, _ = tagger.tag_words(words)
    assert tags == [[row[-1] for row in sentence] for sentence in sentences]
    text = tmp_path / "notes.txt"
    text.write_text("".join(" ".join(sentence) + "\n" for sentence in words))
    code, stdout, stderr = cli(monkeypatch, capsys, "predict", "--model", str(out), "--task", "ncbi", str(text), "--device", "cpu")
    assert code == 0, stderr
    found = [[entity["text"] for entity in json.loads(line)["entities"]] for line in stdout.splitlines()]
    assert found == [[entity.text for entity in sentence] for sentence in tagger.predict([" ".join(s) for s in words])]
    assert any(found)  # the trained tagger finds entities here: the comparison is not of empty lists
    rows = [line.split("\t") for line in (out / "tasks" / "pair" / "predictions" / "dev.tsv").read_text().splitlines()[1:]]
    labels = greenadapt.load(out, task="pair", device="cpu").predict([r[0] for r in rows], pairs=[r[1] for r in rows])
    assert [label["label"] for label in labels] == [r[-1] for r in rows]
    with pytest.raises(UsageError, match="name the task"):
        greenadapt.load(out, device="cpu")


def _count_onnx_opens(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The tasks opened in ONNX Runtime from here on (which runtime ran is otherwise not visible in the answers)."""
    from greenadapt.inference import multitask

    opened: list[str | None] = []
    real = multitask._open_task_onnx

    def counted(path: Path, name: str | None, options: Any) -> Any:
        opened.append(name)
        return real(path, name, options)

    monkeypatch.setattr(multitask, "_open_task_onnx", counted)
    return opened


# Each runtime by name: which one `auto` picks depends on the machine (tests/test_default_runtime.py).
@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_the_spacy_component_runs_a_multitask_runs_ner_task(frozen_run: dict, data: dict[str, Path], runtime: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    spacy = pytest.importorskip("spacy")
    import greenadapt
    import greenadapt.api.spacy_component  # noqa: F401 - registers the factory

    opened = _count_onnx_opens(monkeypatch)

    text = " ".join(line.split("\t")[0] for line in data["ner_dev"].read_text().splitlines() if line.strip())
    reference = greenadapt.load(frozen_run["out"], task="ncbi", device="cpu", runtime="torch")
    expected = [(e.start, e.end, e.label) for e in reference.predict(text)]
    nlp = spacy.blank("en")
    nlp.add_pipe("greenadapt_ner", config={"model": str(frozen_run["out"]), "task": "ncbi", "device": "cpu", "runtime": runtime})
    found = [(span.start_char, span.end_char, span.label_) for span in nlp(text).ents]
    assert found == expected and found  # the words are spaCy's tokens here, so no entity widens
    assert opened == (["ncbi"] if runtime == "onnx" else [])
    with pytest.raises(greenadapt.errors.UsageError, match="not an NER run"):
        nlp.add_pipe("greenadapt_ner", name="pair", config={"model": str(frozen_run["out"]), "task": "pair", "device": "cpu"})


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_evaluate_task_gives_the_runs_own_scores_under_each_pooling_mode(frozen_run: dict, data: dict[str, Path], runtime: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import greenadapt

    opened = _count_onnx_opens(monkeypatch)
    metrics = json.loads((frozen_run["out"] / "metrics.json").read_text())["tasks"]["ncbi"]["test"]  # the test file is ner_dev
    result = greenadapt.evaluate(data["ner_dev"], model=str(frozen_run["out"]), task="ncbi", device="cpu", runtime=runtime)
    assert set(result.scores) == set(metrics) == {"mean", "general", "domain"}
    for mode, scores in metrics.items():
        assert result.scores[mode]["f1"] == pytest.approx(scores["f1"])
        assert result.scores[mode]["accuracy"] == pytest.approx(scores["accuracy"])
    assert opened == (["ncbi"] if runtime == "onnx" else [])
    with pytest.raises(UsageError, match="an ensemble of multitask runs"):
        greenadapt.evaluate(data["ner_dev"], model=[str(frozen_run["out"]), str(data["model"])], task="ncbi", device="cpu")


def test_load_task_gives_one_task(frozen_run: dict) -> None:
    import torch

    from greenadapt.inference.multitask import load_task

    loaded = load_task(frozen_run["out"], "pair")
    assert loaded.model.multi.tasks == ["pair"]
    assert loaded.settings.task == "classify" and loaded.tokenizers.has_domain
    ids = torch.tensor([[loaded.tokenizers.cls_id, 10, 11, loaded.tokenizers.sep_id]])
    assert loaded.model(ids).logits.shape == (1, len(loaded.settings.labels))


def test_rerun_is_skipped(frozen_run: dict, data: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["multitask", "--model", str(data["model"]), *_tasks(data), "--out", str(frozen_run["out"]), "--freeze-base", "--lr", "1e-2",
            *COMMON]
    code, stdout, stderr = cli(monkeypatch, capsys, *argv)
    assert code == 0, stderr
    assert stdout.startswith("up to date 2-task pals model") and "average dev" in stdout and "x the base" in stdout


# --------------------------------------------------------------------------
# Errors through the CLI: one line, non-zero exit


def test_duplicate_task_names(data: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    spec = f"name=x,type=ner,train={data['ner_train']}"
    code, _, stderr = cli(monkeypatch, capsys, "multitask", "--model", str(data["model"]), "--task", spec, "--task", spec, "-q")
    assert code == EXIT_USAGE
    assert stderr.strip().count("\n") == 0 and "two tasks are named 'x'" in stderr


def test_missing_task_file(data: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing file of any task is said before a task's file is read (the first task's train here would fail)."""
    missing = data["root"] / "nope.tsv"
    unreadable = data["root"] / "unreadable.tsv"
    unreadable.write_text("a line without a label column\n")
    code, _, stderr = cli(monkeypatch, capsys, "multitask", "--model", str(data["model"]), "--task", f"name=a,type=ner,train={unreadable}",
                          "--task", f"name=x,type=ner,train={data['ner_train']},test={missing}", "-q")
    assert code == EXIT_BAD_INPUT
    assert stderr.strip().count("\n") == 0 and str(missing) in stderr and "not found" in stderr


def test_pool_domain_on_a_one_tokenizer_model_is_one_line(data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """multitask chooses its pooling as predict does (a one-tokenizer model has only the general view)."""
    from conftest import build_tiny_bert

    plain = build_tiny_bert(tmp_path / "plain", head="base")
    capsys.readouterr()  # the model builder's own output
    code, _, stderr = cli(monkeypatch, capsys, "multitask", "--model", str(plain), "--task", f"name=x,type=ner,train={data['ner_train']}",
                          "--pool", "domain", "--out", str(tmp_path / "run"), "-q")
    assert code == EXIT_USAGE and stderr.strip().count("\n") == 0
    assert "--pool domain needs a model with a domain tokenizer" in stderr and str(plain) in stderr
    assert not (tmp_path / "run").exists()


def test_label_set_differs_between_train_and_test(data: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    test_file = data["root"] / "typed_test.tsv"
    write_ner_file(test_file, 5, seed=9, typed=True)  # B-Disease where training has untyped B
    code, _, stderr = cli(monkeypatch, capsys, "multitask", "--model", str(data["model"]), "--task",
                          f"name=x,type=ner,train={data['ner_train']},test={test_file}", "-q")
    assert code == EXIT_BAD_INPUT
    line = stderr.strip()
    assert line.count("\n") == 0 and f"{test_file}:" in line and "does not occur in the training (x) data" in line


def test_no_tasks(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: dict[str, Path]) -> None:
    code, _, stderr = cli(monkeypatch, capsys, "multitask", "--model", str(data["model"]))
    assert code == EXIT_USAGE and "no tasks given" in stderr


# --------------------------------------------------------------------------
# G-MAP: the shared encoder attends to a frozen general model's states


def test_multitask_with_gmap_trains_saves_and_predicts(
    data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from conftest import build_tiny_bert

    general = build_tiny_bert(tmp_path / "general", head="base", seed=5)
    out = tmp_path / "run"
    code, stdout, stderr = cli(
        monkeypatch, capsys, "multitask", "--model", str(data["model"]), *_tasks(data), "--out", str(out),
        "--gmap", "gated", "--general-model", str(general), *COMMON, "--json",
    )
    assert code == 0, stderr
    stats = json.loads(stdout)["stats"]
    assert stats["gmap"]["strategy"] == "gated"
    counts = stats["parameters"]
    general_size = sum(p.numel() for p in __import__("transformers").AutoModel.from_pretrained(str(general)).parameters())
    assert counts["gmap"] == general_size + 33  # the frozen general model plus one Linear(32, 1) gate
    assert counts["trainable"] < counts["total"] - general_size + 1  # the general model is frozen
    assert (out / "base" / "gmap_config.json").is_file()
    target = tmp_path / "pair.tsv"
    code, _, stderr = cli(monkeypatch, capsys, "predict", "--model", str(out), "--task", "pair", "--input", str(data["pair_dev"]),
                          "--output", str(target), "--device", "cpu")
    assert code == 0, stderr
    assert target.read_text() == (out / "tasks" / "pair" / "predictions" / "dev.tsv").read_text()
    for general_model in ((), ("--general-model", str(general))):  # the runtime is what is refused, whatever else is given
        code, _, stderr = cli(monkeypatch, capsys, "predict", "--model", str(out), "--task", "pair", "--input", str(data["pair_dev"]),
                              "--output", str(tmp_path / "onnx.tsv"), "--runtime", "onnx", *general_model)
        assert code == EXIT_USAGE and "does not run G-MAP" in stderr and not (tmp_path / "onnx.tsv").exists(), stderr
    code, _, stderr = cli(monkeypatch, capsys, "export", "--onnx", "-m", str(out), "--task", "pair", "--out", str(tmp_path / "served"))
    assert code == EXIT_USAGE and "does not export G-MAP" in stderr and not (tmp_path / "served").exists(), stderr

    from greenadapt.inference.multitask import load_task

    loaded = load_task(out, "ncbi")
    assert loaded.memory is not None and loaded.model.multi.fusion is not None


# --------------------------------------------------------------------------
# Real model and data (opt-in)


@pytest.mark.integration
def test_minilm_on_rte_and_ncbi_subsets(minilm_path: Path, shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """MiniLM with PALs on 64 RTE pairs and 64 NCBI-disease sentences: trains, reports, predicts."""
    rte = tmp_path / "rte.tsv"
    rte.write_text("\n".join((shared_data / "glue" / "RTE" / "train.tsv").read_text(encoding="utf-8").splitlines()[:65]) + "\n")
    ncbi = tmp_path / "ncbi.tsv"
    ncbi.write_text("\n\n".join((shared_data / "ner" / "NCBI-disease" / "train.tsv").read_text(encoding="utf-8").split("\n\n")[:64]) + "\n")
    out = tmp_path / "run"
    code, stdout, stderr = cli(
        monkeypatch, capsys, "multitask", "--model", str(minilm_path),
        "--task", f"name=rte,type=classify,train={rte},dev={rte}", "--task", f"name=ncbi,type=ner,train={ncbi},dev={ncbi}",
        "--out", str(out), "--max-steps", "4", "--batch-size", "8", "--device", "cpu", "-q", "--json",
    )
    assert code == 0, stderr
    counts = json.loads(stdout)["stats"]["parameters"]
    # MiniLM: d = 384, 6 layers; PALs at 204 with 12 heads.
    assert counts["per_task"]["rte"]["adapter"] == 2 * 384 * 204 + 384 + 204 + 6 * 3 * (204 * 204 + 204)
    assert 1.0 < counts["relative_to_base"] < 1.1
    code, stdout, stderr = cli(monkeypatch, capsys, "predict", "--model", str(out), "--task", "rte", "--input", str(rte), "--output",
                               str(tmp_path / "p.tsv"), "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["examples"] == 64



def test_a_killed_multitask_run_resumes_to_the_uninterrupted_runs_weights_and_scores(data: dict[str, Path], tmp_path: Path,
                                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """multitask runs in the training stage every runner uses (issue 93): a kill inside an epoch resumes from the last
    checkpoint, each task's batch stream where it was, and ends where the uninterrupted run ends. Its scoring of each
    task's files is said when it starts and ends, as finetune's is."""
    import logging

    import greenadapt
    import numpy as np
    from safetensors.numpy import load_file

    tasks = [f"name=ncbi,type=ner,train={data['ner_train']},dev={data['ner_dev']},test={data['ner_dev']}",
             f"name=pair,type=classify,train={data['pair_train']},dev={data['pair_dev']}"]
    options = {"model": str(data["model"]), "task": tasks, "pal_size": 12, "pal_heads": 3, "batch_size": 8, "epochs": 2,
               "steps_per_epoch": 4, "device": "cpu", "lr": 1e-2, "save_every": 3, "save_minutes": 0}
    with caplog.at_level(logging.INFO, logger="greenadapt"):
        reference = greenadapt.multitask(**options, out=tmp_path / "reference", progress=False)
    said = [r.getMessage() for r in caplog.records]
    # (ncbi's test file is its dev file: 12 sentences)
    assert "scoring ncbi test: 12 examples" in said and any(m.startswith("scored pair dev in ") for m in said), said
    with pytest.raises(Crash):
        greenadapt.multitask(**options, out=tmp_path / "run", progress=CrashAt(7))  # inside epoch 2: the checkpoint of step 6
    resumed = greenadapt.multitask(**options, out=tmp_path / "run", resume=True, progress=False)
    assert resumed.manifest["cost"]["processes"] == 2  # the crashed part's cost up to its checkpoint is the run's too
    files = sorted(p.relative_to(reference.path) for p in reference.path.rglob("*.safetensors"))
    assert files and files == sorted(p.relative_to(resumed.path) for p in resumed.path.rglob("*.safetensors"))
    for name in files:  # the shared encoder and each task's adapter and head
        a, b = load_file(str(reference.path / name)), load_file(str(resumed.path / name))
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-6, err_msg=f"{name}: {key}")
    assert json.loads((reference.path / "metrics.json").read_text()) == json.loads((resumed.path / "metrics.json").read_text())
