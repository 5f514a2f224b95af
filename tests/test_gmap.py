"""G-MAP: memory-attention, strategies, frozen general model, save/reload, memory cache.

Tiny BERT and RoBERTa models are built in code (4 layers, 32 wide); the
general model has its own vocabulary, so its inputs are a different
tokenization with a different length than the domain inputs.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from greenadapt.errors import ModelError, UsageError  # noqa: E402
from greenadapt.modeling.gmap.config import (  # noqa: E402
    CONFIG_FILE,
    GATES_FILE,
    GENERAL_DIR,
    STRATEGIES,
    GmapConfig,
    default_layers,
    fusion_plan,
    parse_layers,
)
from greenadapt.modeling.gmap.layer import MemoryAttention  # noqa: E402
from greenadapt.modeling.gmap.model import GmapModel, weights_fingerprint  # noqa: E402
from tests.conftest import build_tiny_bert  # noqa: E402

DOMAIN_VOCAB = 60
GENERAL_VOCAB = 90
LAYERS = 4
ARCHS = ("bert", "roberta")
IMPLS = ("eager", "sdpa")


def tiny_config(arch: str, *, vocab: int, layers: int = LAYERS, dropout: float = 0.0) -> object:
    common = dict(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=64,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        num_labels=3,
    )
    if arch == "bert":
        return transformers.BertConfig(max_position_embeddings=64, **common)
    return transformers.RobertaConfig(max_position_embeddings=70, pad_token_id=1, type_vocab_size=1, **common)


def build_pair(arch: str = "bert", impl: str = "sdpa", *, seed: int = 0, dropout: float = 0.0, head: str = "seqcls") -> tuple:
    """(domain model with a head, general bare encoder), randomly initialised, in eval mode."""
    auto_head = {"seqcls": transformers.AutoModelForSequenceClassification, "tokcls": transformers.AutoModelForTokenClassification}[head]
    torch.manual_seed(seed)
    try:
        domain = auto_head.from_config(tiny_config(arch, vocab=DOMAIN_VOCAB, dropout=dropout), attn_implementation=impl)
        general = transformers.AutoModel.from_config(tiny_config(arch, vocab=GENERAL_VOCAB, dropout=dropout), attn_implementation=impl)
    except (ValueError, ImportError) as exc:
        pytest.skip(f"attention implementation {impl!r} is not selectable here: {exc}")
    return domain.eval(), general.eval()


def batch(*, seed: int = 1, query: int = 7, memory: int = 11) -> dict:
    """Domain inputs (3 × query) and general inputs (3 × memory), each with a right-padded row."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, DOMAIN_VOCAB, (3, query), generator=g)
    mask = torch.ones(3, query, dtype=torch.long)
    mask[1, query // 2 + 1 :] = 0
    general_ids = torch.randint(5, GENERAL_VOCAB, (3, memory), generator=g)
    general_mask = torch.ones(3, memory, dtype=torch.long)
    general_mask[2, memory // 2 + 1 :] = 0
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "general_input_ids": general_ids,
        "general_attention_mask": general_mask,
    }


def domain_only(inputs: dict) -> dict:
    return {k: v for k, v in inputs.items() if not k.startswith("general_")}


def last_hidden(output: object) -> torch.Tensor:
    return output.hidden_states[-1]


# --------------------------------------------------------------------------
# Configuration: default layers, general states per layer, JSON


@pytest.mark.parametrize(
    ("n_layers", "expected"),
    [
        (12, {"single": (9,), "gated": (9,), "chunk": (6, 12), "multi": tuple(range(1, 13))}),
        (6, {"single": (5,), "gated": (5,), "chunk": (3, 6), "multi": tuple(range(1, 7))}),
    ],
)
def test_default_layers_follow_the_paper(n_layers: int, expected: dict) -> None:
    for strategy in STRATEGIES:
        assert default_layers(strategy, n_layers) == expected[strategy]
        assert GmapConfig(strategy).resolved_layers(n_layers) == expected[strategy]


def test_general_states_per_strategy_for_12_layers() -> None:
    plan = GmapConfig("chunk").plan(12, 12)
    assert dict(plan.states) == {6: tuple(range(0, 6)), 12: tuple(range(6, 12))}  # the reference code's chunks
    assert GmapConfig("single").plan(12, 12).states == {9: (12,)}
    assert GmapConfig("gated").plan(12, 12).states == {9: tuple(range(13))}
    assert GmapConfig("multi").plan(12, 12).states == {layer: (layer - 1,) for layer in range(1, 13)}
    assert GmapConfig("chunk").plan(12, 12).gated and not GmapConfig("multi").plan(12, 12).gated
    # every layer fused by chunk reads what multi reads
    every = tuple(range(1, 13))
    assert fusion_plan("chunk", every, 12, 12).states == fusion_plan("multi", every, 12, 12).states


def test_general_states_scale_to_a_shallower_general_model() -> None:
    assert GmapConfig("chunk").plan(12, 6).states == {6: (0, 1, 2), 12: (3, 4, 5)}
    assert GmapConfig("single").plan(12, 6).states == {9: (6,)}
    multi = GmapConfig("multi").plan(12, 6).states
    assert [multi[layer][0] for layer in range(1, 13)] == [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6]
    with pytest.raises(UsageError, match="no general states"):
        fusion_plan("chunk", (1, 2, 3, 4), 12, 2)


@pytest.mark.parametrize(
    ("indexing", "multi_4_4", "multi_4_2", "gated_4_4"),
    [
        # The reference code: domain layer l reads the *input* of general layer l (state l-1); gated mixes 0..G.
        ("reference", (0, 1, 2, 3), (0, 1, 1, 2), (0, 1, 2, 3, 4)),
        # The paper: M^l is the *output* of general layer l (state l); gated mixes M^1..M^G.
        ("paper", (1, 2, 3, 4), (1, 1, 2, 2), (1, 2, 3, 4)),
    ],
)
def test_multi_and_gated_read_the_states_of_the_chosen_indexing(
    indexing: str, multi_4_4: tuple[int, ...], multi_4_2: tuple[int, ...], gated_4_4: tuple[int, ...]
) -> None:
    """Hand-computed for a 4-layer domain model over a 4- and a 2-layer general model (2-layer: scaled by 2/4, half up)."""
    multi = GmapConfig("multi", indexing=indexing).plan(4, 4).states
    assert tuple(multi[layer][0] for layer in (1, 2, 3, 4)) == multi_4_4
    shallow = GmapConfig("multi", indexing=indexing).plan(4, 2).states
    assert tuple(shallow[layer][0] for layer in (1, 2, 3, 4)) == multi_4_2
    assert GmapConfig("gated", indexing=indexing).plan(4, 4).states == {3: gated_4_4}
    # single and chunk do not depend on it
    for strategy in ("single", "chunk"):
        assert GmapConfig(strategy, indexing=indexing).plan(4, 4).states == GmapConfig(strategy).plan(4, 4).states
    # ...and the memory a model builds holds exactly those general hidden states.
    domain, general = build_pair()
    model = GmapModel(domain, general, GmapConfig("multi", indexing=indexing))
    inputs = batch()
    memory = model.run_general(inputs["general_input_ids"], inputs["general_attention_mask"])
    with torch.no_grad():
        hidden = general(input_ids=inputs["general_input_ids"], attention_mask=inputs["general_attention_mask"],
                         output_hidden_states=True).hidden_states
    expected = sorted(set(GmapConfig("multi", indexing=indexing).plan(LAYERS, LAYERS).state_indices))
    assert list(memory.state_indices) == expected
    for slot, state in enumerate(memory.state_indices):
        assert torch.equal(memory.states[slot], hidden[state])


def test_indexing_is_saved_with_the_model_and_checked() -> None:
    again = GmapConfig.from_dict(json.loads(json.dumps(GmapConfig("gated", indexing="paper").to_dict())))
    assert again.indexing == "paper"
    assert GmapConfig.from_dict({"strategy": "multi"}).indexing == "reference"  # models saved before the option
    with pytest.raises(UsageError, match="--gmap-indexing"):
        GmapConfig("multi", indexing="shifted")


def test_config_round_trips_through_json_and_validates() -> None:
    for config in (GmapConfig(), GmapConfig("single", layers=(10, 3), unfrozen=True, general_model="/models/general")):
        again = GmapConfig.from_dict(json.loads(json.dumps(config.to_dict())))
        assert again == config
    assert GmapConfig("multi", layers=(3, 1)).layers == (1, 3)
    assert parse_layers("6, 12") == (6, 12)
    with pytest.raises(UsageError, match="unknown G-MAP strategy"):
        GmapConfig("cross")
    with pytest.raises(UsageError, match="repeat"):
        GmapConfig("chunk", layers=(6, 6))
    with pytest.raises(UsageError, match="does not exist"):
        GmapConfig("single", layers=(13,)).plan(12, 12)
    with pytest.raises(UsageError, match="unknown G-MAP settings"):
        GmapConfig.from_dict({"strategy": "chunk", "fusion": "cross"})
    with pytest.raises(UsageError):
        parse_layers("six")


# --------------------------------------------------------------------------
# Parity, effect, masking, the formula


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("arch", ARCHS)
def test_parity_without_fusion_or_with_an_empty_memory(arch: str, impl: str, strategy: str) -> None:
    domain, general = build_pair(arch, impl)
    reference = copy.deepcopy(domain)
    model = GmapModel(domain, general, GmapConfig(strategy)).eval()
    inputs = batch()
    with torch.no_grad():
        expected = reference(**domain_only(inputs), output_hidden_states=True)
        with model.fusion_disabled():
            off = model(**domain_only(inputs), output_hidden_states=True)
        empty = model(**{**inputs, "general_attention_mask": torch.zeros_like(inputs["general_attention_mask"])}, output_hidden_states=True)
    assert torch.equal(off.logits, expected.logits)  # fusion off runs transformers' own attention
    torch.testing.assert_close(empty.logits, expected.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(last_hidden(empty), last_hidden(expected), atol=1e-5, rtol=0)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("arch", ARCHS)
def test_the_memory_changes_the_output(arch: str, strategy: str) -> None:
    domain, general = build_pair(arch)
    reference = copy.deepcopy(domain)
    model = GmapModel(domain, general, GmapConfig(strategy)).eval()
    inputs = batch()
    with torch.no_grad():
        fused = last_hidden(model(**inputs, output_hidden_states=True))
        plain = last_hidden(reference(**domain_only(inputs), output_hidden_states=True))
    real = inputs["attention_mask"].bool()
    assert (fused - plain)[real].abs().amax(dim=-1).min() > 1e-3  # every real position is affected


def test_wrapping_keeps_state_dict_keys_and_adds_only_the_gates() -> None:
    domain, general = build_pair()
    keys_before = list(domain.state_dict())
    n_before = sum(p.numel() for p in domain.parameters()) + sum(p.numel() for p in general.parameters())
    model = GmapModel(domain, general, GmapConfig("chunk"))
    assert list(domain.state_dict()) == keys_before
    wrappers = [m for m in domain.modules() if isinstance(m, MemoryAttention)]
    assert len(wrappers) == 2
    added = sum(p.numel() for p in model.parameters()) - n_before
    assert added == 2 * (32 + 1)  # one Linear(hidden, 1) per fused layer
    assert sum(p.numel() for p in GmapModel(*build_pair(), GmapConfig("multi")).gates.parameters()) == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_a_padded_memory_position_gets_exactly_zero_weight(impl: str) -> None:
    domain, _ = build_pair("bert", impl)
    attention = MemoryAttention(domain.bert.encoder.layer[2].attention.self)
    torch.manual_seed(3)
    hidden = torch.randn(2, 5, 32)
    memory = torch.randn(2, 9, 32)
    memory_mask = torch.ones(2, 9, dtype=torch.bool)
    memory_mask[0, 6:] = False
    memory_mask[1, 1] = False
    own_mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    own_mask[1, ..., 4] = False

    context, weights = attention.attend(hidden, own_mask, memory, memory_mask, return_weights=True)
    assert weights.shape == (2, 2, 5, 5 + 9)
    assert torch.all(weights[0, :, :, 5 + 6 :] == 0)
    assert torch.all(weights[1, :, :, 5 + 1] == 0)
    assert torch.all(weights[1, :, :, 4] == 0)  # the padded own key, too
    assert torch.all(weights[0, :, :, 5:11] > 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, 5))

    huge, nan = memory.clone(), memory.clone()
    huge[~memory_mask] = 1e4
    nan[~memory_mask] = float("nan")  # 0 × NaN would leak if the rows were only weighted
    for return_weights in (True, False):
        before, _ = attention.attend(hidden, own_mask, memory, memory_mask, return_weights=return_weights)
        for garbage in (huge, nan):
            after, _ = attention.attend(hidden, own_mask, garbage, memory_mask, return_weights=return_weights)
            assert torch.equal(before, after)


@pytest.mark.parametrize("impl", IMPLS)
def test_padded_general_tokens_change_nothing(impl: str) -> None:
    domain, general = build_pair("roberta", impl)
    model = GmapModel(domain, general, GmapConfig("gated")).eval()
    inputs = batch()
    other = inputs["general_input_ids"].clone()
    padded = ~inputs["general_attention_mask"].bool()
    other[padded] = 7  # the general model computes different states there; they must be masked
    with torch.no_grad():
        a = model(**inputs).logits
        b = model(**{**inputs, "general_input_ids": other}).logits
    assert torch.equal(a, b)


def reference_memory_attention(module: torch.nn.Module, hidden: torch.Tensor, own: torch.Tensor, memory: torch.Tensor,
                               memory_mask: torch.Tensor) -> torch.Tensor:
    """The G-MAP formula written out per example and head, independently of MemoryAttention."""
    heads, size = module.num_attention_heads, module.attention_head_size
    out = torch.zeros(hidden.shape[0], hidden.shape[1], heads * size)
    for b in range(hidden.shape[0]):
        q = module.query(hidden[b])
        k = torch.cat([module.key(hidden[b])[own[b]], module.key(memory[b])[memory_mask[b]]])
        v = torch.cat([module.value(hidden[b])[own[b]], module.value(memory[b])[memory_mask[b]]])
        for h in range(heads):
            cols = slice(h * size, (h + 1) * size)
            weights = torch.softmax(q[:, cols] @ k[:, cols].T / size**0.5, dim=-1)
            out[b, :, cols] = weights @ v[:, cols]
    return out


@pytest.mark.parametrize("memory_length", [3, 7, 12])
@pytest.mark.parametrize("impl", IMPLS)
def test_memory_attention_matches_the_formula_for_any_memory_length(impl: str, memory_length: int) -> None:
    domain, _ = build_pair("bert", impl)
    original = domain.bert.encoder.layer[1].attention.self
    attention = MemoryAttention(original)
    torch.manual_seed(4)
    hidden = torch.randn(2, 7, 32)
    memory = torch.randn(2, memory_length, 32)
    memory_mask = torch.ones(2, memory_length, dtype=torch.bool)
    memory_mask[1, memory_length // 2 :] = False
    own = torch.ones(2, 7, dtype=torch.bool)
    own[0, 5:] = False
    expected = reference_memory_attention(original, hidden, own, memory, memory_mask)
    with torch.no_grad():
        for return_weights in (True, False):
            context, _ = attention.attend(hidden, own.long(), memory, memory_mask, return_weights=return_weights)
            torch.testing.assert_close(context, expected, atol=1e-5, rtol=1e-5)
        attention.set_memory(memory, memory_mask)
        additive = (1.0 - own[:, None, None, :].float()) * torch.finfo(torch.float32).min  # the eager layer mask form
        via_forward, _ = attention(hidden, attention_mask=additive)
    torch.testing.assert_close(via_forward, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("general_length", [4, 7, 15])
def test_general_inputs_of_any_length_work_end_to_end(general_length: int) -> None:
    domain, general = build_pair("bert", head="tokcls")
    model = GmapModel(domain, general, GmapConfig("chunk")).eval()
    inputs = batch(query=9, memory=general_length)
    with torch.no_grad():
        out = model(**inputs)
    assert out.logits.shape == (3, 9, 3)
    assert torch.isfinite(out.logits).all()


def test_mixed_precision_forward_and_backward() -> None:
    domain, general = build_pair("bert")
    model = GmapModel(domain, general, GmapConfig("chunk")).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**batch(), labels=torch.tensor([0, 1, 2]))
    out.loss.backward()
    assert torch.isfinite(out.logits.float()).all()
    assert all(torch.isfinite(g.weight.grad).all() for g in model.gates.values())


# --------------------------------------------------------------------------
# Frozen general model, the unfrozen ablation


def train_step(model: GmapModel, inputs: dict) -> torch.optim.Optimizer:
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    out = model(**inputs, labels=torch.tensor([0, 1, 2]))
    out.loss.backward()
    return optimizer


@pytest.mark.parametrize("strategy", ["chunk", "single"])
def test_no_gradient_reaches_the_frozen_general_model(strategy: str) -> None:
    domain, general = build_pair("bert", dropout=0.3)
    model = GmapModel(domain, general, GmapConfig(strategy))
    inputs = batch()
    before = {k: v.clone() for k, v in general.state_dict().items()}
    domain_before = {k: v.clone() for k, v in domain.state_dict().items()}
    model.train()
    assert domain.training and not general.training  # frozen: eval mode (no dropout) even while training
    memory = model.general_memory(inputs["general_input_ids"], inputs["general_attention_mask"])
    assert not memory.states.requires_grad
    again = model.general_memory(inputs["general_input_ids"], inputs["general_attention_mask"])
    assert torch.equal(memory.states, again.states)  # deterministic despite dropout 0.3 in its config

    optimizer = train_step(model, inputs)
    assert all(p.grad is None for p in general.parameters())
    assert all(not p.requires_grad for p in general.parameters())
    fused = domain.bert.encoder.layer[model.plan.layers[-1] - 1].attention.self
    assert fused.key.weight.grad is not None and fused.key.weight.grad.abs().sum() > 0
    assert domain.classifier.weight.grad.abs().sum() > 0
    for gate in model.gates.values():
        assert gate.weight.grad is not None and gate.weight.grad.abs().sum() > 0
    optimizer.step()
    assert all(torch.equal(before[k], v) for k, v in general.state_dict().items())
    assert not torch.equal(domain_before["classifier.weight"], domain.state_dict()["classifier.weight"])
    assert set(map(id, model.trainable_parameters())) == {id(p) for p in [*domain.parameters(), *model.gates.parameters()]}


def test_the_unfrozen_ablation_trains_the_general_model() -> None:
    domain, general = build_pair("roberta", dropout=0.1)
    model = GmapModel(domain, general, GmapConfig("chunk", unfrozen=True))
    before = {k: v.clone() for k, v in general.state_dict().items()}
    optimizer = train_step(model, batch())
    assert general.training
    grads = [p.grad for p in general.encoder.layer[0].parameters()]
    assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
    optimizer.step()
    assert not torch.equal(before["encoder.layer.0.attention.self.key.weight"], general.encoder.layer[0].attention.self.key.weight)
    with pytest.raises(UsageError, match="frozen"):
        model.use_cache(Path("unused"))


def test_gradient_checkpointing_is_refused_in_training() -> None:
    domain, general = build_pair()
    enable = getattr(domain, "activation_checkpointing_enable", None) or domain.gradient_checkpointing_enable
    enable()
    model = GmapModel(domain, general, GmapConfig("single")).train()
    with pytest.raises(UsageError, match="gradient checkpointing"):
        model(**batch(), labels=torch.tensor([0, 1, 2]))


# --------------------------------------------------------------------------
# Save and reload


def build_on_disk(tmp_path: Path, arch: str = "bert") -> tuple:
    """A domain model in memory and a general model loaded from a folder (so its path is recorded)."""
    domain, general = build_pair(arch)
    folder = tmp_path / "general"
    general.save_pretrained(folder)
    return domain, transformers.AutoModel.from_pretrained(folder).eval(), folder


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_save_and_reload_give_identical_outputs(tmp_path: Path, arch: str, strategy: str) -> None:
    domain, general, general_folder = build_on_disk(tmp_path, arch)
    model = GmapModel(domain, general, GmapConfig(strategy, general_model=str(general_folder))).eval()
    torch.manual_seed(5)
    for gate in model.gates.values():  # trained gates, not the zero initialisation
        torch.nn.init.normal_(gate.weight, std=1.0)
    out_folder = tmp_path / "out"
    model.save_pretrained(out_folder)
    doc = json.loads((out_folder / CONFIG_FILE).read_text())
    assert doc["gmap"]["layers"] == list(model.plan.layers)
    assert doc["general"]["model"] == str(general_folder.resolve())
    assert doc["general"]["fingerprint"] == weights_fingerprint(general)
    assert (out_folder / GATES_FILE).is_file() == model.plan.gated

    again = GmapModel.from_pretrained(out_folder)
    assert not again.training and again.plan == model.plan
    inputs = batch()
    with torch.no_grad():
        torch.testing.assert_close(again(**inputs).logits, model(**inputs).logits, atol=1e-6, rtol=0)

    plain, info = type(domain).from_pretrained(out_folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]  # an ordinary checkpoint, wrappers or not
    assert not any(isinstance(m, MemoryAttention) for m in plain.modules())


def test_reload_refuses_a_different_general_model(tmp_path: Path) -> None:
    domain, general, general_folder = build_on_disk(tmp_path)
    GmapModel(domain, general, GmapConfig("chunk", general_model=str(general_folder))).save_pretrained(tmp_path / "out")
    other = build_tiny_bert(tmp_path / "other", head="base", layers=LAYERS)
    with pytest.raises(ModelError, match="not the one"):
        GmapModel.from_pretrained(tmp_path / "out", general_model=other)
    with pytest.raises(ModelError, match="not a G-MAP model folder"):
        GmapModel.from_pretrained(general_folder)


def test_unfrozen_save_keeps_the_trained_general_model(tmp_path: Path) -> None:
    domain, general, general_folder = build_on_disk(tmp_path)
    model = GmapModel(domain, general, GmapConfig("single", unfrozen=True, general_model=str(general_folder)))
    train_step(model, batch()).step()
    model.eval().save_pretrained(tmp_path / "out")
    assert (tmp_path / "out" / GENERAL_DIR / "config.json").is_file()
    again = GmapModel.from_pretrained(tmp_path / "out")
    assert again.gmap_config.general_model == str(general_folder.resolve())
    inputs = batch()
    with torch.no_grad():
        torch.testing.assert_close(again(**inputs).logits, model(**inputs).logits, atol=1e-6, rtol=0)


# --------------------------------------------------------------------------
# Memory cache, errors


def test_the_memory_cache_reads_back_what_the_general_model_computes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    domain, general = build_pair("bert", head="tokcls")
    model = GmapModel(domain, general, GmapConfig("chunk")).eval()
    inputs = batch(query=8, memory=10)
    inputs["general_token_type_ids"] = torch.zeros_like(inputs["general_input_ids"])
    with torch.no_grad():
        fresh = model(**inputs).logits
    model.use_cache(tmp_path / "cache")
    with torch.no_grad():
        first = model(**inputs).logits
    assert model.memory_cache.misses == 3 and len(list((tmp_path / "cache").rglob("*.safetensors"))) == 3
    torch.testing.assert_close(first, fresh, atol=1e-6, rtol=0)

    def no_general(*args: object, **kwargs: object) -> None:
        raise AssertionError("the general model ran although every example is cached")

    monkeypatch.setattr(model, "run_general", no_general)
    wider = {  # the same examples padded to a wider batch hit the same entries
        **inputs,
        "general_input_ids": torch.nn.functional.pad(inputs["general_input_ids"], (0, 4)),
        "general_attention_mask": torch.nn.functional.pad(inputs["general_attention_mask"], (0, 4)),
        "general_token_type_ids": torch.nn.functional.pad(inputs["general_token_type_ids"], (0, 4)),
    }
    with torch.no_grad():
        second = model(**inputs).logits
        third = model(**wider).logits
    assert model.memory_cache.hits == 6
    torch.testing.assert_close(second, fresh, atol=1e-6, rtol=0)
    torch.testing.assert_close(third, fresh, atol=1e-6, rtol=0)

    cache = model.memory_cache
    row = (inputs["general_input_ids"][0], inputs["general_attention_mask"][0], None)
    changed = inputs["general_input_ids"][0].clone()
    changed[0] += 1
    assert cache.key(changed, row[1], None) != cache.key(*row)
    other = type(cache)(tmp_path / "cache", fingerprint="x", state_indices=cache.state_indices, hidden_size=32)
    assert other.key(*row) != cache.key(*row)


def test_mismatched_or_unsupported_models_raise_model_errors() -> None:
    domain, _ = build_pair()
    wide = transformers.BertModel(transformers.BertConfig(vocab_size=50, hidden_size=48, num_hidden_layers=2, num_attention_heads=2,
                                                          intermediate_size=64))
    with pytest.raises(ModelError, match="hidden size"):
        GmapModel(domain, wide, GmapConfig("single"))
    distil = transformers.DistilBertModel(transformers.DistilBertConfig(vocab_size=50, dim=32, n_layers=2, n_heads=2, hidden_dim=64))
    _, general = build_pair()
    with pytest.raises(ModelError, match="BERT-style"):
        GmapModel(distil, general, GmapConfig("single"))


def test_a_general_model_without_pooler_weights_has_one_fingerprint(tmp_path: Path) -> None:
    """A checkpoint without pooler weights (RoBERTa-style) gets a random pooler on every AutoModel load; G-MAP never runs
    the pooler, so its fingerprint leaves it out and two loads of one folder are the same general model (issue 81)."""
    from transformers import AutoModel, BertConfig, BertModel

    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    BertModel(config, add_pooling_layer=False).save_pretrained(tmp_path / "nopooler")
    first, second = (AutoModel.from_pretrained(str(tmp_path / "nopooler")) for _ in range(2))
    assert not torch.equal(first.pooler.dense.weight, second.pooler.dense.weight)  # (drawn anew on each load)
    assert weights_fingerprint(first) == weights_fingerprint(second)
    assert weights_fingerprint(first, used_only=False) != weights_fingerprint(second, used_only=False)
    second.encoder.layer[0].attention.self.query.weight.data.add_(1.0)  # a weight G-MAP does read: another model
    assert weights_fingerprint(first) != weights_fingerprint(second)
