"""PALs: the wrapper leaves the base model alone when the decoder is zero; parameter counts match the formula."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from greenadapt.modeling.pals.config import PalsConfig  # noqa: E402


def _base(folder: Path) -> torch.nn.Module:
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    return model


def _inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (3, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    return ids, mask


@pytest.mark.parametrize("adapter", ["pals", "low-rank"])
def test_zero_decoder_leaves_base_outputs_unchanged(tiny_bert_base: Path, adapter: str) -> None:
    from greenadapt.modeling.pals.model import MultiTaskModel

    reference = _base(tiny_bert_base)
    multi = MultiTaskModel(_base(tiny_bert_base), PalsConfig(adapter=adapter, size=12, heads=3)).eval()
    _check_zero_decoder(reference, multi, everywhere=True)


def _check_zero_decoder(reference: torch.nn.Module, multi: torch.nn.Module, *, everywhere: bool) -> None:
    """A random decoder changes the outputs (so the check can fail); a zero decoder gives the base model's exactly.
    ``everywhere=False`` compares real tokens only (a padded row of a pre-norm model is not held to it)."""
    from greenadapt.modeling.pals.layer import zero_decoder

    multi.add_task("a", "ner", 3)
    ids, mask = _inputs()
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).last_hidden_state
        multi.set_task("a")
        with_pals = multi.base(input_ids=ids, attention_mask=mask).last_hidden_state
        zero_decoder(multi.adapters["t-a"])
        zeroed = multi.base(input_ids=ids, attention_mask=mask).last_hidden_state
    rows = slice(None) if everywhere else mask.bool()
    assert (with_pals - expected)[rows].abs().max() > 1e-4
    assert (zeroed - expected)[rows].abs().max() <= 1e-6


@pytest.fixture(scope="module")
def tiny_modernbert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from family_models import build_family_model

    return build_family_model("modernbert", tmp_path_factory.mktemp("modernbert") / "model")


@pytest.mark.parametrize("adapter", ["pals", "low-rank"])
def test_pre_norm_layers_take_the_task_term_and_a_zero_decoder_changes_nothing(tiny_modernbert: Path, adapter: str) -> None:
    """ModernBERT's layers have no BERT-style output block: the term joins the MLP's output, keys unchanged."""
    from greenadapt.modeling.pals.layer import PalMlp, encoder_layers
    from greenadapt.modeling.pals.model import MultiTaskModel

    reference = _base(tiny_modernbert)
    base = _base(tiny_modernbert)
    keys = set(base.state_dict())
    original = encoder_layers(base)[1].mlp
    multi = MultiTaskModel(base, PalsConfig(adapter=adapter, size=12, heads=3)).eval()
    assert isinstance(encoder_layers(base)[1].mlp, PalMlp) and set(base.state_dict()) == keys
    _check_zero_decoder(reference, multi, everywhere=False)
    multi.unwrap()
    assert encoder_layers(base)[1].mlp is original
