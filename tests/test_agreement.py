"""Views that agree (issue 64, item 3): ``finetune --agreement W`` shows each example in both views in the same step
and adds W x the symmetric KL between the views' label distributions; R-Drop and both views without the KL (issue 75).

Invariants: the term is a symmetric divergence (0 between equal distributions); at weight 0 a run is exactly the
default run (same fingerprint, same weights); with a weight the two views end closer together on the test set
than the same run without it; the manifest's cost block says the run paid two forward passes an example.
On a one-tokenizer model the two passes read the same pieces: without dropout, R-Drop, both views and the plain run
are the same run; with dropout, R-Drop leaves the model less sensitive to its dropout than the same two passes without
the KL. ``--both-views`` is agreement with the KL taken out, exactly, and the default on a two-tokenizer model since
the CPU study's first look (the run ``--both-views`` makes; ``--no-both-views`` is the 50/50 mixture run as before).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import cli_output, run_cli
from conftest import build_tiny_bert
from finetune_helpers import build_tiny_expanded, comparison, write_ner_file

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
    from greenadapt.inference.settings import LoadSettings
    from greenadapt.training.finetuning import symmetric_kl

    _, by_mode = label_file_by_mode([find_model_folder(run)], test, options=LoadSettings(device="cpu"), modes=("general", "domain"))
    return float(symmetric_kl(torch.tensor(np.asarray(by_mode["general"])), torch.tensor(np.asarray(by_mode["domain"]))).mean())


def test_weight_zero_is_the_default_run(files: dict[str, Path]) -> None:
    plain = _finetune(files, files["root"] / "plain")
    zero = _finetune(files, files["root"] / "zero", agreement=0.0)
    assert zero.manifest["fingerprint"] == plain.manifest["fingerprint"]  # type: ignore[attr-defined]
    assert (files["root"] / "zero" / "model.safetensors").read_bytes() == (files["root"] / "plain" / "model.safetensors").read_bytes()


def test_views_that_agree_end_closer_and_the_cost_block_says_what_they_cost(files: dict[str, Path]) -> None:
    _finetune(files, files["root"] / "mixture", both_views=False)
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


def test_agreement_is_a_finite_weight_for_a_labelling_task(files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    qa_train = tmp_path / "qa.json"
    qa_train.write_text(json.dumps({"data": [{"paragraphs": [{"context": "fever of unknown origin", "qas": [
        {"id": "1", "question": "what origin", "answers": [{"text": "unknown", "answer_start": 9}]}]}]}]}))
    for argv, expected in (
        (["--agreement", "-1"], "--agreement"),
        (["--agreement", "inf"], "less than or equal to 100"),
        (["--agreement", "nan"], "--agreement"),
        (["--task", "qa", "--train", str(qa_train), "--agreement", "1"], "--agreement does not apply to --task qa"),
        (["--task", "qa", "--train", str(qa_train), "--both-views"], "--both-views does not apply to --task qa"),
        (["--task", "qa", "--train", str(qa_train), "--no-both-views"], "--no-both-views does not apply to --task qa"),
    ):
        task = [] if "--task" in argv else ["--task", "ner", "--train", str(files["train"])]
        code, err = run_cli(["finetune", *task, "--model", str(files["model"]), *argv, "--out", str(tmp_path / "run")], monkeypatch, capsys)
        assert code == EXIT_USAGE and expected in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert not (tmp_path / "run").exists()


def _dropout_disagreement(run: Path, n: int = 64) -> float:
    """Mean symmetric KL between two train-mode (dropout) passes of the run's model over the same random pieces."""
    import torch
    from transformers import AutoModelForTokenClassification

    model = AutoModelForTokenClassification.from_pretrained(str(run)).train()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, (n, 12), generator=generator)
    from greenadapt.training.finetuning import symmetric_kl

    torch.manual_seed(1)
    with torch.no_grad():
        return float(symmetric_kl(model(input_ids=ids).logits, model(input_ids=ids).logits).mean())


