"""G-MAP wired into ``finetune``, ``predict`` and ``qa``: end to end with tiny models.

The domain model is a tiny expanded BERT (T̂ + T_LM); the general model a
tiny BERT of the same width, with T_LM's vocabulary or with a tokenizer of
its own (so the memory comes from a different tokenization and length).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import build_tiny_bert
from finetune_helpers import build_tiny_expanded, write_classify_file, write_ner_file, loop_settings
from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file


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


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gmap-models")
    domain = build_tiny_expanded(root / "domain", seed=0)
    general = build_tiny_bert(root / "general", head="base", seed=7)
    # A general model with a tokenizer of its own: without some whole words, so it splits them
    # into more pieces than T_LM does (other ids, other lengths).
    own = build_tiny_bert(root / "general-own", head="base", seed=8)
    from conftest import tiny_vocab
    from transformers import BertTokenizer

    vocab = [t for t in tiny_vocab() if t not in ("cancer", "tumor", "infection", "patients", "study", "cells")]
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        (own / name).unlink(missing_ok=True)
    BertTokenizer(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True).save_pretrained(own)
    qa_domain = build_tiny_expanded_qa(root / "qa-domain")
    return {"domain": domain, "general": general, "own": own, "qa": qa_domain}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gmap-data")
    return {
        "ner_train": write_ner_file(root / "train.tsv", 24, seed=1),
        "ner_dev": write_ner_file(root / "dev.tsv", 10, seed=2),
        "cls_train": write_classify_file(root / "train.jsonl", 24, seed=3),
        "cls_dev": write_classify_file(root / "dev.jsonl", 10, seed=4),
    }


FAST = ("--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--device", "cpu", "--eval-batch-size", "4", "-q")


def test_ner_gmap_chunk_trains_saves_and_predict_reproduces_dev(models, data, tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "run"
    code, stdout, err = cli(
        monkeypatch, capsys, "finetune", "--task", "ner", "--train", str(data["ner_train"]), "--dev", str(data["ner_dev"]),
        "--model", str(models["domain"]), "--general-model", str(models["general"]), "--gmap", "chunk",
        "--out", str(out), "--workdir", str(tmp_path / "w"), "--json", *FAST,
    )
    assert code == 0, err
    manifest = json.loads(stdout)
    assert manifest["config"]["gmap"]["strategy"] == "chunk"
    gmap = manifest["stats"]["gmap"]
    # 2 domain layers, 2 general layers: chunk fuses layers 1 and 2 with gated states 0 and 1.
    assert gmap["plan"]["states"] == {"1": [0], "2": [1]}
    assert gmap["general"]["model"] == str(models["general"].resolve()) and gmap["general_tokenizer"] == "T_LM"
    assert any(i.get("role") == "general" for i in manifest["inputs"])
    for name in ("gmap_config.json", "gmap_gates.safetensors", "model.safetensors", "greenadapt_task.json"):
        assert (out / name).is_file(), name

    predicted = tmp_path / "pred.tsv"
    code, stdout, err = cli(
        monkeypatch, capsys, "predict", "--model", str(out), "--input", str(data["ner_dev"]), "--output", str(predicted),
        "--device", "cpu", "--json",
    )
    assert code == 0, err
    assert predicted.read_text() == (out / "predictions" / "dev.tsv").read_text()
    doc = json.loads(stdout)
    assert doc["metrics"]["f1"] == pytest.approx(manifest["stats"]["summary"]["dev"]["mean"]
                                                 if "mean" in manifest["stats"]["summary"]["dev"] else manifest["stats"]["summary"]["dev"])

    # The same run again is up to date; a changed G-MAP option is not skipped as up to date.
    base = ["finetune", "--task", "ner", "--train", str(data["ner_train"]), "--dev", str(data["ner_dev"]),
            "--model", str(models["domain"]), "--general-model", str(models["general"]), "--out", str(out), *FAST]
    code, stdout, err = cli(monkeypatch, capsys, *base, "--gmap", "chunk")
    assert code == 0 and "up to date" in stdout
    code, stdout, err = cli(monkeypatch, capsys, *base, "--gmap", "single")
    assert code == 4 and "gmap" in err and "\n" not in err.strip()


def test_predict_with_gmap_runs_the_general_model(models, data, tmp_path, monkeypatch, capsys) -> None:
    """Reloaded G-MAP predictions differ from the bare domain model's: the memory is used at inference."""
    from greenadapt.inference.labelling import run_predict
    from greenadapt.inference.settings import LoadSettings

    out = tmp_path / "run"
    code, _, err = cli(
        monkeypatch, capsys, "finetune", "--task", "classify", "--train", str(data["cls_train"]), "--dev", str(data["cls_dev"]),
        "--model", str(models["domain"]), "--general-model", str(models["own"]), "--gmap", "single",
        "--out", str(out), "--workdir", str(tmp_path / "w"), *FAST,
    )
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stats"]["gmap"]["general_tokenizer"] == "own"
    assert (out / "gmap-tokenizer" / "tokenizer.json").is_file()
    from family_models import assert_loads_without_parsing_its_vocabulary_in_python

    assert_loads_without_parsing_its_vocabulary_in_python(out / "gmap-tokenizer")  # saved as every greenadapt tokenizer
    result = run_predict(out, data["cls_dev"], tmp_path / "p.jsonl", options=LoadSettings(device="cpu"))
    assert (tmp_path / "p.jsonl").read_text() == (out / "predictions" / "dev.jsonl").read_text()
    assert result.metrics is not None

    # Logits of the fused model vs the domain model alone (fusion off) on the same units.
    from greenadapt.artifacts.model_folder import load_tokenizers
    from greenadapt.inference.labelling import find_model_folder
    from greenadapt.modeling.gmap import wiring as gmap
    from greenadapt.tasks import get_task
    from greenadapt.compute.distributed import DistContext
    from greenadapt.compute.pooling import pooled_logits

    folder, settings = find_model_folder(out)
    task = get_task("classify")
    tokenizers = load_tokenizers(folder)
    units, _ = task.units(task.read(data["cls_dev"], settings, require_labels=True), settings, tokenizers)
    model, tokenizer, length = gmap.load_fused(folder)
    assert tokenizer is not None
    gmap.attach_memory(units, task.read(data["cls_dev"], settings, require_labels=True).examples, tokenizer, length)
    # The general model's own (cased) tokenization differs from T_LM for some unit.
    assert any(len(u.memory_ids) != len(u.ids[0]) or not np.array_equal(u.memory_ids, u.ids[0]) for u in units)
    kwargs = {"has_domain": True, "pad_id": tokenizers.pad_id, "batch_size": 4, "precision": "fp32", "modes": ("mean",)}
    fused = pooled_logits(model, units, DistContext(), **kwargs)["mean"]
    with model.fusion_disabled():
        alone = pooled_logits(model, units, DistContext(), **kwargs)["mean"]
    assert not np.allclose(fused, alone, atol=1e-6)


