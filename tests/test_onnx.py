"""Serving on CPU servers (issue 74): ``--runtime onnx`` (fp32, ``--quantize int8``) and ``greenadapt export --onnx``.

Invariants: the ONNX model gives torch fp32's probabilities (to float rounding) for a tiny model of every tokenizer
family, both views and their mean pooling included; int8 stays close; the export is made once, cached beside the
weights it came from, and made again when they change (a read-only folder caches in the user's cache); the exported
folder's ``serve_onnx.py``, with onnxruntime and tokenizers alone, gives ``greenadapt predict``'s entities; a folder
with a million added rows exports and runs; without ONNX Runtime the option is one line naming the extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import HANG_S, REPO, build_tiny_bert
from finetune_helpers import build_tiny_expanded, write_ner_file

import greenadapt
from greenadapt.errors import EXIT_USAGE

pytest.importorskip("onnxruntime", reason="the onnx extra (pip install 'greenadapt[onnx]') is not installed")

TEXTS = ["Patients with leukemia and sepsis were treated. The study of cancer began.", "no disease here",
         "fever of unknown origin in the leukemia cohort", "cancer " * 60]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("onnx")
    ner = write_ner_file(root / "ner.tsv", 40, seed=1)
    made = {"root": root, "ner": ner, "test": write_ner_file(root / "test.tsv", 16, seed=2)}
    for name, model in (("plain", build_tiny_bert(root / "plain", head="base")), ("green", build_tiny_expanded(root / "green"))):
        greenadapt.finetune("ner", ner, model=str(model), out=root / f"run-{name}", epochs=3, lr=1e-2, batch_size=8, device="cpu",
                            progress=False)
        made[name] = root / f"run-{name}"
    return made


def _probabilities(model: object, texts: list[str]) -> np.ndarray:
    from greenadapt.inference.predictor import _raw_sentences

    sentences = _raw_sentences(texts, model._word_pre_tokenizer)  # type: ignore[attr-defined]
    return model._probabilities([raw.sentence for raw in sentences])  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["plain", "green"])
def test_onnx_gives_torch_fp32s_probabilities_both_views_pooled(runs: dict[str, Path], name: str) -> None:
    torch_model = greenadapt.load(runs[name], runtime="torch", precision="fp32")
    onnx_model = greenadapt.load(runs[name], runtime="onnx")
    for mode in ("mean", "general", "domain") if name == "green" else ("general",):
        torch_model.mode = onnx_model.mode = mode  # type: ignore[union-attr]
        expected, got = _probabilities(torch_model, TEXTS), _probabilities(onnx_model, TEXTS)
        assert got.shape == expected.shape and np.abs(got - expected).max() < 1e-5, (mode, np.abs(got - expected).max())
    torch_model.mode = "mean" if name == "green" else "general"  # type: ignore[union-attr]
    int8 = greenadapt.load(runs[name], runtime="onnx", quantize="int8")
    quantized, reference = _probabilities(int8, TEXTS), _probabilities(torch_model, TEXTS)
    # close, not equal (8-bit weights): most words keep their label; the F1 it costs is measured in docs/benchmarks.md
    assert (quantized.argmax(axis=1) == reference.argmax(axis=1)).mean() >= 0.9 and np.abs(quantized - reference).mean() < 0.05


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_a_batch_cut_into_slices_gives_the_whole_batchs_rows(runs: dict[str, Path], quantize: str) -> None:
    served = greenadapt.load(runs["green"], runtime="onnx", quantize=quantize)
    onnx_model = served.model  # type: ignore[attr-defined]
    onnx_model.threads = 1
    whole = _probabilities(served, TEXTS * 3)
    calls = []
    run = onnx_model.session.run
    onnx_model.session = type("Counted", (), {"run": lambda _, *a: calls.append(len(a[1]["input_ids"])) or run(*a)})()
    onnx_model.threads = 3
    sliced = _probabilities(served, TEXTS * 3)
    assert max(calls) < len(TEXTS) * 3 and len(calls) > 2  # the batches were cut
    # fp32: the same rows to rounding; int8 too (each token's activations have their own scale, whatever the slice)
    assert np.abs(sliced - whole).max() < 1e-6, np.abs(sliced - whole).max()


def _sentences(count: int, seed: int) -> list[str]:
    """``count`` sentences of the tiny model's words, of 2 to 40 words (lengths that pad each other in a batch)."""
    import random

    words = ["the", "patients", "with", "tachycardia", "and", "leukemia", "were", "in", "study", "of", "cells", "insulin",
             "kinase", "fever", "cancer", "sepsis", "covid", "treated", "cohort", "origin"]
    draw = random.Random(seed)
    return [" ".join(draw.choice(words) for _ in range(draw.randint(2, 40))) for _ in range(count)]


