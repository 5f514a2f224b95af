"""Views that agree (issue 64, item 3): ``finetune --agreement W`` shows each example in both views in the same step
and adds W x the symmetric KL between the views' label distributions.

Invariants: the term is a symmetric divergence (0 between equal distributions); at weight 0 a run is exactly the
plain mixture run (same fingerprint, same weights); with a weight the two views end closer together on the test set
than the same run without it; the manifest's cost block says the run paid two forward passes an example.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli
from conftest import build_tiny_bert
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.errors import EXIT_USAGE


def test_the_agreement_term_is_a_symmetric_divergence() -> None:
    import torch

    from greenadapt.training.finetuning import symmetric_kl

    a, b = torch.randn(5, 3), torch.randn(5, 3)
    assert torch.allclose(symmetric_kl(a, a), torch.zeros(5), atol=1e-6)
    assert torch.allclose(symmetric_kl(a, b), symmetric_kl(b, a))
    assert (symmetric_kl(a, b) > 0).all()
    p, q = torch.softmax(a, -1), torch.softmax(b, -1)
    by_hand = 0.5 * ((p * (p / q).log()).sum(-1) + (q * (q / p).log()).sum(-1))
    assert torch.allclose(symmetric_kl(a, b), by_hand, atol=1e-6)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("agreement")
    return {"root": root, "model": build_tiny_expanded(root / "model"), "train": write_ner_file(root / "train.tsv", 32, seed=1),
            "test": write_ner_file(root / "test.tsv", 24, seed=2)}


def _finetune(files: dict[str, Path], out: Path, **options: object) -> object:
    import greenadapt

    return greenadapt.finetune("ner", files["train"], test=files["test"], model=str(files["model"]), out=out, max_steps=30,
                               batch_size=8, lr=3e-3, device="cpu", progress=False, **options)


def _view_disagreement(run: Path, test: Path) -> float:
    """Mean symmetric KL between the general and the domain view's word-level distributions on the test file."""
    import torch

    from greenadapt.inference.labelling import find_model_folder, label_file_by_mode
    from greenadapt.inference.options import InferenceOptions
    from greenadapt.training.finetuning import symmetric_kl

    _, by_mode = label_file_by_mode([find_model_folder(run)], test, options=InferenceOptions(device="cpu"), modes=("general", "domain"))
    return float(symmetric_kl(torch.tensor(np.asarray(by_mode["general"])), torch.tensor(np.asarray(by_mode["domain"]))).mean())


def test_weight_zero_is_the_plain_mixture_run(files: dict[str, Path]) -> None:
    plain = _finetune(files, files["root"] / "plain")
    zero = _finetune(files, files["root"] / "zero", agreement=0.0)
    assert zero.manifest["fingerprint"] == plain.manifest["fingerprint"]  # type: ignore[attr-defined]
    assert (files["root"] / "zero" / "model.safetensors").read_bytes() == (files["root"] / "plain" / "model.safetensors").read_bytes()


def test_views_that_agree_end_closer_and_the_cost_block_says_what_they_cost(files: dict[str, Path]) -> None:
    _finetune(files, files["root"] / "mixture")
    agreeing = _finetune(files, files["root"] / "agreeing", agreement=5.0)
    manifest = agreeing.manifest  # type: ignore[attr-defined]
    assert manifest["cost"]["forward_passes_per_example"] == 2
    seed = manifest["stats"]["training"]["42"]
    assert seed["agreement"] == 5.0 and seed["forward_passes_per_example"] == 2 and seed["domain_fraction"] == 0.5
    assert manifest["config"]["train"]["agreement"] == 5.0
    apart = _view_disagreement(files["root"] / "mixture", files["test"])
    together = _view_disagreement(files["root"] / "agreeing", files["test"])
    assert together < apart / 2, (together, apart)
    metrics = json.loads((files["root"] / "agreeing" / "metrics.json").read_text())
    assert set(metrics["per_seed"]["42"]["test"]) == {"mean", "general", "domain"}


def test_agreement_needs_two_views_and_a_labelling_task(files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    plain = build_tiny_bert(tmp_path / "plain", head="base")
    capsys.readouterr()
    code, err = run_cli(["finetune", "--task", "ner", "--train", str(files["train"]), "--model", str(plain), "--agreement", "1",
                         "--out", str(tmp_path / "run")], monkeypatch, capsys)
    assert code == EXIT_USAGE and "--agreement needs two views" in err and len(err.strip().splitlines()) == 1, err
    code, err = run_cli(["finetune", "--task", "ner", "--train", str(files["train"]), "--model", str(files["model"]), "--agreement", "-1",
                         "--out", str(tmp_path / "run")], monkeypatch, capsys)
    assert code == EXIT_USAGE and "--agreement" in err, err
    assert not (tmp_path / "run").exists()


def test_compare_gives_the_agreement_to_the_variant_it_names_only(files: dict[str, Path]) -> None:
    from greenadapt.comparison.recipe import CompareOptions
    from greenadapt.comparison.recipe import finetune_arguments

    options = CompareOptions(task="ner", train=files["train"], test=files["test"], out=files["root"] / "cmp",
                             models=(("green", str(files["model"])), ("green-agree", str(files["model"]))), agreements=(("green-agree", 1.0),))
    options.check()
    assert "agreement" not in finetune_arguments(options, str(files["model"]), 1, files["root"] / "x", name="green")
    assert finetune_arguments(options, str(files["model"]), 1, files["root"] / "y", name="green-agree")["agreement"] == 1.0
    with pytest.raises(Exception, match="names no --model"):
        CompareOptions(task="ner", train=files["train"], test=files["test"], out=files["root"] / "cmp2",
                       models=(("green", str(files["model"])), ("base", str(files["model"]))), agreements=(("nope", 1.0),)).check()
