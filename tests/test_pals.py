"""PALs: the wrapper leaves the base model alone when the decoder is zero; parameter counts match the formula."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from greenadapt.errors import UsageError  # noqa: E402
from greenadapt.modeling.pals.config import PalsConfig, adapter_parameters, head_parameters, relative_size  # noqa: E402


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
    from greenadapt.modeling.pals.layer import zero_decoder
    from greenadapt.modeling.pals.model import MultiTaskModel

    reference = _base(tiny_bert_base)
    multi = MultiTaskModel(_base(tiny_bert_base), PalsConfig(adapter=adapter, size=12, heads=3)).eval()
    multi.add_task("a", "ner", 3)
    ids, mask = _inputs()
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).last_hidden_state
        multi.set_task("a")
        with_pals = multi.base(input_ids=ids, attention_mask=mask).last_hidden_state
        zero_decoder(multi.adapters["t-a"])
        zeroed = multi.base(input_ids=ids, attention_mask=mask).last_hidden_state
    # A random decoder does change the outputs (so the check below can fail) ...
    assert (with_pals - expected).abs().max() > 1e-4
    # ... and a zero decoder leaves them exactly as the base model's.
    assert (zeroed - expected).abs().max() <= 1e-6


def test_wrapping_keeps_state_dict_keys_and_unwrap_restores(tiny_bert_base: Path) -> None:
    from greenadapt.modeling.pals.layer import PalOutput
    from greenadapt.modeling.pals.model import MultiTaskModel

    base = _base(tiny_bert_base)
    keys = set(base.state_dict())
    original = base.encoder.layer[0].output
    multi = MultiTaskModel(base, PalsConfig(size=8, heads=2))
    assert isinstance(base.encoder.layer[0].output, PalOutput)
    assert set(base.state_dict()) == keys  # adopted submodules, no new or renamed keys in the encoder
    assert base.encoder.layer[0].output.dense is original.dense
    multi.unwrap()
    assert base.encoder.layer[0].output is original


def test_pal_ignores_padding(tiny_bert_base: Path) -> None:
    """The small attention is masked: appending padding does not change the real tokens' outputs."""
    from greenadapt.modeling.pals.model import MultiTaskModel

    multi = MultiTaskModel(_base(tiny_bert_base), PalsConfig(size=12, heads=3)).eval()
    multi.add_task("a", "ner", 3)
    ids = torch.randint(5, 60, (2, 6), generator=torch.Generator().manual_seed(1))
    padded = torch.cat([ids, torch.zeros(2, 4, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(2, 6, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long)], dim=1)
    with torch.no_grad():
        short = multi(ids, torch.ones_like(ids), task="a").logits
        long = multi(padded, mask, task="a").logits[:, :6]
    assert (short - long).abs().max() < 1e-5


def test_tasks_do_not_share_adapters(tiny_bert_base: Path) -> None:
    from greenadapt.modeling.pals.model import MultiTaskModel

    multi = MultiTaskModel(_base(tiny_bert_base), PalsConfig(size=12, heads=3)).eval()
    multi.add_task("a", "classify", 2)
    multi.add_task("b", "classify", 2)
    multi.heads["t-b"].load_state_dict(multi.heads["t-a"].state_dict())
    ids, mask = _inputs()
    with torch.no_grad():
        a = multi(ids, mask, task="a").logits
        b = multi(ids, mask, task="b").logits
    assert (a - b).abs().max() > 1e-6  # same head, different PALs
    assert multi.active is None  # forward leaves no task switched on


@pytest.mark.parametrize(("adapter", "size", "heads"), [("pals", 12, 3), ("pals", 8, 8), ("low-rank", 5, 1), ("none", 4, 1)])
def test_parameter_counts_match_the_formula(tiny_bert_base: Path, adapter: str, size: int, heads: int) -> None:
    from greenadapt.modeling.pals.model import MultiTaskModel

    base = _base(tiny_bert_base)
    n_base = sum(p.numel() for p in base.parameters())
    multi = MultiTaskModel(base, PalsConfig(adapter=adapter, size=size, heads=heads))
    multi.add_task("ner", "ner", 5)
    multi.add_task("pair", "classify", 2)
    counts = multi.parameter_counts()
    hidden, layers = base.config.hidden_size, base.config.num_hidden_layers
    for name, labels in (("ner", 5), ("pair", 2)):
        assert counts["per_task"][name]["adapter"] == adapter_parameters(multi.pals_config, hidden, layers)
        assert counts["per_task"][name]["head"] == head_parameters(hidden, labels)
        assert counts["per_task"][name]["total"] == multi.expected_task_parameters(name)
    assert counts["base"] == n_base
    assert counts["total"] == sum(p.numel() for p in multi.parameters())
    if adapter == "pals":  # written out: V_E and V_D once, Q/K/V per layer
        assert counts["per_task"]["ner"]["adapter"] == 2 * hidden * size + hidden + size + layers * 3 * (size * size + size)
    if adapter == "none":
        assert counts["per_task"]["ner"]["adapter"] == 0


def test_bert_base_eight_tasks_at_204_is_about_1_13x() -> None:
    """The paper's figure, from a BERT-base config on the meta device (no weights)."""
    from transformers import BertConfig, BertModel

    from greenadapt.modeling.pals.model import MultiTaskModel

    with torch.device("meta"):
        base = BertModel(BertConfig())
        multi = MultiTaskModel(base, PalsConfig(size=204, heads=12))
        for i in range(8):
            multi.add_task(f"t{i}", "classify", 2)
    counts = multi.parameter_counts()
    assert 109_000_000 < counts["base"] < 110_000_000
    assert counts["relative_to_base"] == pytest.approx(1.13, abs=0.005)
    formula = relative_size(counts["base"], [adapter_parameters(PalsConfig(), 768, 12) + head_parameters(768, 2)] * 8)
    assert formula == pytest.approx(counts["relative_to_base"], rel=1e-12)


def test_config_checks() -> None:
    with pytest.raises(UsageError, match="--adapter"):
        PalsConfig(adapter="lora")
    with pytest.raises(UsageError, match="multiple"):
        PalsConfig(size=204, heads=5)
    assert PalsConfig.from_json(PalsConfig(adapter="low-rank", size=7).to_json()) == PalsConfig(adapter="low-rank", size=7)


def test_save_and_load_one_task(tiny_bert_base: Path, tmp_path: Path) -> None:
    from greenadapt.modeling.pals.model import MultiTaskModel

    multi = MultiTaskModel(_base(tiny_bert_base), PalsConfig(size=12, heads=3)).eval()
    multi.add_task("a", "ner", 3)
    multi.add_task("b", "classify", 4)
    multi.save(tmp_path / "saved")
    ids, mask = _inputs()
    loaded = MultiTaskModel.load(tmp_path / "saved", tasks=["b"])
    assert loaded.tasks == ["b"]
    with torch.no_grad():
        # eager here, sdpa after loading: equal up to float rounding
        assert torch.allclose(multi(ids, mask, task="b").logits, loaded(ids, mask, task="b").logits, atol=1e-6)
    with pytest.raises(UsageError, match="no task 'c'"):
        MultiTaskModel.load(tmp_path / "saved", tasks=["c"])


@pytest.mark.parametrize("adapter", ["pals", "low-rank"])
def test_the_task_term_enters_before_the_output_layernorm(tiny_bert_base: Path, adapter: str) -> None:
    """Each layer returns LN(FFN(a) + a + TS(h)), with h the layer's input and a = LN(h + SA(h)) — computed
    here by hand from the layer's own submodules. Adding TS(h) to the attention output instead, or after the
    LayerNorm, gives other numbers and fails this test."""
    from greenadapt.modeling.pals.model import MultiTaskModel

    multi = MultiTaskModel(_base(tiny_bert_base), PalsConfig(adapter=adapter, size=12, heads=3)).eval()
    multi.add_task("a", "ner", 3)
    task_adapter = multi.adapters["t-a"]
    with torch.no_grad():  # a decoder large enough that a misplaced term shows
        for parameter in task_adapter.parameters():
            parameter.mul_(20.0)
    ids = torch.randint(5, 60, (2, 7), generator=torch.Generator().manual_seed(3))
    layer = multi.base.encoder.layer[1]
    seen: dict[str, torch.Tensor] = {}
    layer.register_forward_hook(lambda module, args, output: seen.update(h=args[0], out=output[0] if isinstance(output, tuple) else output))
    with torch.no_grad():
        multi.set_task("a")
        multi.base(input_ids=ids, attention_mask=torch.ones_like(ids))
        h = seen["h"]
        a = layer.attention(h)[0]
        ffn = layer.output.dense(layer.intermediate(a))
        ts = task_adapter.delta(1, h, torch.ones(2, 1, 1, 7, dtype=torch.bool))
        expected = layer.output.LayerNorm(ffn + a + ts)
        without = layer.output.LayerNorm(ffn + a)
    assert (ts.abs().max()) > 1e-2 and (expected - without).abs().max() > 1e-3  # the term matters
    torch.testing.assert_close(seen["out"], expected, atol=1e-5, rtol=1e-5)
