"""The runtime reads losses off the device in batches (as on a GPU): the same log, checks and checkpoints as step by step."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from finetune_helpers import build_tiny_expanded, set_dropout, write_ner_file, loop_settings

from greenadapt.errors import UsageError
from greenadapt.machine.devices import to_device
from greenadapt import finetune
from greenadapt.training import runtime
from greenadapt.training.trainer import Trainer


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sync-data")
    return {"train": write_ner_file(root / "train.tsv", 40, seed=1), "dev": write_ner_file(root / "dev.tsv", 12, seed=2)}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = build_tiny_expanded(tmp_path_factory.mktemp("sync-model") / "model")
    set_dropout(folder, 0.0)
    return folder


class Seen:
    """A progress display that remembers what it was shown."""

    def __init__(self) -> None:
        self.updates: list[tuple[float, dict[str, Any]]] = []

    def start(self, description: str, total: float | None = None, unit: str = "") -> None:
        pass

    def update(self, completed: float, **info: float | str) -> None:
        self.updates.append((completed, info))

    def finish(self) -> None:
        pass


def _run(model: Path, data: dict[str, Path], out: Path, monkeypatch: pytest.MonkeyPatch, *, deferred: bool,
         progress: Seen | None = None, **training: Any) -> Path:
    # Never read before a boundary (an evaluation, a checkpoint, an epoch's end, the end): the furthest a GPU run defers.
    monkeypatch.setattr(runtime, "_sync_seconds", lambda ctx: math.inf if deferred else 0.0)
    options = dict(task="ner", train=data["train"], dev=data["dev"], model=str(model), out=out, device="cpu",
                   seeds=[5], save_every=3, **{"batch_size": 8, "lr": 3e-3, "epochs": 2, **training})
    return finetune(**options, progress=progress or Seen()).path


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _without_time(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in records]


def test_deferred_reads_write_the_same_log_and_weights(model: Path, data: dict[str, Path], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    shown = Seen()
    now = _run(model, data, tmp_path / "now", monkeypatch, deferred=False)
    later = _run(model, data, tmp_path / "later", monkeypatch, deferred=True, progress=shown)
    log_now, log_later = _records(now / "train_log.jsonl"), _records(later / "train_log.jsonl")
    steps = [r for r in log_later if "loss" in r]
    assert len(steps) == 10 and [r["step"] for r in steps] == list(range(1, 11))  # 5 steps an epoch, 2 epochs
    assert _without_time(log_later) == _without_time(log_now)  # same losses, norms, order of dev events
    assert [r.get("event") for r in log_later if "event" in r] == ["dev", "dev"]
    from safetensors.numpy import load_file

    a, b = load_file(str(now / "model.safetensors")), load_file(str(later / "model.safetensors"))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    # The display heard of the last step, with its loss, though it was read in a batch.
    assert shown.updates[-1][0] == 10 and float(shown.updates[-1][1]["loss"]) == pytest.approx(steps[-1]["loss"], abs=1e-4)


def test_a_checkpoint_holds_every_step_before_it(model: Path, data: dict[str, Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, list[int]]] = []
    write = runtime.write_checkpoint

    def watched(checkpoint: Any, step: int, fill: Any, **kw: Any) -> Path:
        path = write(checkpoint, step, fill, **kw)
        seen.append((step, [r["step"] for r in _records(path / "train_log.jsonl") if "loss" in r]))
        return path

    monkeypatch.setattr(runtime, "write_checkpoint", watched)
    _run(model, data, tmp_path / "run", monkeypatch, deferred=True)
    assert [step for step, _ in seen] == [3, 6, 9, 10]  # every 3 steps, and the final one
    for step, logged in seen:
        assert logged == list(range(1, step + 1))


def test_a_non_finite_loss_still_stops_the_run_at_its_step(model: Path, data: dict[str, Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    messages = []
    for deferred in (False, True):
        with pytest.raises(UsageError, match="the training loss became") as caught:
            _run(model, data, tmp_path / f"nan-{deferred}", monkeypatch, deferred=deferred, lr=1e12, weight_decay=0.0)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]  # the same step is named, however late it was read


def test_to_device_copies_the_array() -> None:
    array = np.arange(12, dtype=np.int64).reshape(3, 4)
    tensor = to_device(array, torch.device("cpu"))
    assert tensor.dtype == torch.int64 and torch.equal(tensor, torch.arange(12).reshape(3, 4))


@pytest.mark.parametrize(("lr", "decay", "fragment"), [(0.0, 0.01, "^lr must be positive"),
                                                       (1e-3, -0.1, "^weight_decay must be at least 0"),
                                                       (200.0, 0.01, "AdamW's decay would zero or flip")])
def test_the_schedule_is_checked_before_training(lr: float, decay: float, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        loop_settings(lr=lr, weight_decay=decay)  # when the settings are made
    loop_settings(lr=0.9, weight_decay=1.0)  # a product below 1 is allowed


def test_finetune_refuses_a_decay_that_flips_the_weights_before_reading_the_model(data: dict[str, Path], tmp_path: Path) -> None:
    options = dict(task="ner", train=data["train"], model=str(tmp_path / "no-such-model"), out=tmp_path / "out",
                              device="cpu", **dict(lr=100.0, weight_decay=0.1))
    with pytest.raises(UsageError, match="would zero or flip"):
        finetune(**options)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_a_fine_tuning_step_never_waits_for_the_device(attention: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step queued on a GPU must not wait for it. On the meta device (shapes without data) every read back to
    the host and every result whose size depends on values (a mask, unique, nonzero) raises, so a whole
    fine-tuning step that runs there, the tokenizer mixture and the row-wise trained added rows included,
    holds no host sync."""
    from transformers import BertConfig, BertForTokenClassification, masking_utils

    from greenadapt.modeling.units import Unit
    from greenadapt.compute.distributed import DistContext
    from greenadapt.training.finetuning import FinetuneTask, prepare_trainer

    # Not ours: transformers 5 reads the padding mask back (padding_mask.all()) in every forward to skip it for
    # SDPA when nothing is padded; docs/benchmarks.md counts it among the syncs left.
    monkeypatch.setattr(masking_utils, "_ignore_bidirectional_mask_sdpa", lambda *args, **kwargs: False)
    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, num_labels=3)
    config._attn_implementation = attention
    rng = np.random.default_rng(0)
    units = []
    for index in range(16):
        n = int(rng.integers(3, 9))
        views = [rng.integers(1, 30, n), rng.integers(1, 40, n)]  # general ids < 30 <= the 10 added rows
        units.append(Unit(index, 0, rng.integers(0, 3, n - 2), views, [None, None], [np.arange(1, n - 1)] * 2))
    training = loop_settings(batch_size=4, lr=1e-3, epochs=1, mix=0.5, weight_decay=0.01)
    trainer = prepare_trainer(BertForTokenClassification(config), training, DistContext(device="meta"), n_examples=len(units),
                              longest=8, n_base_rows=30)
    task = FinetuneTask(trainer, units, 0.5, pad_id=0)
    for batch in task.epoch_batches(0, 0):
        loss, norm = trainer.step(task.parts(trainer, batch), task.loss)
    assert loss.device.type == norm.device.type == "meta"
    assert trainer.split is not None and trainer.split.owed is not None and trainer.split.owed.state_size_rows() > 0