def _entities_by_batch(model: object, texts: list[str], batch: int, order: list[int]) -> list[list[tuple[object, ...]]]:
    found: dict[int, list[tuple[object, ...]]] = {}
    for start in range(0, len(order), batch):
        chunk = order[start:start + batch]
        for index, entities in zip(chunk, model.predict([texts[i] for i in chunk]), strict=True):  # type: ignore[attr-defined]
            found[index] = [(e.start, e.end, e.label, e.score) for e in entities]
    return [found[i] for i in range(len(texts))]


@pytest.mark.parametrize("name", ["plain", "green"])
def test_an_int8_sentence_gets_the_same_answer_alone_and_in_any_batch(runs: dict[str, Path], name: str) -> None:
    """Issue 85, item 1: 200 sentences tagged alone, then shuffled in batches of 1, 7 and 64 (each call one batch, and
    inside it the inference batches of ``batch_size``): the same entities, and the same scores to 1e-6."""
    import random

    texts = _sentences(200, seed=3)
    alone = _entities_by_batch(greenadapt.load(runs[name], runtime="onnx", quantize="int8", batch_size=1), texts, 1, list(range(200)))
    assert sum(map(len, alone)) > 20  # entities to compare
    for batch in (1, 7, 64):
        order = list(range(200))
        random.Random(batch).shuffle(order)
        model = greenadapt.load(runs[name], runtime="onnx", quantize="int8", batch_size=batch)
        got = _entities_by_batch(model, texts, batch, order)
        for mine, theirs in zip(got, alone, strict=True):
            assert [e[:3] for e in mine] == [e[:3] for e in theirs], batch
            assert all(abs(a[3] - b[3]) <= 1e-6 for a, b in zip(mine, theirs, strict=True)), batch


def test_the_families_round_trip(tmp_path: Path) -> None:
    from family_models import FAMILIES, build_family_model

    ner = write_ner_file(tmp_path / "ner.tsv", 24, seed=1)
    for family in FAMILIES:
        model = build_family_model(family, tmp_path / family)
        greenadapt.finetune("ner", ner, model=str(model), out=tmp_path / f"run-{family}", max_steps=3, device="cpu", progress=False)
        expected = _probabilities(greenadapt.load(tmp_path / f"run-{family}", runtime="torch", precision="fp32"), TEXTS)
        got = _probabilities(greenadapt.load(tmp_path / f"run-{family}", runtime="onnx"), TEXTS)
        assert np.abs(got - expected).max() < 1e-5, (family, np.abs(got - expected).max())


def test_evaluate_and_predict_through_the_command_line_give_torchs_scores(runs: dict[str, Path], tmp_path: Path) -> None:
    import greenadapt.api as api

    torch_scores = api.evaluate(runs["test"], model=[str(runs["green"])], runtime="torch", precision="fp32",
                                progress=False).scores  # type: ignore[attr-defined]
    onnx_scores = api.evaluate(runs["test"], model=[str(runs["green"])], runtime="onnx",
                               progress=False).scores  # type: ignore[attr-defined]
    for mode in ("mean", "general", "domain"):
        assert onnx_scores[mode]["f1"] == pytest.approx(torch_scores[mode]["f1"], abs=1e-9), mode


