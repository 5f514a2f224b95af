"""``--method distill``: lstsq's rows, fitted so the frozen model reads each new word in context as it reads its pieces.

Invariants pinned here: the model's own rows and every other weight are bit-identical; the model is frozen
during the fit; the fitted rows lower the matching loss on windows of text the fit never saw; the fit is
seeded; an interrupted fit resumes to the same rows; a word never seen in a window keeps lstsq's row, with
a warning; a folder in the checkpoint's place that greenadapt did not write is refused.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from w2v_fixtures import listed_new_words, saved_tensors

import greenadapt
from greenadapt.adaptation.expand import CHECKPOINT_SUFFIX, expand_stage
from greenadapt.adaptation.methods import distill
from greenadapt.adaptation.settings import AlignSettings
from greenadapt.artifacts.model_weights import read_input_embeddings
from greenadapt.errors import UsageError
from greenadapt.options import Run

EMBEDDING = "bert.embeddings.word_embeddings.weight"
COMMON = "the of and in to a with is was for patients were cells by that on as from disease cancer protein gene".split()
FREQUENT = ["tachycardia", "carcinoma", "sleeplessness", "cardiomyopathy", "hepatoma"]
RARE = "zygomycosis"  # only in the corpus's last lines: the window budget is spent before it is reached
PER_WORD, EPOCHS = 8, 10
BUDGET = len(FREQUENT) * PER_WORD


def _corpus(path: Path, seed: int, lines: int = 300, *, rare: bool = True) -> Path:
    rng = random.Random(seed)
    text = []
    for _ in range(lines):
        words = rng.choices(COMMON, k=14)
        for word in rng.sample(FREQUENT, 2):
            words.insert(rng.randrange(len(words)), word)
        text.append(" ".join(words))
    if rare:
        text += [f"the {RARE} of patients with {rng.choice(FREQUENT)} was in the cells"] * 3
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def _options(**changes: Any) -> dict[str, Any]:
    return {"distill_per_word": PER_WORD, "distill_sentences": BUDGET, "distill_epochs": EPOCHS, **changes}


@pytest.fixture(scope="module")
def adapted(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> dict[str, Any]:

    root = tmp_path_factory.mktemp("distill")
    corpus = _corpus(root / "corpus.txt", seed=1)
    outcome = greenadapt.adapt([str(corpus)], model=str(tiny_bert), min_count=2, workers=1, method="distill", **_options(),
                               min_count_new=1, workdir=root / "work", out=root / "model")
    return {"root": root, "corpus": corpus, "outcome": outcome, "model": tiny_bert}


def _lstsq_rows(adapted: dict[str, Any], words: list[str]) -> np.ndarray:
    """The rows plain lstsq gives the same words from the same vectors (distill's starting point)."""
    from greenadapt.adaptation.align import align_stage

    if "lstsq" not in adapted:
        root = adapted["root"]
        aligned = align_stage(w2v=adapted["outcome"].w2v.path, method="lstsq", run=Run(out=root / "align-lstsq"))
        adapted["lstsq"] = expand_stage(align=aligned.path, min_count=1, run=Run(out=root / "expand-lstsq")).path
    V = read_input_embeddings(adapted["model"]).shape[0]
    rows = saved_tensors(adapted["lstsq"])[EMBEDDING][V:].numpy()
    listed = listed_new_words(adapted["lstsq"])
    return rows[[listed.index(w) for w in words]]


def test_old_weights_bit_identical_and_only_seen_words_move(adapted: dict[str, Any]) -> None:
    before, after = saved_tensors(adapted["model"]), saved_tensors(adapted["outcome"].expand.path)
    V = before[EMBEDDING].shape[0]
    assert set(before) == set(after)
    for name, tensor in before.items():
        kept = after[name][:V] if after[name].shape != tensor.shape else after[name]
        assert torch.equal(kept, tensor), name
    words = listed_new_words(adapted["outcome"].expand.path)
    assert set(FREQUENT) | {RARE} <= set(words)
    rows, lstsq = after[EMBEDDING][V:].numpy(), _lstsq_rows(adapted, words)
    for word, row, start in zip(words, rows, lstsq, strict=True):
        if word in FREQUENT:
            assert not np.allclose(row, start, atol=1e-4), f"{word} was seen in context but its row did not move"
        elif word == RARE:
            np.testing.assert_array_equal(row, start)  # never in a window: lstsq's row, bit for bit
    stats = adapted["outcome"].expand.manifest["stats"]["distill"]
    assert stats["words_unseen"] >= 1 and stats["windows"] == BUDGET and stats["steps"] == EPOCHS * 2
    assert {"torch", "transformers"} <= set(adapted["outcome"].expand.manifest["libraries"])  # it ran the model


def test_a_word_never_seen_in_a_window_is_warned_about(tiny_bert: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:

    corpus = _corpus(tmp_path / "corpus.txt", seed=3)
    with caplog.at_level(logging.WARNING, logger="greenadapt.adaptation.methods.distill"):
        greenadapt.adapt([str(corpus)], model=str(tiny_bert), min_count=2, workers=1, method="distill", **_options(distill_epochs=1),
                         min_count_new=1, workdir=tmp_path / "work", out=tmp_path / "model")
    warnings = [r.getMessage() for r in caplog.records if "not seen in a corpus window" in r.getMessage()]
    assert len(warnings) == 1 and RARE in warnings[0]


def test_the_model_is_frozen_during_the_fit(adapted: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    original = distill.RowMatcher.__init__

    def spy(self: Any, model: Any, *args: Any) -> None:
        seen.append(model)
        original(self, model, *args)

    monkeypatch.setattr(distill.RowMatcher, "__init__", spy)
    expand_stage(align=adapted["outcome"].align.path, min_count=1, run=Run(out=tmp_path / "again"))
    (model,) = seen
    saved = saved_tensors(adapted["model"])  # the MLM checkpoint: the encoder's weights under "bert."
    assert not any(p.requires_grad for p in model.parameters())
    compared = 0
    for name, tensor in model.state_dict().items():
        if f"bert.{name}" in saved:  # (the pooler is not in an MLM checkpoint and reads no hidden state)
            assert torch.equal(tensor, saved[f"bert.{name}"]), name
            compared += 1
    assert compared == len(saved) - sum(n.startswith("cls.") for n in saved)


def test_fitted_rows_lower_the_matching_loss_on_unseen_text(adapted: dict[str, Any], tmp_path: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    expanded = adapted["outcome"].expand.path
    words = listed_new_words(expanded)
    V = read_input_embeddings(adapted["model"]).shape[0]
    held = distill.collect_windows(_corpus(tmp_path / "other.txt", seed=99, lines=80, rare=False), words, per_word=4, budget=64)
    encoded = distill.encode_windows(AutoTokenizer.from_pretrained(str(adapted["model"])), held.words,
                                     {w: i for i, w in enumerate(words)}, V)
    batch = [e for e in encoded if e is not None]
    ids = np.arange(len(words))
    model = AutoModel.from_pretrained(str(adapted["model"])).eval()
    matcher = distill.RowMatcher(model, V, ids)
    with torch.no_grad():
        before = matcher.loss(batch, torch.from_numpy(_lstsq_rows(adapted, words))).item()
        after = matcher.loss(batch, saved_tensors(expanded)[EMBEDDING][V:]).item()
    assert after < 0.95 * before, (before, after)
    stats = adapted["outcome"].expand.manifest["stats"]["distill"]
    assert stats["heldout_loss_after"] < stats["heldout_loss_before"]


def test_seeded(adapted: dict[str, Any], tmp_path: Path) -> None:
    align = adapted["outcome"].align.path
    rows = {name: saved_tensors(expand_stage(align=align, min_count=1, seed=seed, run=Run(out=tmp_path / name)).path)[EMBEDDING]
            for name, seed in (("a", 5), ("b", 5), ("c", 6))}
    assert torch.equal(rows["a"], rows["b"])
    assert not torch.equal(rows["a"], rows["c"])


def test_an_interrupted_fit_resumes_to_the_same_rows(adapted: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    align = adapted["outcome"].align.path
    whole = saved_tensors(expand_stage(align=align, min_count=1, run=Run(out=tmp_path / "whole")).path)[EMBEDDING]

    def stop(step: int) -> None:
        if step == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(distill, "CHECKPOINT_SECONDS", 0.0)
    monkeypatch.setattr(distill, "_after_step", stop)
    out = tmp_path / "resumed"
    checkpoint = out.with_name(out.name + CHECKPOINT_SUFFIX)
    with pytest.raises(KeyboardInterrupt):
        expand_stage(align=align, min_count=1, run=Run(out=out))
    assert distill.is_checkpoint(checkpoint) and not (out / "model.safetensors").exists()
    monkeypatch.setattr(distill, "_after_step", lambda step: None)
    with caplog.at_level(logging.INFO, logger="greenadapt.adaptation.methods.distill"):
        resumed = expand_stage(align=align, min_count=1, run=Run(out=out))
    assert any("resuming at step 3" in r.getMessage() for r in caplog.records)
    assert torch.equal(saved_tensors(resumed.path)[EMBEDDING], whole)
    assert not checkpoint.exists()  # removed once the output is committed


def test_a_foreign_folder_in_the_checkpoints_place_is_refused(adapted: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "model"
    foreign = out.with_name(out.name + CHECKPOINT_SUFFIX)
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(UsageError, match="not a checkpoint greenadapt wrote"):
        expand_stage(align=adapted["outcome"].align.path, min_count=1, run=Run(out=out))
    assert (foreign / "notes.txt").read_text(encoding="utf-8") == "mine" and not out.exists()


def test_a_link_in_the_checkpoints_place_is_refused_and_left_alone(adapted: dict[str, Any], tmp_path: Path) -> None:
    """Issue 71: a link planted where the fit keeps its checkpoints is never written through (a user's folder behind it)."""
    from greenadapt.errors import ResourceError

    out = tmp_path / "model"
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine", encoding="utf-8")
    out.with_name(out.name + CHECKPOINT_SUFFIX).symlink_to(theirs, target_is_directory=True)
    with pytest.raises(ResourceError, match="symbolic link"):
        expand_stage(align=adapted["outcome"].align.path, min_count=1, run=Run(out=out))
    assert [p.name for p in theirs.iterdir()] == ["notes.txt"] and not out.exists()


@pytest.mark.parametrize("field", ["distill_per_word", "distill_sentences", "distill_epochs"])
def test_budget_options_below_one_are_refused(field: str) -> None:
    with pytest.raises(UsageError, match=f"{field} must be at least 1"):
        AlignSettings(**{field: 0})  # refused when the settings are made


def test_info_says_what_the_fit_did(adapted: dict[str, Any]) -> None:
    from greenadapt.artifacts.info import describe_folder, render

    info = describe_folder(adapted["outcome"].expand.path)
    stats = adapted["outcome"].expand.manifest["stats"]["distill"]
    assert info["figures"]["min_count"] == 1
    assert info["figures"]["distill"].startswith(f"{stats['words_seen']:,} rows fitted on {BUDGET:,} windows, 1 words unseen")
    assert f"held-out matching loss {stats['heldout_loss_before']:.3f} -> {stats['heldout_loss_after']:.3f}" in render(info)


def test_the_text_w2v_read_is_reused_even_after_the_corpus_was_touched(adapted: dict[str, Any], tmp_path: Path) -> None:
    import os

    cache_root = adapted["root"] / "work" / "cache" / "pretok"
    entries = sorted(cache_root.iterdir())
    stat = adapted["corpus"].stat()
    os.utime(adapted["corpus"], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # same text, another mtime: another cache key
    try:
        expand_stage(align=adapted["outcome"].align.path, min_count=1, run=Run(out=tmp_path / "again"))
    finally:
        os.utime(adapted["corpus"], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert sorted(cache_root.iterdir()) == entries  # nothing pre-tokenized again