@pytest.mark.parametrize(("head_warmup", "embeddings"), [(2, "all"), (0, "new")])
def test_a_masked_lm_step_never_waits_for_the_device(head_warmup: int, embeddings: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same on the meta device for masked-LM steps: masking, the target count, the head warm-up, frozen original rows."""
    from transformers import BertConfig, BertForMaskedLM, masking_utils

    from greenadapt.runners.pretrain.data import Masker, PackedCorpus
    from greenadapt.runners.pretrain.settings import PretrainSettings
    from greenadapt.runners.pretrain.train import PretrainTask, build_masked_lm, freeze_for
    from greenadapt.compute.distributed import DistContext

    monkeypatch.setattr(masking_utils, "_ignore_bidirectional_mask_sdpa", lambda *args, **kwargs: False)  # see above
    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    ctx = DistContext(device="meta")
    mlm = build_masked_lm(BertForMaskedLM(config)).to(ctx.device)
    corpus = PackedCorpus.build(np.random.default_rng(0).integers(5, 40, 400), 16, 1, 2, 2)
    special = np.zeros(40, bool)
    special[:5] = True
    masker = Masker(3, special, np.zeros(40, bool), np.arange(5, 40))
    training = PretrainSettings(corpus=("corpus.txt",), batch_size=4, lr=1e-3, epochs=1, head_warmup_steps=head_warmup,
                                train_embeddings=embeddings,
                                weight_decay=0.01)
    frozen, after_warmup = freeze_for(mlm, training, 30)
    trainer = Trainer(mlm, training, ctx, total_steps=training.plan(len(corpus.train_indices))[1])
    task = PretrainTask(trainer, training, corpus, masker, pad_id=0, frozen_rows=frozen, after_warmup_frozen=after_warmup, evaluate=None)
    batches = task.epoch_batches(0, 0)[:5]
    for step, batch in enumerate(batches, start=1):
        loss, norm = trainer.step(task.parts(trainer, batch), task.loss, before_update=task.before_update)
        task.after_step(step)
    assert len(batches) == 5 and loss.device.type == norm.device.type == "meta"