def test_the_export_is_cached_beside_the_weights_and_made_again_when_they_change(runs: dict[str, Path], tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from greenadapt.inference import onnx_runtime
    from greenadapt.inference.onnx_runtime import MODEL_FILE, cache_key

    run = tmp_path / "run"
    shutil.copytree(runs["green"], run, ignore=shutil.ignore_patterns(".greenadapt-cache"))
    greenadapt.load(run, runtime="onnx")
    exports = sorted((run / ".greenadapt-cache" / "onnx").glob(f"*/{MODEL_FILE}"))
    assert len(exports) == 1 and exports[0].parent.name == cache_key(run, "none")
    made = exports[0].stat().st_mtime_ns
    greenadapt.load(run, runtime="onnx")  # from the cache: not made again
    assert exports[0].stat().st_mtime_ns == made
    # the run folder's own check passes over the tagged cache (info --check; --force may replace the folder)
    from greenadapt.artifacts.manifest import foreign_files, read_manifest

    assert foreign_files(run, read_manifest(run) or {}) == []
    # a cache that outlives the weights (a shared model's, in the user's cache): the run is trained again in place
    shared = tmp_path / "user-cache"
    monkeypatch.setattr(onnx_runtime, "cache_root", lambda folder: shared)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    greenadapt.load(run, runtime="onnx")
    before = cache_key(run, "none")
    greenadapt.finetune("ner", runs["ner"], model=str(runs["root"] / "green"), out=run, epochs=3, lr=1e-2, batch_size=8,
                        seed=7, device="cpu",
                        force=True, progress=False)
    assert cache_key(run, "none") != before  # other weights, another key
    changed = _probabilities(greenadapt.load(run, runtime="onnx"), TEXTS)
    assert sorted(p.parent.name for p in (shared / "onnx").glob(f"*/{MODEL_FILE}")) == sorted([before, cache_key(run, "none")])
    assert np.abs(changed - _probabilities(greenadapt.load(run, runtime="torch", precision="fp32"), TEXTS)).max() < 1e-5  # the new weights'


def test_a_read_only_folder_caches_in_the_users_cache(runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil
    import stat

    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder")
    run = tmp_path / "run"
    shutil.copytree(runs["plain"], run, ignore=shutil.ignore_patterns(".greenadapt-cache"))
    run.chmod(stat.S_IRUSR | stat.S_IXUSR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    try:
        greenadapt.load(run, runtime="onnx")
    finally:
        run.chmod(stat.S_IRWXU)
    assert list((tmp_path / "cache" / "greenadapt" / "onnx").glob("*/model.onnx")) and not (run / ".greenadapt-cache").exists()


def test_the_cache_root_is_the_users_where_the_folder_cannot_be_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from greenadapt.inference import onnx_runtime

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert onnx_runtime.cache_root(tmp_path) == tmp_path / ".greenadapt-cache"
    monkeypatch.setattr(onnx_runtime.os, "access", lambda path, mode: False)
    assert onnx_runtime.cache_root(tmp_path) == tmp_path / "cache" / "greenadapt"


def test_without_onnx_runtime_the_option_is_one_line_naming_the_extra(runs: dict[str, Path], tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from cli_helpers import run_cli

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if it were not installed
    text = tmp_path / "in.txt"
    text.write_text("fever\n")
    for argv in (["predict", "-m", str(runs["green"]), str(text), "--runtime", "onnx"],
                 ["export", "--onnx", "-m", str(runs["green"]), "--out", str(tmp_path / "x")],
                 ["evaluate", "-m", str(runs["green"]), str(runs["test"]), "--runtime", "onnx"]):
        code, err = run_cli(argv, monkeypatch, capsys)
        assert code == EXIT_USAGE and "greenadapt[onnx]" in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert not (tmp_path / "x").exists()
    for argv in (["predict", "-m", str(runs["green"]), str(text), "--quantize", "int8"], ["predict", "-m", str(runs["green"]), str(text),
                                                                                           "--runtime", "onnx", "--device", "cuda"]):
        code, err = run_cli(argv, monkeypatch, capsys)
        assert code == EXIT_USAGE and len(err.strip().splitlines()) == 1, err


def test_the_exported_folder_serves_predicts_entities_without_greenadapt(runs: dict[str, Path], tmp_path: Path) -> None:
    served = tmp_path / "served"
    outcome = greenadapt.api.export(str(runs["green"]), onnx=True, out=served, progress=False)  # type: ignore[attr-defined]
    assert {"model.onnx", "model.int8.onnx", "tokenizer.json", "general/tokenizer.json", "labels.json", "pooling.json", "serve_onnx.py",
            "README.md"} <= set(outcome.manifest["stats"]["files"])
    text = tmp_path / "docs.txt"
    text.write_text("\n".join(TEXTS) + "\n")
    expected_file = tmp_path / "expected.jsonl"
    greenadapt.predict(text, model=str(runs["green"]), output=expected_file, runtime="torch", precision="fp32", progress=False)
    # a Python with numpy, onnxruntime and tokenizers but no greenadapt and no torch: both are made unimportable
    blocker = tmp_path / "blocked"
    for name in ("greenadapt", "torch", "transformers"):
        (blocker / name).mkdir(parents=True)
        (blocker / name / "__init__.py").write_text(f"raise ImportError('{name} is not on a serving machine')\n")
    int8_file = tmp_path / "int8.jsonl"
    greenadapt.predict(text, model=str(runs["green"]), output=int8_file, runtime="onnx", quantize="int8", progress=False)
    for flag, reference in (("", expected_file), ("--int8", int8_file)):
        done = subprocess.run([sys.executable, str(served / "serve_onnx.py"), str(served), *([flag] if flag else [])],
                              input=text.read_text(),
                              capture_output=True, text=True, timeout=HANG_S, env={**os.environ, "PYTHONPATH": str(blocker)}, cwd=tmp_path,
                              check=False)
        assert done.returncode == 0, done.stderr
        got = [json.loads(line) for line in done.stdout.splitlines()]
        expected = [json.loads(line) for line in reference.read_text().splitlines()]
        assert len(got) == len(expected) == len(TEXTS)
        # fp32 against torch fp32; int8 against predict's int8 (one sentence a call there, batches here: the same answer)
        for mine, theirs in zip(got, expected, strict=True):
            assert [(e["start"], e["end"], e["label"]) for e in mine["entities"]] == [(e["start"], e["end"], e["label"])
                                                                                      for e in theirs["entities"]]
            assert all(abs(a["score"] - b["score"]) < 1e-6 for a, b in zip(mine["entities"], theirs["entities"], strict=True))
        assert sum(len(line["entities"]) for line in got) > 0  # the tiny model found entities: the comparison compared something


@pytest.mark.slow
def test_a_folder_with_a_million_added_rows_exports_and_runs(tmp_path: Path) -> None:
    model = build_tiny_expanded(tmp_path / "big", extra_rows=1_000_000)
    ner = write_ner_file(tmp_path / "ner.tsv", 8, seed=1)
    greenadapt.finetune("ner", ner, model=str(model), out=tmp_path / "run", max_steps=1, device="cpu", progress=False,
                        train_embeddings="none")
    expected = _probabilities(greenadapt.load(tmp_path / "run", runtime="torch", precision="fp32"), TEXTS[:2])
    for quantize, tolerance in (("none", 1e-5), ("int8", 0.05)):
        got = _probabilities(greenadapt.load(tmp_path / "run", runtime="onnx", quantize=quantize), TEXTS[:2])
        assert np.abs(got - expected).mean() < tolerance, (quantize, np.abs(got - expected).mean())


def test_qa_answers_alike_through_onnx(tmp_path: Path) -> None:
    """Question answering's windows and both views through ONNX Runtime: the same answers and scores as torch fp32,
    through `greenadapt qa --runtime onnx` and `greenadapt.load(..., runtime="onnx")`; a fresh process answering from
    the cached export imports neither torch nor transformers and writes the in-process answers."""
    from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file

    context = "Heart rate was high in myocarditis. Ventilation was the main treatment of covid patients."
    data = squad_file(tmp_path / "train.json", [{"paragraphs": [paragraph(context, ("q1", "What was high?", [("Heart rate", 0)]),
                                                                          ("q2", "What was the main treatment?", [("Ventilation", 36)]))]}])
    run = greenadapt.finetune("qa", data, model=str(build_tiny_expanded_qa(tmp_path / "model")), out=tmp_path / "ft", max_length=32,
                              doc_stride=8, batch_size=4, lr=3e-3, max_steps=30, device="cpu", progress=False)
    answers = {}
    for runtime in ("torch", "onnx"):
        greenadapt.qa(data, tmp_path / f"qa-{runtime}", model=str(run.path), max_length=32, device="cpu", runtime=runtime, progress=False)
        answers[runtime] = json.loads((tmp_path / f"qa-{runtime}" / "nbest.json").read_text())
    for qid in ("q1", "q2"):
        assert [a["text"] for a in answers["onnx"][qid][:3]] == [a["text"] for a in answers["torch"][qid][:3]]
    # int8 answers asked of the folder of the fp32 ones: not "up to date" (the fp32 answers kept without a word); --force makes them
    from greenadapt.errors import OutputExistsError

    with pytest.raises(OutputExistsError, match="quantize"):
        greenadapt.qa(data, tmp_path / "qa-onnx", model=str(run.path), max_length=32, runtime="onnx", quantize="int8", progress=False)
    int8 = greenadapt.qa(data, tmp_path / "qa-onnx", model=str(run.path), max_length=32, runtime="onnx", quantize="int8", progress=False,
                         force=True)
    assert not int8.skipped and int8.manifest["config"]["quantize"] == "int8"
    program = ("import sys, greenadapt; greenadapt.qa(sys.argv[1], sys.argv[2], model=sys.argv[3], max_length=32, runtime='onnx', "
               "progress=False); print('transformers' in sys.modules, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", program, str(data), str(tmp_path / "qa-fresh"), str(run.path)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=HANG_S, check=False)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "False False", done.stdout + done.stderr
    assert json.loads((tmp_path / "qa-fresh" / "nbest.json").read_text()) == answers["onnx"]
    torch_answer = greenadapt.load(run.path, device="cpu", max_length=32).answer("What was high?", context)  # type: ignore[union-attr]
    onnx_answer = greenadapt.load(run.path, max_length=32, runtime="onnx").answer("What was high?", context)  # type: ignore[union-attr]
    assert onnx_answer["text"] == torch_answer["text"] and onnx_answer["score"] == pytest.approx(torch_answer["score"], abs=1e-4)
    piped = greenadapt.pipeline("qa", run.path, max_length=32, runtime="onnx")(question="What was high?", context=context)
    assert piped["answer"] == onnx_answer["text"] and piped["score"] == pytest.approx(onnx_answer["score"], abs=1e-6)


def test_predicting_from_the_cached_export_imports_neither_torch_nor_transformers(runs: dict[str, Path], tmp_path: Path) -> None:
    """A cron job's predict on an exported model reads both tokenizers and the config from their files and hands numpy
    batches to ONNX Runtime: torch and transformers (3 of its 4.6 CPU-s) are loaded only to export, and the entities
    are the in-process ones, scores and all."""
    greenadapt.load(runs["green"], runtime="onnx")  # the export, cached in the run folder
    (tmp_path / "in.txt").write_text(TEXTS[0] + "\n", encoding="utf-8")
    program = ("import sys, greenadapt; greenadapt.predict(sys.argv[1], model=sys.argv[2], output=sys.argv[3], runtime='onnx', "
               "device='cpu', progress=False); print('transformers' in sys.modules, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", program, str(tmp_path / "in.txt"), str(runs["green"]), str(tmp_path / "out.jsonl")],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=HANG_S, check=False)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "False False", done.stdout + done.stderr
    expected = greenadapt.load(runs["green"], runtime="onnx").predict([TEXTS[0]])[0]  # type: ignore[union-attr]
    written = json.loads((tmp_path / "out.jsonl").read_text(encoding="utf-8"))["entities"]
    assert written == [e.to_dict() for e in expected]


def test_help_stays_free_of_onnx_runtime() -> None:
    done = subprocess.run([sys.executable, "-c", "import sys; from greenadapt.cli import main; sys.argv=['greenadapt','export','--help'];\n"
                           "try: main()\nexcept SystemExit: pass\nprint('onnxruntime' in sys.modules, 'torch' in sys.modules)"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=HANG_S, check=False)
    assert done.stdout.strip().splitlines()[-1] == "False False", done.stdout + done.stderr


def test_a_gmap_folder_is_refused_before_anything_is_loaded_or_exported(tmp_path: Path) -> None:
    """One refusal, where every ONNX path (predict, evaluate, qa, load, export) opens its model."""
    from greenadapt.errors import UsageError
    from greenadapt.inference.onnx_runtime import onnx_model
    from greenadapt.modeling.gmap.wiring import CONFIG_FILE

    (tmp_path / CONFIG_FILE).write_text("{}")
    with pytest.raises(UsageError, match="G-MAP"):
        onnx_model(tmp_path, lambda: pytest.fail("the torch model was loaded"))
    assert not (tmp_path / ".greenadapt-cache").exists()


def test_a_quantized_graph_of_another_shape_is_refused_not_served_per_tensor() -> None:
    """The per-token rewrite knows the quantizer's pattern (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul); a
    graph of another shape (another ONNX Runtime's quantizer) is refused, never left quantized over the batch."""
    from onnx import TensorProto, helper

    from greenadapt.inference.onnx_quantize import per_row_activations

    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="dql"), helper.make_node("Identity", ["q"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 4])])
    with pytest.raises(ValueError, match="not MatMulInteger"):
        per_row_activations(helper.make_model(graph))


def test_a_gelus_output_is_quantized_around_a_low_zero_point_with_finer_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GELU's output (never below -0.17) gets most of uint8's steps above zero: its product's int8 error is well under
    the symmetric form's, on the same rows, and a row's result is still its own (the same alone as in the batch)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper, save

    from greenadapt.inference import onnx_quantize

    rng = np.random.default_rng(0)
    whole = rng.integers(-127, 128, size=(64, 32))
    whole[0] = 127  # each column's largest magnitude 127: its per-channel int8 weights are exact, so the error is the activations'
    weights = numpy_helper.from_array((whole / 64).astype(np.float32), "w")
    constant = {name: numpy_helper.from_array(np.array(value, dtype=np.float32), name) for name, value in
                (("root2", 2 ** 0.5), ("one", 1.0), ("half", 0.5))}
    nodes = [helper.make_node("Div", ["x", "root2"], ["scaled"]), helper.make_node("Erf", ["scaled"], ["erf"]),
             helper.make_node("Add", ["erf", "one"], ["shifted"]), helper.make_node("Mul", ["x", "shifted"], ["product"]),
             helper.make_node("Mul", ["product", "half"], ["gelu"]), helper.make_node("MatMul", ["gelu", "w"], ["y"])]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 32])], [weights, *constant.values()])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "fp32.onnx"))
    rows = (rng.normal(size=(256, 64)) * 2).astype(np.float32)

    def outputs(path: Path, feed: np.ndarray) -> np.ndarray:
        return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": feed})[0]

    exact = outputs(tmp_path / "fp32.onnx", rows)
    onnx_quantize.quantize_per_row(tmp_path / "fp32.onnx", tmp_path / "one-sided.onnx")
    monkeypatch.setattr(onnx_quantize, "_after_gelu", lambda *args, **kwargs: False)
    onnx_quantize.quantize_per_row(tmp_path / "fp32.onnx", tmp_path / "symmetric.onnx")
    one_sided = outputs(tmp_path / "one-sided.onnx", rows)
    symmetric = outputs(tmp_path / "symmetric.onnx", rows)
    assert np.abs(one_sided - exact).mean() < 0.7 * np.abs(symmetric - exact).mean()  # steps of max/223, not max/127
    alone = np.concatenate([outputs(tmp_path / "one-sided.onnx", rows[i:i + 1]) for i in range(0, 256, 37)])
    assert np.array_equal(alone, one_sided[::37])


