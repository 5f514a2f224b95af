"""--pad-to-multiple and --cuda-graphs (issue 58, item 2): a handful of batch shapes, the same results.

Padding is masked, so a padded batch computes what the unpadded one does up to the rounding of wider matrix
products; what may change is only how fast a step runs. The GPU half (CUDA graphs captured per shape) is in
tests/test_cuda.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from finetune_helpers import build_tiny_expanded, loop_settings, set_dropout, write_ner_file, comparison

from greenadapt.errors import UsageError
from greenadapt import finetune
from greenadapt.compute.batches import pad_rows, padded_width
from greenadapt.training.config import MAX_PAD_MULTIPLE


@pytest.mark.parametrize("multiple", [1, 2, 8, 16, 32, 512])
def test_padded_width_is_the_next_multiple_within_the_runs_widest(multiple: int) -> None:
    widest = 126
    for longest in range(1, widest + 1):
        width = padded_width(longest, multiple, widest)
        assert longest <= width <= widest
        assert width % multiple == 0 or width == widest
        assert width - longest < multiple  # never a whole multiple more than needed
    # without a cap: the plain next multiple
    assert padded_width(33, 32) == 64 and padded_width(32, 32) == 32 and padded_width(5, 1) == 5
    # a run's widths fall into at most widest / multiple + 1 shapes
    assert len({padded_width(n, 32, widest) for n in range(1, widest + 1)}) == 4


def test_pad_rows_pads_to_the_width_asked_and_masks_the_rest() -> None:
    rows = [(np.array([5, 6, 7]), None), (np.array([8]), np.array([1]))]
    ids, types, mask = pad_rows(rows, pad_id=0, width=8)
    assert ids.shape == types.shape == mask.shape == (2, 8)
    assert ids[0].tolist() == [5, 6, 7, 0, 0, 0, 0, 0] and mask[1].tolist() == [1, 0, 0, 0, 0, 0, 0, 0]
    assert types[1].tolist() == [1, 0, 0, 0, 0, 0, 0, 0]
    assert pad_rows(rows, pad_id=0)[0].shape == (2, 3)  # default: the longest's length


def test_speed_options_are_checked_and_not_recorded() -> None:
    recorded = loop_settings(pad_to_multiple=32, compile=True, eval_batch_size=5, device="cuda:0").recorded()
    assert not {"pad_to_multiple", "cuda_graphs", "compile", "eval_batch_size"} & set(recorded)
    assert {"batch_size", "lr", "epochs", "seed", "mix", "max_grad_norm", "grad_accum"} <= set(recorded)
    for bad in (0, -1, MAX_PAD_MULTIPLE + 1):
        with pytest.raises(UsageError, match="pad_to_multiple must"):
            loop_settings(pad_to_multiple=bad)
    with pytest.raises(UsageError, match="cuda_graphs=True needs a CUDA device"):
        loop_settings(cuda_graphs=True, device="cpu")
    loop_settings(pad_to_multiple=MAX_PAD_MULTIPLE)
    loop_settings(cuda_graphs=True, device="cuda:0")  # a GPU is only known once opened: checked then
    assert loop_settings().compile_mode() is None
    assert loop_settings(compile=True, device="cuda:0").compile_mode() == "default"
    with pytest.raises(UsageError, match="compile=True makes CPU training slower"):  # measured slower there (issue 94)
        loop_settings(compile=True, device="cpu")
    assert loop_settings(cuda_graphs=True, device="cuda:0").compile_mode() == "reduce-overhead"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pad")
    model = build_tiny_expanded(root / "model")
    set_dropout(model, 0.0)  # training is then a pure function of the batches
    return {"model": model, "train": write_ner_file(root / "train.tsv", 40, seed=1), "test": write_ner_file(root / "test.tsv", 12, seed=3)}


def _run(files: dict[str, Path], out: Path, **training: Any) -> Any:
    return finetune(task="ner", train=files["train"], test=files["test"], model=str(files["model"]), out=out, device="cpu",
                    **{"batch_size": 8, "lr": 3e-3, "epochs": 1, "max_steps": 5, "precision": "fp32", **training})


def test_padded_batches_train_what_unpadded_ones_do_in_a_handful_of_shapes(files: dict[str, Path], tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from transformers import BertForTokenClassification

    widths: list[int] = []
    forward = BertForTokenClassification.forward

    def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.training:
            widths.append(int(kwargs["input_ids"].shape[1]))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(BertForTokenClassification, "forward", recording)
    plain = _run(files, tmp_path / "plain")
    plain_widths, widths[:] = list(widths), []
    padded = _run(files, tmp_path / "padded", pad_to_multiple=8)
    assert len(plain_widths) == len(widths) == 10  # five steps, both views each (the default with two tokenizers)
    assert all(w % 8 == 0 or w == max(widths) for w in widths) and all(w >= p for w, p in zip(widths, plain_widths, strict=True))
    assert widths != plain_widths  # the option did pad: this data's widths are not all multiples of 8

    def losses(folder: Path) -> list[float]:
        return [r["loss"] for r in map(json.loads, (folder / "train_log.jsonl").read_text().splitlines()) if "loss" in r]

    np.testing.assert_allclose(losses(padded.path), losses(plain.path), rtol=1e-5)
    from safetensors.torch import load_file

    a, b = load_file(str(plain.path / "model.safetensors")), load_file(str(padded.path / "model.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    # A speed option: the padded run's manifest options and scores are the plain run's.
    assert padded.manifest["config"] == plain.manifest["config"]
    scores = [json.loads((run.path / "metrics.json").read_text())["per_seed"]["42"]["test"] for run in (plain, padded)]
    assert scores[0].keys() == scores[1].keys()
    for pool in scores[0]:
        assert scores[1][pool] == pytest.approx(scores[0][pool], abs=1e-6)


def test_cuda_graphs_on_a_cpu_is_refused_in_one_line_before_reading(files: dict[str, Path], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from greenadapt.cli import main

    missing = tmp_path / "no-such-train.tsv"  # refused before it is read
    for extra, says in ((["--cuda-graphs"], "--cuda-graphs needs a CUDA device"), (["--pad-to-multiple", "0"], "--pad-to-multiple")):
        for command in (["finetune", "--task", "ner", "--train", str(missing), "--model", str(files["model"]), "--out",
                         str(tmp_path / "r")],
                        ["compare", "--task", "ner", "--train", str(missing), "--test", str(missing), "--model", f"a={files['model']}",
                         "--model", f"b={files['model']}", "--out", str(tmp_path / "c")]):
            monkeypatch.setattr("sys.argv", ["greenadapt", *command, "--device", "cpu", *extra])
            with pytest.raises(SystemExit) as exit_info:
                main()
            err = capsys.readouterr().err
            assert exit_info.value.code == 2 and says in err and len(err.strip().splitlines()) == 1, err
            assert not (tmp_path / "r").exists() and not (tmp_path / "c").exists()


def test_compare_passes_the_speed_and_precision_options_to_every_run(files: dict[str, Path], tmp_path: Path) -> None:
    from greenadapt.comparison.recipe import finetune_arguments

    options = comparison(tmp_path, task="ner", train=files["train"], test=files["test"], models=(("a", str(files["model"])),),
                         precision="fp32", pad_to_multiple=16, cuda_graphs=True, device="cuda:0")
    arguments = finetune_arguments(options, str(files["model"]), 1, tmp_path / "a" / "seed-1")
    assert (arguments["precision"], arguments["pad_to_multiple"], arguments["cuda_graphs"]) == ("fp32", 16, True)
    plain = finetune_arguments(comparison(tmp_path, task="ner", train=files["train"], test=files["test"],
                                          models=(("a", str(files["model"])),)),
                               str(files["model"]), 1, tmp_path / "a" / "seed-1")
    assert not {"precision", "pad_to_multiple", "cuda_graphs"} & set(plain)  # the runs of earlier comparisons stay valid


@pytest.mark.parametrize("batch_size", [64, 48, 7])
def test_inference_batches_take_a_handful_of_shapes_and_keep_their_units_first(batch_size: int) -> None:
    """Issue 65, point 5: a long predict's memory grew by a oneDNN kernel per batch shape. Every inference batch is its
    units (first, in order) then repeats of its last, to a power of two but never past a full batch; widths a multiple
    of 8 within the model's positions."""
    from types import SimpleNamespace

    from greenadapt.compute.pooling import INFERENCE_WIDTH_MULTIPLE, inference_shape

    rng = np.random.default_rng(0)
    widest = 130
    units: Any = [SimpleNamespace(ids=[list(range(int(n)))]) for n in rng.integers(1, widest + 1, size=3000)]
    sizes, widths = set(), set()
    for start in range(0, len(units), batch_size):
        for end in {start + batch_size, start + int(rng.integers(1, batch_size + 1))}:  # full chunks and every shorter size
            chunk = np.arange(start, min(end, len(units)))
            shaped, width = inference_shape(units, chunk, 0, widest, batch_size)
            assert list(shaped[: len(chunk)]) == list(chunk) and set(shaped[len(chunk):]) <= {chunk[-1]}
            assert len(shaped) >= len(chunk) and (len(shaped) == batch_size or len(shaped) & (len(shaped) - 1) == 0)
            assert len(shaped) <= batch_size  # a full batch is not padded further
            longest = max(len(units[int(i)].ids[0]) for i in chunk)
            assert longest <= width <= widest and (width % INFERENCE_WIDTH_MULTIPLE == 0 or width == widest)
            sizes.add(len(shaped))
            widths.add(width)
    assert batch_size in sizes and len(sizes) <= batch_size.bit_length() + 1  # powers of two below a full batch, and it
    assert len(widths) <= widest // INFERENCE_WIDTH_MULTIPLE + 1


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_units_logits_are_the_same_alone_and_in_any_batch(precision: str) -> None:
    """Issue 94, item 4: torch's answer for a sentence does not depend on its batch. A batch of one padded width holds
    units of that width only (their own lengths rounded up); padding a unit to a longer neighbour's width moved its
    logits (6e-7 in fp32, 6e-3 in bf16 on MiniLM)."""
    import torch
    from transformers import BertConfig, BertForTokenClassification

    from greenadapt.compute.distributed import DistContext
    from greenadapt.compute.pooling import view_logits
    from greenadapt.machine.devices import cpu_has_native_bf16
    from greenadapt.modeling.units import Unit

    if precision == "bf16" and not cpu_has_native_bf16():
        pytest.skip("this CPU has no native bf16 (greenadapt refuses --precision bf16 here)")
    torch.manual_seed(0)
    model = BertForTokenClassification(BertConfig(vocab_size=500, hidden_size=96, num_hidden_layers=2, num_attention_heads=4,
                                                  intermediate_size=192, max_position_embeddings=128, num_labels=5))
    rng = np.random.default_rng(3)
    units = []
    for n in rng.integers(3, 60, size=40):
        ids = np.concatenate([[101], rng.integers(200, 500, size=int(n)), [102]]).astype(np.int64)
        rows = np.arange(1, len(ids) - 1)
        units.append(Unit(example=len(units), first_word=0, targets=np.zeros(len(rows), np.int64), ids=[ids], type_ids=[None], rows=[rows]))
    ctx = DistContext(device=torch.device("cpu"))
    together = view_logits(model, units, 0, ctx, pad_id=0, batch_size=16, precision=precision)
    start = 0
    for unit in units:
        alone = view_logits(model, [unit], 0, ctx, pad_id=0, batch_size=16, precision=precision)
        assert np.array_equal(alone, together[start : start + unit.n_rows]), (unit.example,
                                                                              np.abs(alone - together[start : start + unit.n_rows]).max())
        start += unit.n_rows