def _weights(run: Path) -> dict[str, object]:
    from safetensors.torch import load_file

    return load_file(str(run / "model.safetensors"))


def _same_weights(a: Path, b: Path) -> bool:
    import torch

    left, right = _weights(a), _weights(b)
    return left.keys() == right.keys() and all(torch.allclose(left[k], right[k], atol=1e-6) for k in left)  # type: ignore[arg-type]


def test_r_drop_on_a_one_tokenizer_model_is_two_passes_of_the_same_pieces(files: dict[str, Path], tmp_path: Path) -> None:
    import greenadapt

    from finetune_helpers import set_dropout

    plain = build_tiny_bert(tmp_path / "plain", head="base")
    set_dropout(plain, 0.0)

    def finetune(out: str, **options: object) -> object:
        return greenadapt.finetune("ner", files["train"], test=files["test"], model=str(plain), out=tmp_path / out, max_steps=30,
                                   batch_size=8, lr=3e-3, device="cpu", progress=False, **options)

    # without dropout the two passes are one computation twice: the KL is 0 and its gradient too
    finetune("one-pass")
    rdrop = finetune("r-drop", agreement=5.0)
    finetune("two-passes", both_views=True)
    assert _same_weights(tmp_path / "r-drop", tmp_path / "one-pass")
    assert _same_weights(tmp_path / "two-passes", tmp_path / "one-pass")
    seed = rdrop.manifest["stats"]["training"]["42"]  # type: ignore[attr-defined]
    assert seed["agreement"] == 5.0 and seed["forward_passes_per_example"] == 2 and seed["domain_fraction"] == 0.0
    assert rdrop.manifest["cost"]["forward_passes_per_example"] == 2  # type: ignore[attr-defined]

    # with dropout, the KL between two passes is what R-Drop trains down
    set_dropout(plain, 0.3)
    finetune("dropout-two-passes", both_views=True)
    finetune("dropout-r-drop", agreement=5.0)
    assert not _same_weights(tmp_path / "dropout-r-drop", tmp_path / "dropout-two-passes")
    regularized, unregularized = _dropout_disagreement(tmp_path / "dropout-r-drop"), _dropout_disagreement(tmp_path / "dropout-two-passes")
    # Measured ratios 0.49-0.56 over seeds 42, 1, 2 with torch's masks and with --dropout-masks fast alike (one draw of
    # masks measures it: "/ 2" passed by 0.01 on seed 42); without the KL the two runs are the same computation: 1.
    assert regularized < 0.7 * unregularized, (regularized, unregularized)