@pytest.mark.parametrize(("activation", "zero_point"), [("gelu", 32), ("gelu, half folded", 32), ("tanh", 128), ("gated gelu", 128),
                                                         ("gated gelu, half folded", 128)])
def test_only_a_gelus_own_output_is_quantized_one_sided(tmp_path: Path, activation: str, zero_point: int) -> None:
    """x·Φ(x) is never below -0.17; a bare tanh (a pooler's, before a classifier) or a gated GELU, gelu(a)·b, can be
    far below zero, so they keep the symmetric zero point."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from greenadapt.inference.onnx_quantize import quantize_per_row

    constants = [numpy_helper.from_array(np.array(value, dtype=np.float32), name) for name, value in
                 (("root2", 2 ** 0.5), ("one", 1.0), ("half", 0.5))]
    constants.append(numpy_helper.from_array(np.ones((8, 4), dtype=np.float32), "w"))
    gelu = [helper.make_node("Div", ["x", "root2"], ["scaled"]), helper.make_node("Erf", ["scaled"], ["erf"]),
            helper.make_node("Add", ["erf", "one"], ["shifted"]), helper.make_node("Mul", ["x", "shifted"], ["product"]),
            helper.make_node("Mul", ["product", "half"], ["gelu"])]
    nodes = {"gelu": [*gelu, helper.make_node("MatMul", ["gelu", "w"], ["y"])],
             "tanh": [helper.make_node("Tanh", ["x"], ["tanh"]), helper.make_node("MatMul", ["tanh", "w"], ["y"])],
             "gelu, half folded": [*gelu[:4], helper.make_node("MatMul", ["product", "w"], ["y"])],  # x·(1 + erf): ½ in the weights
             "gated gelu": [*gelu, helper.make_node("Mul", ["gelu", "gate"], ["gated"]), helper.make_node("MatMul", ["gated", "w"], ["y"])],
             # as shallow as a GELU: only the gate, a factor that is neither x nor 1 + erf(x/√2), tells it apart
             "gated gelu, half folded": [*gelu[:4], helper.make_node("Mul", ["product", "gate"], ["gated"]),
                                         helper.make_node("MatMul", ["gated", "w"], ["y"])]}[activation]
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["rows", 8]) for name in ("x", "gate")]
    graph = helper.make_graph(nodes, activation, inputs if activation.startswith("gated") else inputs[:1],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 4])], constants)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "fp32.onnx"))
    quantize_per_row(tmp_path / "fp32.onnx", tmp_path / "int8.onnx")
    quantized = onnx.load(str(tmp_path / "int8.onnx"))
    points = [numpy_helper.to_array(t).item() for t in quantized.graph.initializer if t.data_type == TensorProto.UINT8 and not t.dims]
    assert points == [zero_point]


def test_the_pipeline_and_evaluate_give_an_int8_sentence_the_same_answer_in_any_batch(runs: dict[str, Path]) -> None:
    """Issue 85, item 1, through ``greenadapt.pipeline`` (transformers' Pipeline over the same model) and ``evaluate``:
    100 sentences alone, then shuffled in batches of 64: the same entities and scores; evaluate's F1 at batch 1 and 64
    the same under every pooling mode."""
    import random

    import greenadapt.api as api

    texts = _sentences(100, seed=5)
    order = list(range(100))
    random.Random(5).shuffle(order)
    alone = greenadapt.pipeline("ner", runs["green"], runtime="onnx", quantize="int8", batch_size=1)
    together = greenadapt.pipeline("ner", runs["green"], runtime="onnx", quantize="int8", batch_size=64)
    single = [alone(texts[i]) for i in range(100)]
    batched = dict(zip(order, together([texts[i] for i in order]), strict=True))
    assert sum(map(len, single)) > 10  # entities to compare
    for index, found in enumerate(single):
        assert [(e["start"], e["end"], e["entity_group"]) for e in found] == [(e["start"], e["end"], e["entity_group"])
                                                                              for e in batched[index]]
        assert all(abs(a["score"] - b["score"]) <= 1e-6 for a, b in zip(found, batched[index], strict=True))
    evaluate = api.evaluate  # type: ignore[attr-defined]
    scores = [evaluate(runs["test"], model=[str(runs["green"])], runtime="onnx", quantize="int8", batch_size=size, progress=False).scores
              for size in (1, 64)]
    assert scores[0] == scores[1]