def _train_once(models, units_of, *, unfrozen: bool, tmp_path: Path, cache: bool = False, epochs: int = 1):
    """A real ``train()`` run with a fused model; returns (model, general weights before, train log)."""
    from greenadapt.artifacts.pretrained import resolve_model
    from greenadapt.modeling.gmap import wiring as gmap
    from greenadapt.compute.distributed import DistContext
    from greenadapt.training.finetuning import train
    from greenadapt.training.runtime import TrainingHooks

    tokenizers, units = units_of
    ref = resolve_model(str(models["domain"]))
    settings = loop_settings(gmap="chunk", general_model=str(models["general"]), gmap_unfrozen=unfrozen, gmap_cache=cache)
    setup = gmap.prepare(settings, ref, tokenizers.general, cache_root=tmp_path / "cache")
    gmap.attach_memory(units[1], units[0], setup.tokenizer, setup.max_length)
    from transformers import AutoModelForTokenClassification, set_seed

    set_seed(0)
    domain = AutoModelForTokenClassification.from_pretrained(str(models["domain"]), num_labels=3)
    model = gmap.build_model(domain, setup)
    before = {k: v.detach().clone() for k, v in model.general.state_dict().items()}
    log = tmp_path / f"log-{unfrozen}-{cache}.jsonl"
    config = loop_settings(mix=0.5, batch_size=8, epochs=epochs, lr=1e-3, seed=3)
    train(model, units[1], config, DistContext(), pad_id=tokenizers.pad_id, n_base_rows=tokenizers.general_vocab_size,
          has_domain=True, hooks=TrainingHooks(log_path=log))
    return model, before, [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture
def ner_units(models, data):
    from greenadapt.artifacts.model_folder import load_tokenizers
    from greenadapt.tasks import TaskSettings, get_task

    task = get_task("ner")
    tokenizers = load_tokenizers(models["domain"])
    task_file = task.read(data["ner_train"], TaskSettings(task="ner", labels=[]), require_labels=True)
    settings = TaskSettings(task="ner", labels=task.order_labels([t for s in task_file.examples for t in s.labels]))
    units, _ = task.units(task_file, settings, tokenizers)
    return tokenizers, (task_file.examples, units)


def test_a_real_training_step_leaves_the_frozen_general_model_alone(models, ner_units, tmp_path) -> None:
    model, before, log = _train_once(models, ner_units, unfrozen=False, tmp_path=tmp_path)
    assert len(log) >= 3 and all(np.isfinite(r["loss"]) for r in log)
    for name, tensor in model.general.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    assert all(p.grad is None and not p.requires_grad for p in model.general.parameters())
    assert all(p.requires_grad for p in model.gates.parameters())
    assert not model.general.training  # eval mode: no dropout in the frozen model


def test_the_unfrozen_ablation_trains_the_general_model(models, ner_units, tmp_path) -> None:
    model, before, _ = _train_once(models, ner_units, unfrozen=True, tmp_path=tmp_path)
    changed = [n for n, t in model.general.state_dict().items() if not torch.equal(t, before[n])]
    assert changed and any("encoder.layer.0" in n for n in changed)


def test_the_memory_cache_gives_the_same_losses(models, ner_units, tmp_path) -> None:
    _, _, plain = _train_once(models, ner_units, unfrozen=False, tmp_path=tmp_path, epochs=2)
    model, _, cached = _train_once(models, ner_units, unfrozen=False, tmp_path=tmp_path, cache=True, epochs=2)
    stats = model.memory_cache.stats()
    assert stats["hits"] > 0 and stats["misses"] > 0  # epoch 2 read what epoch 1 stored
    assert [r["loss"] for r in cached] == pytest.approx([r["loss"] for r in plain], rel=1e-5, abs=1e-6)


def test_qa_gmap_trains_then_qa_answers_the_same(models, tmp_path, monkeypatch, capsys) -> None:
    context = "The heart rate was high. Myocarditis was associated with tachycardias. Ventilation was the main treatment."
    squad = squad_file(tmp_path / "squad.json", [{"paragraphs": [paragraph(
        context,
        ("q1", "What was high?", [("heart rate", 4)]),
        ("q2", "What was associated with tachycardias?", [("Myocarditis", 25)]),
    )]}])
    out = tmp_path / "run"
    # a general model with a second tokenizer: its identity covers that folder's files too, as every runner records it
    general = shutil.copytree(models["general"], tmp_path / "general")
    (general / "general-tokenizer").mkdir()
    shutil.copy(general / "tokenizer.json", general / "general-tokenizer" / "tokenizer.json")
    code, stdout, err = cli(
        monkeypatch, capsys, "finetune", "--task", "qa", "--train", str(squad), "--test", str(squad),
        "--model", str(models["qa"]), "--general-model", str(general), "--gmap", "chunk", "--gmap-cache",
        "--workdir", str(tmp_path / "w"), "--out", str(out), "--max-steps", "3", "--batch-size", "4", "--max-length", "48",
        "--doc-stride", "16", "--device", "cpu", "--json", "-q",
    )
    assert code == 0, err
    manifest = json.loads(stdout)
    assert manifest["stats"]["gmap"]["plan"]["strategy"] == "chunk" and (out / "gmap_config.json").is_file()
    assert manifest["stats"]["gmap_cache"]["misses"] > 0
    assert "general_tokenizer_digest" in next(i for i in manifest["inputs"] if i.get("role") == "general")
    code, stdout, err = cli(
        monkeypatch, capsys, "qa", "--model", str(out), "--data", str(squad), "--out", str(tmp_path / "qa"),
        "--max-length", "48", "--device", "cpu", "--json", "-q",
    )
    assert code == 0, err
    answered = json.loads((tmp_path / "qa" / "predictions.json").read_text())
    assert answered == json.loads((out / "predictions" / "test.json").read_text())
    assert json.loads(stdout)["stats"]["gmap"]["gmap"]["strategy"] == "chunk"


@pytest.mark.parametrize(
    ("extra", "code", "fragment"),
    [
        (["--gmap", "sideways", "--general-model", "G"], 2, "unknown --gmap 'sideways'"),
        (["--gmap", "single", "--gmap-layers", "5", "--general-model", "G"], 2, "G-MAP layer 5 does not exist"),
        (["--gmap", "single", "--gmap-layers", "x"], 2, "not a list of layer numbers"),
        (["--gmap", "chunk"], 2, "needs a general model"),
        (["--gmap-layers", "1"], 2, "need(s) --gmap"),
        (["--gmap-indexing", "paper"], 2, "need(s) --gmap"),
        (["--gmap", "multi", "--general-model", "G", "--gmap-indexing", "sideways"], 2, "unknown --gmap-indexing 'sideways'"),
        (["--gmap", "chunk", "--general-model", "G", "--gmap-unfrozen", "--gmap-cache"], 2, "--gmap-cache needs a frozen"),
        (["--gmap", "chunk", "--general-model", "/nonexistent/general"], 3, "model folder not found"),
    ],
)
def test_bad_gmap_options_fail_in_one_line(models, data, tmp_path, monkeypatch, capsys, extra, code, fragment) -> None:
    extra = [str(models["general"]) if x == "G" else x for x in extra]
    status, _, err = cli(
        monkeypatch, capsys, "finetune", "--task", "ner", "--train", str(data["ner_train"]), "--model", str(models["domain"]),
        "--out", str(tmp_path / "run"), *extra, *FAST,
    )
    assert status == code, err
    assert fragment in err and err.startswith("error:") and "\n" not in err.strip() and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_general_model_of_another_width_is_refused(models, data, tmp_path, monkeypatch, capsys) -> None:
    wide = build_tiny_bert(tmp_path / "wide", head="base", hidden=64)
    capsys.readouterr()  # building the model wrote a progress bar
    status, _, err = cli(
        monkeypatch, capsys, "finetune", "--task", "ner", "--train", str(data["ner_train"]), "--model", str(models["domain"]),
        "--gmap", "chunk", "--general-model", str(wide), "--out", str(tmp_path / "run"), *FAST,
    )
    assert status == 3 and "hidden size 64 differs" in err and "\n" not in err.strip()


def test_the_general_model_defaults_to_the_one_an_expanded_model_came_from(models, tmp_path) -> None:
    from greenadapt.artifacts.pretrained import resolve_model
    from greenadapt.modeling.gmap.general_model import resolve_general_model

    folder = tmp_path / "expanded"
    build_tiny_expanded(folder)
    manifest = {"kind": "expand", "config": {"model": {"model": "tiny", "path": str(models["general"])}}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    ref = resolve_general_model(loop_settings(gmap="chunk"), resolve_model(str(folder)))
    assert ref.path == models["general"].resolve()
    explicit = resolve_general_model(loop_settings(gmap="chunk", general_model=str(models["own"])), resolve_model(str(folder)))
    assert explicit.path == models["own"].resolve()


def test_ner_memory_under_another_tokenizer_covers_the_units_words(models, data) -> None:

    from greenadapt.artifacts.model_folder import load_tokenizers
    from greenadapt.modeling.gmap import wiring as gmap
    from greenadapt.modeling.units import VIEW_GENERAL
    from greenadapt.tasks import TaskSettings, get_task

    task = get_task("ner")
    tokenizers = load_tokenizers(models["domain"])
    task_file = task.read(data["ner_train"], TaskSettings(task="ner", labels=[]), require_labels=True)
    settings = TaskSettings(task="ner", labels=task.order_labels([t for s in task_file.examples for t in s.labels]), max_words=4)
    units, _ = task.units(task_file, settings, tokenizers)
    assert gmap.general_tokenizer(models["general"], tokenizers.general) is None  # same vocabulary: T_LM
    own = gmap.general_tokenizer(models["own"], tokenizers.general)
    assert own is not None
    gmap.attach_memory(units, task_file.examples, own, 128)
    for unit in units:
        words = task_file.examples[unit.example].words[unit.first_word : unit.first_word + unit.n_rows]
        expected = own(list(words), is_split_into_words=True)["input_ids"]
        assert unit.memory_ids.tolist() == expected
    # Some unit is longer under the general tokenizer than its T_LM view (words it lacks are split).
    assert any(len(u.memory_ids) > len(u.ids[VIEW_GENERAL]) for u in units)
    gmap.attach_memory(units, task_file.examples, None, 128)
    assert all(u.memory_ids is u.ids[VIEW_GENERAL] for u in units)


def test_qa_window_memory_is_the_general_tokenization_of_the_windows_words() -> None:
    from greenadapt.inference.qa.infer import LogitJob, MemorySource, SpecialIds, build_batch, memory_batch
    from greenadapt.inference.qa.windows import Window

    special, general_special = SpecialIds(2, 3, 0), SpecialIds(102, 103, 100)
    # Domain pieces 10..15 lie in words 0,1,1,2,3,4; general pieces 20..27 in words 0,0,1,2,2,3,4,4.
    source = MemorySource(
        question_ids=np.array([50, 51]),
        context_ids=np.arange(20, 28),
        context_words=np.array([0, 0, 1, 2, 2, 3, 4, 4]),
        job_words=np.array([0, 1, 1, 2, 3, 4]),
        special=general_special,
    )
    job = LogitJob("q", np.array([40]), np.arange(10, 16), special, source)
    plain = LogitJob("p", np.array([40]), np.arange(10, 16), special)
    items = [(job, Window(2, 4, 1, 4)), (plain, Window(0, 6, 0, 6))]
    inputs = build_batch(items)
    ids, types, mask = memory_batch(items, inputs, max_length=64)
    # Window pieces 1..3 lie in words 1 and 2 -> general pieces 22, 23, 24.
    assert ids[0, : mask[0].sum()].tolist() == [102, 50, 51, 103, 22, 23, 24, 103]
    assert types[0, : mask[0].sum()].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    # A job without a memory source reads its own window.
    n = int(inputs[2][1].sum())
    assert ids[1, :n].tolist() == inputs[0][1, :n].tolist() and mask[1].sum() == n
    # Cut to the general model's length.
    short, _, short_mask = memory_batch(items[:1], build_batch(items[:1]), max_length=6)
    assert short[0, : short_mask[0].sum()].tolist() == [102, 50, 51, 103, 22, 103]
