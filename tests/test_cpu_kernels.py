"""The CPU step's cheaper elementwise half (issue 94, item 1): the kept embedding gradient and the skipped clip are the
dense path bit for bit; the packed dropout masks are dropout (its rate, its scale, its gradient, seeded, resumable)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from greenadapt.training.cpu_kernels import CpuDropout, RowGradientEmbedding, plain_modules, use_cpu_kernels
from greenadapt.training.step import optimizer_step


def _tiny_tagger(seed: int = 0, attention: str = "eager") -> nn.Module:
    from transformers import BertConfig, BertForTokenClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=64, num_labels=3, pad_token_id=0, attn_implementation=attention)
    return BertForTokenClassification(config)


def _batches(count: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(7)
    batches = []
    for _ in range(count):
        ids = torch.randint(1, 40, (4, 12), generator=generator)  # few distinct ids: rows repeat within a batch
        ids[:, 9:] = 0  # padding, whose row gets no gradient
        mask = (ids != 0).long()
        labels = torch.randint(0, 3, (4, 12), generator=generator).masked_fill(ids == 0, -100)
        batches.append((ids, mask, labels))
    return batches


def _train(model: nn.Module, batches: list, *, max_grad_norm: float, parts: int = 2) -> dict[str, torch.Tensor]:
    torch.manual_seed(11)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    model.train()
    for ids, mask, labels in batches:
        for part in range(parts):  # micro-batches accumulate into one step's gradient
            rows = slice(part * 2, part * 2 + 2)
            model(input_ids=ids[rows], attention_mask=mask[rows], labels=labels[rows]).loss.backward()
        optimizer_step([optimizer], [], list(model.parameters()), max_grad_norm=max_grad_norm)
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


@pytest.mark.parametrize("max_grad_norm", [0.05, 100.0])  # every step clipped / none clipped
def test_the_kept_embedding_gradient_and_the_clip_train_the_same_weights_bit_for_bit(max_grad_norm: float) -> None:
    batches = _batches(4)
    plain = _train(_tiny_tagger(), batches, max_grad_norm=max_grad_norm)
    model = _tiny_tagger()
    use_cpu_kernels(model, dropout_masks="torch", world=1)
    assert isinstance(model.get_input_embeddings(), RowGradientEmbedding)
    kept = _train(model, batches, max_grad_norm=max_grad_norm)
    assert plain.keys() == kept.keys()
    different = [name for name in plain if not torch.equal(plain[name], kept[name])]
    assert not different, different
    assert not torch.equal(plain["bert.embeddings.word_embeddings.weight"],
                           _tiny_tagger().state_dict()["bert.embeddings.word_embeddings.weight"])


def test_the_kept_gradient_is_the_dense_one_after_each_step_and_zero_where_the_step_wrote_nothing() -> None:
    torch.manual_seed(0)
    dense = nn.Embedding(50, 8, padding_idx=0)
    kept = RowGradientEmbedding.replacing(nn.Embedding.from_pretrained(dense.weight.detach().clone(), freeze=False, padding_idx=0))
    for ids in (torch.tensor([[3, 3, 5, 0, 7]]), torch.tensor([[9, 0, 9, 9, 2]])):
        upstream = torch.randn(1, 5, 8)
        for module in (dense, kept):
            module.weight.grad = None  # what zero_grad(set_to_none=True) does after each optimizer step
            module(ids).backward(upstream)
        assert torch.equal(dense.weight.grad, kept.weight.grad)
    assert kept.weight.grad[[3, 5, 7]].abs().sum() == 0  # the first step's rows, zeroed for the second
    plain_modules(kept)
    assert type(kept) is nn.Embedding and kept._gradient is None


def test_a_tied_or_distributed_table_keeps_autograds_gradient() -> None:
    from transformers import BertConfig, BertForMaskedLM

    masked_lm = BertForMaskedLM(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                           intermediate_size=32))
    use_cpu_kernels(masked_lm, dropout_masks="fast", world=1)  # the decoder shares the table
    assert type(masked_lm.get_input_embeddings()) is nn.Embedding
    tagger = _tiny_tagger()
    use_cpu_kernels(tagger, dropout_masks="fast", world=2)
    assert type(tagger.get_input_embeddings()) is nn.Embedding
    assert any(type(m) is CpuDropout for m in tagger.modules()) and not any(type(m) is nn.Dropout for m in tagger.modules())
    plain_modules(tagger)
    assert not any(type(m) is CpuDropout for m in tagger.modules())


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_packed_masks_drop_at_the_rate_keep_the_mean_and_pass_the_gradient_through_the_kept(rate: float) -> None:
    torch.manual_seed(3)
    layer = CpuDropout(rate)
    values = torch.ones(1_000_001, requires_grad=True)  # odd: the last draw's second half unused
    out = layer(values)
    dropped = out == 0
    # 1M draws: the share's sd is ~0.0003 (0.3: 0.00046); 5 sd apart would be a broken mask, not chance
    assert abs(dropped.double().mean().item() - rate) < 0.0025
    assert abs(out.double().mean().item() - 1.0) < 0.004
    kept_scale = out[~dropped].unique()
    assert kept_scale.numel() == 1 and abs(kept_scale.item() - 1 / (1 - rate)) < 1e-4
    # both halves of a draw are masks at the rate, and neighbours are independent
    pairs = dropped[:1_000_000].view(-1, 2).double()
    assert (pairs.mean(0) - rate).abs().max() < 0.004
    assert abs((pairs[:, 0] * pairs[:, 1]).mean().item() - rate**2) < 0.003
    out.backward(torch.full_like(out, 2.0))
    assert torch.equal(values.grad, torch.where(dropped, 0.0, 2.0 * kept_scale.item()))


def test_packed_masks_follow_the_seed_and_a_restored_generator() -> None:
    layer = CpuDropout(0.1)
    values = torch.randn(64, 33, 16, dtype=torch.bfloat16)
    torch.manual_seed(5)
    first = layer(values)
    state = torch.get_rng_state()
    second = layer(values)
    torch.manual_seed(5)
    assert torch.equal(layer(values), first)
    torch.set_rng_state(state)  # a checkpoint's saved generator: the resumed step draws the same masks
    assert torch.equal(layer(values), second)
    assert not torch.equal(first, second) and first.dtype == torch.bfloat16
    layer.eval()
    assert layer(values) is values


@pytest.mark.parametrize("max_grad_norm", [0.5, 1e6])
def test_the_clip_is_torchs_whether_or_not_the_norm_is_over_the_bound(max_grad_norm: float) -> None:
    from greenadapt.training.step import _clip

    torch.manual_seed(2)
    theirs = [nn.Parameter(torch.randn(30, 7)) for _ in range(3)]
    ours = [nn.Parameter(p.detach().clone()) for p in theirs]
    for a, b in zip(theirs, ours, strict=True):
        a.grad = torch.randn_like(a)
        b.grad = a.grad.clone()
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_grad_norm)
    assert torch.equal(_clip(ours, max_grad_norm), expected)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(theirs, ours, strict=True))


def test_attention_dropout_draws_packed_masks_in_training_and_is_torchs_attention_otherwise() -> None:
    from greenadapt.training.cpu_kernels import ATTENTION, _attention_with_packed_dropout

    model = _tiny_tagger(attention="sdpa")
    model.config.attention_probs_dropout_prob = 0.1
    for layer in model.bert.encoder.layer:
        layer.attention.self.dropout.p = 0.1
    ids = torch.randint(1, 40, (3, 9), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    model.eval()
    reference = model(input_ids=ids, attention_mask=mask).logits
    use_cpu_kernels(model, dropout_masks="fast", world=1)
    assert model.config._attn_implementation == ATTENTION
    model.eval()
    assert torch.equal(model(input_ids=ids, attention_mask=mask).logits, reference)  # no dropout: torch's own attention
    model.train()
    torch.manual_seed(8)
    first = model(input_ids=ids, attention_mask=mask).logits
    torch.manual_seed(8)
    assert torch.equal(model(input_ids=ids, attention_mask=mask).logits, first) and not torch.equal(first, reference)
    plain_modules(model)
    assert model.config._attn_implementation == "sdpa"
    # uniform attention over 64 keys of ones: each output is the kept probabilities' sum, scaled: 1 on average
    module = nn.Module()
    query = torch.zeros(8, 4, 64, 16)
    out, _ = _attention_with_packed_dropout(module.train(), query, query, torch.ones(8, 4, 64, 16), None, dropout=0.3)
    assert abs(out.mean().item() - 1.0) < 0.01 and out.std().item() > 0.05