def test_both_views_is_agreement_without_its_kl(files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import greenadapt.training.finetuning as finetuning

    both = _finetune(files, files["root"] / "both", both_views=True)
    seed = both.manifest["stats"]["training"]["42"]  # type: ignore[attr-defined]
    assert seed["both_views"] is True and seed["forward_passes_per_example"] == 2 and seed["domain_fraction"] == 0.5
    assert both.manifest["config"]["train"]["both_views"] is True  # type: ignore[attr-defined]
    _finetune(files, files["root"] / "mixture-for-both", both_views=False)
    _finetune(files, files["root"] / "agree-for-both", agreement=1.0)
    assert not _same_weights(files["root"] / "both", files["root"] / "mixture-for-both")
    assert not _same_weights(files["root"] / "both", files["root"] / "agree-for-both")
    # the same run as an agreeing one whose KL is always 0
    monkeypatch.setattr(finetuning, "symmetric_kl", lambda a, b: torch.zeros(a.shape[0]) * a.sum(-1))
    _finetune(files, files["root"] / "agree-without-kl", agreement=1.0)
    assert _same_weights(files["root"] / "both", files["root"] / "agree-without-kl")


def test_both_views_is_implied_by_agreement(files: dict[str, Path]) -> None:
    alone = _finetune(files, files["root"] / "agree-alone", agreement=2.0)
    with_flag = _finetune(files, files["root"] / "agree-with-flag", agreement=2.0, both_views=True)
    assert with_flag.manifest["fingerprint"] == alone.manifest["fingerprint"]  # type: ignore[attr-defined]


def test_compare_gives_the_agreement_to_the_variant_it_names_only(files: dict[str, Path]) -> None:
    from greenadapt.comparison.recipe import finetune_arguments

    options = comparison(files["root"] / "cmp", task="ner", train=files["train"], test=files["test"],
                             models=(("green", str(files["model"])), ("green-agree", str(files["model"]))),
                         agreements=(("green-agree", 1.0),))
    options.check()
    assert "agreement" not in finetune_arguments(options, str(files["model"]), 1, files["root"] / "x", name="green")
    assert finetune_arguments(options, str(files["model"]), 1, files["root"] / "y", name="green-agree")["agreement"] == 1.0
    with pytest.raises(Exception, match="names no --model"):
        comparison(files["root"] / "cmp2", task="ner", train=files["train"], test=files["test"],
                       models=(("green", str(files["model"])), ("base", str(files["model"]))), agreements=(("nope", 1.0),)).check()


def test_compare_checks_each_variants_own_options_before_any_run(files: dict[str, Path], tmp_path: Path) -> None:
    from greenadapt.comparison.recipe import finetune_arguments
    from greenadapt.errors import UsageError

    plain = build_tiny_bert(tmp_path / "plain", head="base")
    models = (("base", str(plain)), ("base-rdrop", str(plain)), ("green-both", str(files["model"])))

    def options(**variant: object) -> object:
        return comparison(tmp_path / "cmp", task="ner", train=files["train"], test=files["test"], models=models, **variant)

    arms = options(agreements=(("base-rdrop", 1.0),), both_views=("green-both",))
    arms.check()  # R-Drop on the one-tokenizer model is a valid arm
    assert finetune_arguments(arms, str(plain), 1, tmp_path / "a", name="base-rdrop")["agreement"] == 1.0
    assert finetune_arguments(arms, str(files["model"]), 1, tmp_path / "b", name="green-both")["both_views"] is True
    assert "both_views" not in finetune_arguments(arms, str(plain), 1, tmp_path / "c", name="base")
    for variant, message in (
        ({"agreements": (("base-rdrop", float("inf")),)}, "a positive weight of at most"),
        ({"agreements": (("base-rdrop", float("nan")),)}, "a positive weight of at most"),
        ({"both_views": ("nope",)}, "--both-views nope names no --model"),
        ({"both_views": ("green-both", "green-both")}, "names one model twice"),
        ({"one_view": ("nope",)}, "--no-both-views nope names no --model"),
        ({"both_views": ("green-both",), "one_view": ("green-both",)}, "--both-views and --no-both-views both name green-both"),
    ):
        with pytest.raises(UsageError, match=message):
            options(**variant).check()  # when the settings are made, or before the first run
    assert not (tmp_path / "cmp").exists()


def test_base_both_sees_every_example_twice_a_step_and_is_its_own_run(files: dict[str, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The study's base-both arm (issue 82): the unadapted model, each example in two passes a step (dropout apart), no
    KL; a run of its own, fingerprinted apart from base, and named by compare's --both-views on a one-tokenizer model."""
    import greenadapt
    import greenadapt.training.finetuning as finetuning
    from greenadapt.comparison.recipe import finetune_arguments

    plain = build_tiny_bert(tmp_path / "plain", head="base")
    seen: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    real = finetuning.collate

    def counting(units, indices, views, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((tuple(int(i) for i in indices), tuple(int(v) for v in views)))
        return real(units, indices, views, *args, **kwargs)

    monkeypatch.setattr(finetuning, "collate", counting)

    def finetune(out: str, **options: object) -> object:
        return greenadapt.finetune("ner", files["train"], model=str(plain), out=tmp_path / out, max_steps=4, batch_size=8, lr=3e-3,
                                   device="cpu", progress=False, **options)

    base = finetune("base")
    once = list(seen)
    seen.clear()
    both = finetune("base-both", both_views=True)
    assert len(once) == 4 and len(seen) == 8  # four steps: one pass each for base, two for base-both
    for first, second in zip(seen[::2], seen[1::2], strict=True):
        assert first == second and set(first[1]) == {0}  # the same examples twice, both times the model's one view
    assert sorted(i for step in seen[::2] for i in step[0]) == sorted(i for step in once for i in step[0])
    assert both.manifest["fingerprint"] != base.manifest["fingerprint"]  # type: ignore[attr-defined]
    assert both.manifest["stats"]["training"]["42"]["forward_passes_per_example"] == 2  # type: ignore[attr-defined]
    arms = comparison(tmp_path / "cmp", task="ner", train=files["train"], test=files["test"],
                      models=(("base", str(plain)), ("base-both", str(plain))), both_views=("base-both",))
    arms.check()
    arguments = finetune_arguments(arms, str(plain), 1, tmp_path / "b", name="base-both")
    assert arguments["both_views"] is True and arguments["mix"] == 0.0


def test_both_views_is_the_default_with_two_tokenizers_and_no_both_views_is_the_mixture_as_before(
        files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The CPU study's first look (docs/study.md) made green-both the default: a two-tokenizer model trains both views
    each step unless told otherwise; a one-tokenizer model, a mixture other than 0.5, or views that agree keep theirs."""
    from greenadapt.comparison.recipe import finetune_arguments
    from greenadapt.training.finetuning import resolve_both_views

    default = _finetune(files, files["root"] / "default-views")
    both = _finetune(files, files["root"] / "both", both_views=True)  # reused if test_both_views_is_agreement_without_its_kl ran
    assert default.manifest["fingerprint"] == both.manifest["fingerprint"]  # type: ignore[attr-defined]
    assert _same_weights(files["root"] / "default-views", files["root"] / "both")
    assert default.manifest["stats"]["training"]["42"]["forward_passes_per_example"] == 2  # type: ignore[attr-defined]
    mixture = _finetune(files, files["root"] / "no-both-views", both_views=False)
    train = mixture.manifest["config"]["train"]  # type: ignore[attr-defined]
    assert "both_views" not in train and train["mix"] == 0.5  # the fingerprint of a mixture run made before the default moved
    assert "forward_passes_per_example" not in mixture.manifest["stats"]["training"]["42"]  # type: ignore[attr-defined]
    code, out, err = cli_output(["finetune", "--task", "ner", "--train", str(files["train"]), "--model", str(files["model"]),
                              "--out", str(files["root"] / "no-both-views"), "--max-steps", "30", "--batch-size", "8", "--lr", "3e-3",
                              "--test", str(files["test"]), "--device", "cpu", "--no-both-views", "--json"], monkeypatch, capsys)
    assert code == 0, err
    assert json.loads(out)["fingerprint"] == mixture.manifest["fingerprint"] and "up to date" in err  # type: ignore[attr-defined]
    assert [resolve_both_views(None, True, mix=mix, agreement=w) for mix, w in ((None, 0), (0.5, 0), (0.3, 0), (None, 1.0))] == [
        True, True, False, False]
    assert resolve_both_views(None, False, mix=None, agreement=0) is False  # base stays one pass: base-both is its control
    assert resolve_both_views(False, True, mix=None, agreement=0) is False
    plain = build_tiny_bert(tmp_path / "plain", head="base")
    arms = comparison(tmp_path / "cmp", task="ner", train=files["train"], test=files["test"],
                      models=(("base", str(plain)), ("green", str(files["model"])), ("green-mix", str(files["model"]))),
                      one_view=("green-mix",))
    arms.check()
    assert "both_views" not in finetune_arguments(arms, str(files["model"]), 1, tmp_path / "a", name="green")
    assert finetune_arguments(arms, str(files["model"]), 1, tmp_path / "b", name="green-mix")["both_views"] is False
