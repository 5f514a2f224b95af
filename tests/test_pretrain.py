"""pretrain: the loop learns, resumes exactly, trains only new rows, keeps the general model frozen; outputs load; errors are one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HANG_S, free_port, run_ranks
from finetune_helpers import NEW_WORDS, build_tiny_expanded

from greenadapt.artifacts.manifest import load_stage
from greenadapt.errors import EXIT_PREEMPTED, CorpusError, UsageError
from greenadapt.progress import NullProgress
from greenadapt import pretrain
from greenadapt.training.checkpoint import Preempted

from greenadapt.options import Run

WORDS = "the patients were treated with the protein and the gene expression of cancer cells was increased in the tumor".split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny, very repetitive corpus: rotations of one sentence, plus the expanded model's new words."""
    path = tmp_path_factory.mktemp("corpus") / "domain.txt"
    lines = [" ".join(WORDS[i % 7 :] + WORDS[: i % 7] + [NEW_WORDS[i % 4]]) for i in range(300)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _options(model: Path, corpus: Path, out: Path, **changes: Any) -> dict[str, Any]:
    """greenadapt.pretrain's keywords: the tests' recipe, ``changes`` overriding it."""
    return {"corpus": [str(corpus)], "model": str(model), "out": out, "workdir": out.parent / "work", "max_steps": 8, "batch_size": 8,
            "lr": 2e-3,
            "seed": 3, "warmup": 0.1, "eval_batch_size": 8, "max_length": 24, "heldout": 8, "workers": 1, "device": "cpu", **changes}


def _weights(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(folder / "model.safetensors"))


def _log(folder: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in (folder / "train_log.jsonl").read_text().splitlines()]


# --------------------------------------------------------------------------
# Learning, outputs, evaluation


def test_loss_decreases_output_loads_and_eval_only_reproduces(tiny_bert: Path, corpus: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    out = tmp_path / "dapt"
    general = tmp_path / "general.txt"
    general.write_text("".join(f"a study of {w} and heart rate {i} risk\n" for i, w in enumerate(["blood", "virus", "sleep"] * 20)))
    outcome = pretrain(**_options(tiny_bert, corpus, out, max_steps=30, eval_every=15, general_corpus=[str(general)]))
    manifest = load_stage(out, "pretrain")
    stats = manifest["stats"]
    evaluations = stats["evaluations"]
    assert [e["step"] for e in evaluations] == [0, 15, 30]
    before, after = evaluations[0]["domain"]["loss"], evaluations[-1]["domain"]["loss"]
    assert after < before - 1.0, (before, after)  # a repetitive corpus is easy to learn
    assert evaluations[-1]["domain"]["perplexity"] == pytest.approx(np.exp(after), rel=1e-3)
    assert stats["steps"] == 30 and stats["tokens_per_second"] > 0
    assert all(e["general"]["targets"] > 0 for e in evaluations)  # forgetting is tracked on the general corpus
    assert len([r for r in _log(out) if "loss" in r]) == 30

    model = AutoModelForMaskedLM.from_pretrained(str(out)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert AutoModel.from_pretrained(str(out)).config.vocab_size == model.config.vocab_size
    inputs = tokenizer("the patients were [MASK] with the protein", return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
    assert torch.isfinite(logits).all() and logits.shape[-1] == len(tokenizer)

    # rerun: up to date
    assert pretrain(**_options(tiny_bert, corpus, out, max_steps=30, eval_every=15, general_corpus=[str(general)])).skipped
    # --eval-only on the output reproduces the run's last held-out evaluation; twice the same numbers
    eval_options = dict(eval_only=True, corpus=[str(corpus), str(general)], model=str(out), workdir=tmp_path / "work", max_length=24,
                        heldout=8, device="cpu", eval_batch_size=3, workers=1)
    first, second = pretrain(**eval_options), pretrain(**eval_options)
    assert first == second
    scored = first["results"][str(corpus)]
    assert scored["loss"] == pytest.approx(after, abs=1e-4) and scored["targets"] == evaluations[-1]["domain"]["targets"]
    assert first["results"][str(general)]["loss"] == pytest.approx(evaluations[-1]["general"]["loss"], abs=1e-4)
    # and the base model scores worse on the same masked sequences
    base = pretrain(**{**eval_options, "model": str(tiny_bert)})["results"][str(corpus)]
    assert base["loss"] == pytest.approx(before, abs=1e-4) and base["targets"] == scored["targets"]
    assert outcome.path == out


def test_head_warmup_trains_the_head_alone_then_everything(tiny_bert: Path, corpus: Path, tmp_path: Path) -> None:
    original = _weights(tiny_bert)
    head = {k for k in original if k.startswith("cls.predictions.") and not k.endswith("decoder.weight")}
    assert head and any(k.startswith("bert.encoder.") for k in original)

    warm = tmp_path / "warm"
    pretrain(**_options(tiny_bert, corpus, warm, max_steps=3, head_warmup_steps=3))
    after = _weights(warm)
    for key, value in original.items():
        if key in head:
            continue
        assert np.array_equal(after[key], value), f"{key} changed during the head warm-up"
    assert any(not np.array_equal(after[k], original[k]) for k in head)
    losses = [r for r in _log(warm) if "loss" in r]
    assert [r.get("head_only") for r in losses] == [True, True, True]
    assert losses[-1]["loss"] < losses[0]["loss"]  # the head alone learns

    full = tmp_path / "full"
    pretrain(**_options(tiny_bert, corpus, full, max_steps=5, head_warmup_steps=3))
    assert [r.get("head_only", False) for r in _log(full) if "loss" in r] == [True, True, True, False, False]
    trained = _weights(full)
    assert not np.array_equal(trained["bert.encoder.layer.0.attention.self.query.weight"],
                              original["bert.encoder.layer.0.attention.self.query.weight"])
    # an option at its default does not enter the fingerprint: outputs of older versions stay up to date
    assert load_stage(warm, "pretrain")["config"]["train"]["head_warmup_steps"] == 3
    pretrain(**_options(tiny_bert, corpus, tmp_path / "plain", max_steps=1))
    assert "head_warmup_steps" not in load_stage(tmp_path / "plain", "pretrain")["config"]["train"]


def test_a_pretrained_model_is_expanded_like_any_other(tiny_bert: Path, corpus: Path, tmp_path: Path) -> None:
    """DAPT, then Green: `align`/`expand` take a pretrain output as their model."""
    from transformers import AutoModelForMaskedLM
    from w2v_fixtures import linear_w2v

    from greenadapt.adaptation.align import align_stage
    from greenadapt.adaptation.expand import expand_stage

    dapt = tmp_path / "dapt"
    pretrain(**_options(tiny_bert, corpus, dapt, max_steps=2))
    w2v, _ = linear_w2v(tmp_path / "w2v", dapt)
    expanded = expand_stage(align=align_stage(w2v=w2v, run=Run(out=tmp_path / "align")).path, run=Run(out=tmp_path / "expand"))
    before, after = _weights(dapt), _weights(expanded.path)
    key = "bert.embeddings.word_embeddings.weight"
    rows = before[key].shape[0]
    assert after[key].shape[0] > rows
    assert np.array_equal(after[key][:rows], before[key])  # the pretrained rows, bit-identical
    model = AutoModelForMaskedLM.from_pretrained(str(expanded.path))
    assert model.get_output_embeddings().weight.shape[0] == after[key].shape[0]


class _AtStep(NullProgress):
    def __init__(self, step: int) -> None:
        self.step = step

    def update(self, completed: float, **info: float | str) -> None:
        if completed == self.step and info:
            os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_checkpoint_and_resume_equal_an_uninterrupted_run(tiny_bert: Path, corpus: Path, tmp_path: Path) -> None:
    """SIGTERM saves a checkpoint and --resume finishes the run as if uninterrupted; so does a crash after a checkpoint
    --save-minutes took (the interval tiny here, so every step is due): pretrain reads the options finetune does."""
    from interrupt_helpers import Crash, CrashAt

    from greenadapt.training.checkpoint import latest_checkpoint
    from greenadapt.training.job import checkpoint_folder

    small = tmp_path / "small.txt"
    small.write_text("\n".join(corpus.read_text().splitlines()[:40]) + "\n")
    # ~37 sequences, 4 held out: 5 batches of 8 (the last of 1) per epoch; 9 steps cross an epoch boundary
    settings = {"max_steps": 9, "batch_size": 8, "eval_every": 4, "heldout": 4}
    reference = pretrain(**_options(tiny_bert, small, tmp_path / "reference", **settings)).path
    out = tmp_path / "run"
    with pytest.raises(Preempted) as info:
        pretrain(**_options(tiny_bert, small, out, **settings), progress=_AtStep(6))
    assert info.value.exit_code == EXIT_PREEMPTED == 99 and "--resume" in info.value.one_line()
    assert not out.exists()
    with pytest.raises(Exception, match="pass --resume"):
        pretrain(**_options(tiny_bert, small, out, **settings))
    resumed = pretrain(**_options(tiny_bert, small, out, resume=True, **settings))
    assert not resumed.skipped and not (tmp_path / "run.checkpoint").exists()
    assert resumed.manifest["cost"]["processes"] == 2  # the stopped part's cost is the run's too
    a, b = _weights(reference), _weights(out)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-6, err_msg=key)
    assert _log(reference) == _log(out)
    assert load_stage(reference, "pretrain")["stats"]["evaluations"] == load_stage(out, "pretrain")["stats"]["evaluations"]
    crashed = tmp_path / "crashed"
    with pytest.raises(Crash):
        pretrain(**_options(tiny_bert, small, crashed, save_minutes=1e-6, **settings), progress=CrashAt(6))
    found = latest_checkpoint(checkpoint_folder(crashed))
    assert found is not None and 1 <= found[1]["step"] < 6
    pretrain(**_options(tiny_bert, small, crashed, save_minutes=1e-6, resume=True, **settings))
    for key, value in _weights(crashed).items():
        np.testing.assert_allclose(value, a[key], rtol=0, atol=1e-6, err_msg=key)


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
def test_mixed_precision_trains_checkpoints_and_resumes(dtype_name: str, tiny_bert: Path, corpus: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The autocast path (the CUDA default) run on CPU: fp32 weights saved, fp16's loss scaler checkpointed, resume exact.

    CPU autocast stands in for CUDA here (this machine has no GPU): it runs our
    code under reduced precision (the target-row head, the fp32 loss, the
    scaler's unscale/step/update and its state in checkpoints), not CUDA kernels.
    """
    import torch

    import greenadapt.runners.pretrain.train as train_module
    import greenadapt.training.trainer as trainer

    dtype = getattr(torch, dtype_name)
    for module in (train_module, trainer):  # the held-out evaluation and the training step
        monkeypatch.setattr(module, "autocast_dtype", lambda precision, device: dtype)
    small = tmp_path / "small.txt"
    small.write_text("\n".join(corpus.read_text().splitlines()[:40]) + "\n")
    settings = {"max_steps": 9, "batch_size": 8, "eval_every": 4, "heldout": 4, "save_every": 4}
    reference = pretrain(**_options(tiny_bert, small, tmp_path / "reference", **settings)).path
    weights = _weights(reference)
    assert all(v.dtype == np.float32 for v in weights.values())
    evaluations = load_stage(reference, "pretrain")["stats"]["evaluations"]
    assert all(np.isfinite(e["domain"]["loss"]) for e in evaluations)
    assert evaluations[-1]["domain"]["loss"] < evaluations[0]["domain"]["loss"]

    out = tmp_path / "run"
    with pytest.raises(Preempted):
        pretrain(**_options(tiny_bert, small, out, **settings), progress=_AtStep(6))
    from greenadapt.training.checkpoint import latest_checkpoint
    from greenadapt.training.job import checkpoint_folder

    saved = latest_checkpoint(checkpoint_folder(out))
    assert saved is not None
    scaler = json.loads((saved[0] / "state.json").read_text())["scaler"]
    assert (scaler is not None and scaler["scale"] > 0) == (dtype_name == "float16")
    pretrain(**_options(tiny_bert, small, out, resume=True, **settings))
    resumed = _weights(out)
    for key in weights:
        np.testing.assert_allclose(resumed[key], weights[key], rtol=0, atol=1e-6, err_msg=key)


# --------------------------------------------------------------------------
# Expanded models


def test_expanded_model_trains_new_rows_only(corpus: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model = build_tiny_expanded(tmp_path / "expanded", head="mlm")
    general_size = len(AutoTokenizer.from_pretrained(str(model / "general-tokenizer")))
    domain = AutoTokenizer.from_pretrained(str(model))
    used = [domain.convert_tokens_to_ids(w) for w in NEW_WORDS[:4]]
    unused = [domain.convert_tokens_to_ids(w) for w in NEW_WORDS[4:]]
    assert min(used) >= general_size

    key = "bert.embeddings.word_embeddings.weight"
    original = _weights(model)[key]
    out = tmp_path / "green-mlm"
    pretrain(**_options(model, corpus, out, max_steps=6, train_embeddings="new"))
    trained = _weights(out)[key]
    assert np.array_equal(trained[:general_size], original[:general_size])  # bit-identical
    assert all(not np.array_equal(trained[i], original[i]) for i in used)  # trained in context
    # Rows never in the input still move: the tied decoder's softmax has a gradient for every row.
    assert all(not np.array_equal(trained[i], original[i]) for i in unused)
    assert (out / "general-tokenizer").is_dir() and len(AutoTokenizer.from_pretrained(str(out))) == len(domain)
    loaded = AutoModelForMaskedLM.from_pretrained(str(out))
    assert loaded.get_output_embeddings().weight.shape[0] == trained.shape[0] == loaded.cls.predictions.bias.shape[0]

    frozen = tmp_path / "frozen"
    pretrain(**_options(model, corpus, frozen, max_steps=3, train_embeddings="none"))
    assert np.array_equal(_weights(frozen)[key], original)

    # finetune reads the output as an expanded model (both tokenizers: --mix 0.5 by default)
    from finetune_helpers import write_ner_file

    from greenadapt import finetune

    ner = write_ner_file(tmp_path / "ner.tsv", 12, seed=1)
    tuned = finetune(**dict(task="ner", train=ner, model=str(out), out=tmp_path / "ner", **dict(batch_size=4, max_steps=2), device="cpu"))
    assert tuned.manifest["stats"]["mix"] == 0.5


# --------------------------------------------------------------------------
# G-MAP


def test_gmap_memory_gets_no_gradient_and_the_output_reloads(tiny_bert: Path, tiny_bert_base: Path, corpus: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModel, AutoModelForMaskedLM

    from greenadapt.modeling.gmap.config import GmapConfig
    from greenadapt.modeling.gmap.model import GmapModel, weights_fingerprint
    from greenadapt.runners.pretrain.train import build_masked_lm

    model = AutoModelForMaskedLM.from_pretrained(str(tiny_bert))
    general = AutoModel.from_pretrained(str(tiny_bert_base))
    fingerprint = weights_fingerprint(general)
    gmap = GmapModel(model.base_model, general, GmapConfig(strategy="chunk", general_model=str(tiny_bert_base)))
    mlm = build_masked_lm(model, gmap).train()
    ids = torch.randint(5, 100, (2, 10))
    ids[:, 3] = 4  # [MASK]
    rows = torch.tensor([3, 13])
    logits = mlm(ids, torch.ones_like(ids), rows)
    logits.logsumexp(-1).sum().backward()
    assert all(p.grad is None and not p.requires_grad for p in general.parameters())
    assert all(p.grad is not None for p in gmap.gates.parameters())
    assert general.training is False
    with gmap.fusion_disabled(), torch.no_grad():
        plain = model.cls(model.base_model(input_ids=ids).last_hidden_state.reshape(-1, 32)[rows])
    assert not torch.allclose(plain, logits.detach())  # the memory changes the prediction

    out = tmp_path / "gmap"
    outcome = pretrain(**_options(tiny_bert, corpus, out, max_steps=4, gmap="chunk", general_model=str(tiny_bert_base)))
    assert outcome.manifest["stats"]["gmap"] is not None
    assert (out / "gmap_config.json").is_file() and (out / "gmap_gates.safetensors").is_file()
    reloaded = GmapModel.from_pretrained(out)
    assert type(reloaded.domain).__name__ == "BertForMaskedLM" and weights_fingerprint(reloaded.general) == fingerprint
    AutoModelForMaskedLM.from_pretrained(str(out))  # plain transformers loads the domain model
    # --eval-only uses the recorded general model
    report = pretrain(**dict(eval_only=True, corpus=[str(corpus)], model=str(out), workdir=tmp_path / "work", max_length=24, heldout=8,
                             device="cpu", workers=1))
    assert report["gmap"] is True
    assert report["results"][str(corpus)]["loss"] == pytest.approx(outcome.manifest["stats"]["heldout_after"]["domain"]["loss"], abs=1e-4)


def test_gmap_refuses_a_general_model_with_another_vocabulary(corpus: Path, tmp_path: Path, tiny_bert_base: Path) -> None:
    """G-MAP's options are checked before the corpus is read: the strategy and its layers when the options are made,
    the general model (found, the training tokenizer's vocabulary) before pre-tokenizing; `--gmap none` is off."""
    from greenadapt.errors import ModelError

    model = build_tiny_expanded(tmp_path / "expanded", head="mlm")
    options = _options(model, corpus, tmp_path / "out", gmap="single", general_model=str(tiny_bert_base))
    with pytest.raises(UsageError, match="another vocabulary"):
        pretrain(**options)
    with pytest.raises(ModelError, match="not found"):
        pretrain(**{**options, "general_model": str(tmp_path / "missing")})
    for gmap, refusal in (("sideways", "unknown gmap 'sideways'"), ("single", "G-MAP layer")):
        with pytest.raises(UsageError, match=refusal):
            pretrain(**{**options, "gmap": gmap, "gmap_layers": "99" if gmap == "single" else None})
    assert not (tmp_path / "work" / "cache").exists() and not (tmp_path / "out").exists()  # no corpus was read
    with pytest.raises(UsageError, match="general_model is only used with gmap"):
        pretrain(**{**options, "gmap": "none"})


# --------------------------------------------------------------------------
# Bad input


def test_library_errors(tiny_bert: Path, corpus: Path, tmp_path: Path) -> None:
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("the\n")
    with pytest.raises(CorpusError, match="at least 2"):
        pretrain(**_options(tiny_bert, tiny, tmp_path / "out"))
    with pytest.raises(UsageError, match="gmap needs general_model"):
        pretrain(**_options(tiny_bert, corpus, tmp_path / "out", gmap="chunk"))
    with pytest.raises(UsageError, match="unknown train_embeddings .some."):
        pretrain(**_options(tiny_bert, corpus, tmp_path / "out", train_embeddings="some"))
    with pytest.raises(UsageError, match="save_every, resume=True, save_minutes do not apply to eval_only=True"):
        pretrain(**{**_options(tiny_bert, corpus, tmp_path / "out", eval_only=True, save_every=2, resume=True, save_minutes=1,
                               max_steps=None), "out": None})
    with pytest.raises(UsageError, match="tokenizer='domain' needs a model folder with a domain tokenizer"):
        pretrain(**_options(tiny_bert, corpus, tmp_path / "out", tokenizer="domain"))
    assert not (tmp_path / "out").exists()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "greenadapt", "pretrain", *args], capture_output=True, text=True, timeout=HANG_S)


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    missing = _cli("--corpus", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "o"))
    assert missing.returncode == 3 and missing.stderr.count("\n") == 1
    assert "nope.txt" in missing.stderr and "Traceback" not in missing.stderr
    bad = _cli("--corpus", str(tmp_path), "--eval-only", "--out", str(tmp_path / "o"))
    assert bad.returncode == 2 and "--out does not apply to --eval-only" in bad.stderr and bad.stderr.count("\n") == 1
    strategy = _cli("--corpus", str(tmp_path), "--gmap", "chunk")
    assert strategy.returncode == 2 and "--general-model" in strategy.stderr


# --------------------------------------------------------------------------
# Data parallel

WORKER = """
import sys
from pathlib import Path
from greenadapt import pretrain

model, corpus, out = sys.argv[1:4]
pretrain(**dict(
    corpus=[corpus], model=model, out=Path(out), workdir=Path(out).parent / "work", max_length=24, heldout=6, workers=1,
    **dict(batch_size=8, grad_accum=int(sys.argv[4]), max_steps=4, lr=2e-3, seed=3, eval_every=2, head_warmup_steps=2),
    device="cpu",
))
"""


@pytest.mark.integration  # three interpreters: a minute on an idle 2-core machine
def test_two_gloo_processes_match_one_process(corpus: Path, tmp_path: Path) -> None:
    """Also for the head warm-up (steps 1-2), which one process runs without an encoder graph and DDP by dropping gradients."""
    from conftest import build_tiny_bert
    from finetune_helpers import set_dropout

    model = build_tiny_bert(tmp_path / "model")
    set_dropout(model, 0.0)  # so two processes with the same global batches compute what one does
    small = tmp_path / "small.txt"
    small.write_text("\n".join(corpus.read_text().splitlines()[:40]) + "\n")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    for rank in run_ranks(script, str(model), str(small), str(tmp_path / "ddp"), "2"):
        assert rank.returncode == 0, rank.stderr[-3000:]
    # one process, grad-accum 1: the same global batches

    pretrain(**dict(
        corpus=[str(small)], model=str(model), out=tmp_path / "single", workdir=tmp_path / "work", max_length=24, heldout=6, workers=1,
        **dict(batch_size=8, grad_accum=1, max_steps=4, lr=2e-3, seed=3, eval_every=2, head_warmup_steps=2), device="cpu",
    ))
    a, b = _weights(tmp_path / "ddp"), _weights(tmp_path / "single")
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=2e-5, err_msg=key)
    ea = load_stage(tmp_path / "ddp", "pretrain")["stats"]["evaluations"]
    eb = load_stage(tmp_path / "single", "pretrain")["stats"]["evaluations"]
    assert [e["domain"]["targets"] for e in ea] == [e["domain"]["targets"] for e in eb]
    np.testing.assert_allclose([e["domain"]["loss"] for e in ea], [e["domain"]["loss"] for e in eb], atol=1e-4)
    assert load_stage(tmp_path / "ddp", "pretrain")["stats"]["processes"] == 2


@pytest.mark.integration  # `accelerate launch` starts torchrun underneath: half a minute
def test_accelerate_launch_trains_two_processes_like_one(corpus: Path, tmp_path: Path) -> None:
    """`accelerate launch --multi_gpu` (torchrun underneath; gloo on a machine without GPUs) gives a 2-process run."""
    pytest.importorskip("accelerate")
    from conftest import build_tiny_bert
    from finetune_helpers import set_dropout

    model = build_tiny_bert(tmp_path / "model")
    set_dropout(model, 0.0)
    small = tmp_path / "small.txt"
    small.write_text("\n".join(corpus.read_text().splitlines()[:40]) + "\n")
    common = ["--model", str(model), "--corpus", str(small), "--workdir", str(tmp_path / "work"), "--max-length", "24",
              "--heldout", "6", "--batch-size", "8", "--max-steps", "4", "--lr", "2e-3", "--seed", "3", "--quiet"]
    port = free_port()
    launcher = Path(sys.executable).with_name("accelerate")
    # no user accelerate config; torchrun's log folder (it leaves it) in this test's folder
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HOME=str(tmp_path / "hf"), TMPDIR=str(tmp_path))
    done = subprocess.run(
        [str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--main_process_port", str(port),
         "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "greenadapt", "pretrain", *common, "--out", str(tmp_path / "acc")],
        env=env, capture_output=True, text=True, timeout=HANG_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    single = subprocess.run([sys.executable, "-m", "greenadapt", "pretrain", *common, "--out", str(tmp_path / "one")],
                            env=env, capture_output=True, text=True, timeout=HANG_S)
    assert single.returncode == 0, single.stderr[-3000:]
    assert load_stage(tmp_path / "acc", "pretrain")["stats"]["processes"] == 2
    assert load_stage(tmp_path / "one", "pretrain")["stats"]["processes"] == 1
    a, b = _weights(tmp_path / "acc"), _weights(tmp_path / "one")
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=0, atol=2e-5, err_msg=key)


@pytest.mark.integration
def test_minilm_on_the_biomed_corpus(minilm_path: Path, shared_data: Path, tmp_path: Path) -> None:
    import gzip

    from transformers import AutoModelForMaskedLM

    source = shared_data / "corpora" / "biomed-10m.txt.gz"
    if not source.is_file():
        pytest.skip(f"{source} is absent")
    text = tmp_path / "biomed-300.txt"
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        text.write_text("".join(line for _, line in zip(range(300), handle, strict=False)))
    out = tmp_path / "dapt"
    outcome = pretrain(**_options(minilm_path, text, out, max_steps=3, batch_size=4, lr=1e-4, max_length=64, heldout=4))
    before, after = outcome.manifest["stats"]["heldout_before"]["domain"], outcome.manifest["stats"]["heldout_after"]["domain"]
    assert np.isfinite(before["loss"]) and np.isfinite(after["loss"]) and before["targets"] == after["targets"] > 0
    model = AutoModelForMaskedLM.from_pretrained(str(out))
    assert model.config.vocab_size == 30522 and (out / "tokenizer.json").is_file()


@pytest.mark.parametrize("warmup", [0, 2])
def test_train_new_rows_moves_the_added_rows_and_nothing_else(corpus: Path, tmp_path: Path, warmup: int) -> None:
    from transformers import AutoTokenizer

    model = build_tiny_expanded(tmp_path / "expanded", head="mlm")
    general_size = len(AutoTokenizer.from_pretrained(str(model / "general-tokenizer")))
    key = "bert.embeddings.word_embeddings.weight"
    before = _weights(model)
    out = tmp_path / "new-rows"
    pretrain(**_options(model, corpus, out, max_steps=6, train="new-rows", head_warmup_steps=warmup))
    after = _weights(out)
    assert set(before) == set(after)
    assert not np.array_equal(after[key][general_size:], before[key][general_size:])  # the added rows learned
    assert np.array_equal(after[key][:general_size], before[key][:general_size])
    head = {name for name in before if name.startswith("cls.predictions.transform")}
    moved = {name for name in before if name != key and not np.array_equal(before[name], after[name])}
    # Without a warm-up every other tensor is bit-identical; with one, only the head's own tensors moved.
    assert moved == (head | {"cls.predictions.bias"} if warmup else set()), moved
    encoder = [n for n in before if n.startswith("bert.encoder")]
    assert encoder and all(np.array_equal(before[n], after[n]) for n in encoder)


def test_train_new_rows_needs_added_rows(corpus: Path, tiny_bert: Path, tmp_path: Path) -> None:
    from greenadapt.errors import UsageError

    with pytest.raises(UsageError, match="needs a model with added rows"):
        pretrain(**_options(tiny_bert, corpus, tmp_path / "out", max_steps=2, train="new-rows"))


def test_mix_trains_on_both_tokenizers_and_is_refused_where_it_cannot_work(corpus: Path, tiny_bert: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    model = build_tiny_expanded(tmp_path / "expanded", head="mlm")
    domain = AutoTokenizer.from_pretrained(str(model))
    new_ids = [domain.convert_tokens_to_ids(w) for w in NEW_WORDS[:4]]
    key = "bert.embeddings.word_embeddings.weight"
    original = _weights(model)[key]

    runs = {}
    for share in (0.0, 0.5, 1.0):
        out = tmp_path / f"mix-{share}"
        outcome = pretrain(**_options(model, corpus, out, max_steps=4, mix=share))
        assert outcome.manifest["config"]["mix"] == share
        assert outcome.manifest["stats"]["corpus"]["mix"] == share
        runs[share] = _weights(out)[key]
    # The domain-only mixture equals the plain domain-tokenizer run (same draws, same sequences).
    plain = tmp_path / "plain"
    pretrain(**_options(model, corpus, plain, max_steps=4))
    assert np.allclose(runs[1.0], _weights(plain)[key], atol=1e-6)
    # Read with the general tokenizer only, the new words' pieces are the input: different training.
    assert not np.allclose(runs[0.0], runs[1.0])
    assert not np.allclose(runs[0.5], runs[1.0]) and not np.allclose(runs[0.5], runs[0.0])
    assert all(not np.array_equal(runs[0.5][i], original[i]) for i in new_ids)

    with pytest.raises(UsageError, match="domain tokenizer"):
        pretrain(**_options(tiny_bert, corpus, tmp_path / "no-domain", mix=0.5))
    with pytest.raises(UsageError, match="cannot be combined with tokenizer"):
        pretrain(**_options(model, corpus, tmp_path / "both", mix=0.5, tokenizer="general"))
    with pytest.raises(UsageError, match="^mix must be at most 1"):
        pretrain(**_options(model, corpus, tmp_path / "bad", mix=1.5))


def test_the_sign_of_life_line_in_batch_logs_does_not_break_training(tiny_bert: Path, corpus: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Every step reports a sign of life here (interval 0); 19b11cf crashed on its first one (a rate variable reused)."""
    import logging

    import greenadapt.runners.pretrain.train as train_module

    monkeypatch.setattr(train_module, "_REPORT_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="greenadapt.runners.pretrain.train"):
        outcome = pretrain(**_options(tiny_bert, corpus, tmp_path / "out", max_steps=4))
    assert outcome.manifest["stats"]["steps"] == 4
    lines = [r.getMessage() for r in caplog.records if "tokens/s" in r.getMessage()]
    assert len(lines) == 4 and lines[-1].startswith("step 4 of 4:")


@pytest.mark.parametrize("sequences", [37, 38, 39])
def test_an_epoch_whose_last_batch_is_too_small_to_split_still_ends(tiny_bert: Path, tmp_path: Path, sequences: int) -> None:
    """A last batch with fewer sequences than processes × --grad-accum is skipped; the epoch must then end. It did not
    when the run counted fractional epochs (masked-LM): the loop went round the skipped batch forever (found with
    `torchrun --nproc-per-node 4 ... pretrain` from the README; one process with --grad-accum 4 is the same case)."""
    import signal

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(WORDS[i % 7 :] + WORDS[: i % 7]) for i in range(sequences)) + "\n")

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("the epoch never ended: the loop went round the skipped batch")

    # In this process, not a CLI one (7 CPU-s of imports each): a loop that never ends is stopped by the alarm instead.
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(int(HANG_S))
    try:
        pretrain(**_options(tiny_bert, corpus, tmp_path / "out", max_steps=None, batch_size=4, grad_accum=4, epochs=2,
                            max_length=16, heldout=1))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    stats = load_stage(tmp_path / "out", "pretrain")["stats"]
    train = stats["corpus"]["sequences"] - stats["corpus"]["heldout_sequences"]
    assert train % 4 != 0  # there is a short last batch to skip
    assert stats["steps"] == 2 * -(-train // 4)  # the planned steps (partial batches counted), then it stops


def pathlib_path_of_a_pickle() -> object:
    """An object weights_only refuses (a class from outside its allow list)."""
    from pathlib import PurePosixPath

    return PurePosixPath("/planted")


@pytest.mark.parametrize("tamper", ["a 400-digit position", "a planted pickle", "a FIFO record"])
def test_pretrain_resume_after_a_tampered_checkpoint_is_one_line_or_skips_it(tamper: str, tiny_bert: Path, corpus: Path,
                                                                            tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 92, section 5: pretrain reads its checkpoints through the code finetune does; each tamper of round 8 ends
    in one line (or, for a FIFO record, the checkpoint is skipped with a warning), never a hang or a traceback."""
    import hashlib
    import os
    import pickle

    from greenadapt.errors import StageError

    out = tmp_path / "run"
    with pytest.raises(Preempted):
        pretrain(**_options(tiny_bert, corpus, out, max_steps=6), progress=_AtStep(3))
    [ckpt] = (tmp_path / "run.checkpoint").rglob("ckpt-*")

    def rewrite(name: str, data: bytes) -> None:
        (ckpt / name).write_bytes(data)
        manifest = json.loads((ckpt / "checkpoint.json").read_text())
        manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        (ckpt / "checkpoint.json").write_text(json.dumps(manifest))

    if tamper == "a FIFO record":
        (ckpt / "checkpoint.json").unlink()
        os.mkfifo(ckpt / "checkpoint.json")
        with caplog.at_level("WARNING", logger="greenadapt"):
            done = pretrain(**_options(tiny_bert, corpus, out, max_steps=6, resume=True))
        assert not done.skipped and any("a FIFO" in r.getMessage() for r in caplog.records)
        return
    if tamper == "a 400-digit position":
        state = json.loads((ckpt / "state.json").read_text())
        state["position"]["seconds"] = 10**400
        rewrite("state.json", json.dumps(state).encode())
    else:
        rewrite("optimizer.pt", pickle.dumps({"not": "tensors", "but": pathlib_path_of_a_pickle()}))
    with pytest.raises(StageError) as refused:
        pretrain(**_options(tiny_bert, corpus, out, max_steps=6, resume=True))
    line = refused.value.one_line()
    assert "unreadable checkpoint" in line and "\n" not in line and len(line) < 500, line
