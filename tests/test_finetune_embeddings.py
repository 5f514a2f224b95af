"""The split word embedding and row-wise AdamW for very large added vocabularies."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from greenadapt.modeling.embeddings import RowAdamW, SplitWordEmbedding, install, merge_back


def _table(n: int, d: int = 4, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=generator)


def test_forward_equals_a_plain_embedding() -> None:
    weight = _table(12)
    plain = nn.Embedding.from_pretrained(weight.clone(), padding_idx=0)
    split = SplitWordEmbedding(weight, 7, 0, train_base=True, capacity=16)
    ids = torch.tensor([[2, 7, 11, 0], [8, 8, 3, 6]])
    split.eval()
    assert torch.equal(split(ids), plain(ids))
    split.train()
    split.load_rows(ids)
    assert split.loaded.tolist() == [0, 1, 4]
    assert torch.equal(split(ids), plain(ids))
    assert torch.equal(split.merged_weight(), weight)


def test_using_an_unloaded_row_is_an_error() -> None:
    split = SplitWordEmbedding(_table(10), 5, None, train_base=False, capacity=4)
    split.train()
    split.load_rows(torch.tensor([6]))
    with pytest.raises(RuntimeError, match="did not load"):
        split(torch.tensor([[7]]))


def test_row_adamw_is_dense_adamw_computed_lazily() -> None:
    """Sparse use, a decaying learning rate, weight decay: after a flush every added row equals dense AdamW's,
    including the rows used once long ago (moved on by their moments) and the rows never used (decayed)."""
    torch.manual_seed(0)
    n_base, n_added, d, steps = 5, 12, 6, 60
    weight = torch.randn(n_base + n_added, d)
    reference = nn.Parameter(weight[n_base:].clone())
    dense = torch.optim.AdamW([reference], lr=0.05, weight_decay=0.1)
    split = SplitWordEmbedding(weight.clone(), n_base, None, train_base=False, capacity=16)
    split.train()
    rows = RowAdamW(split, lr=0.05, weight_decay=0.1)
    schedules = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: max(0.0, 1 - s / steps)) for o in (rows, dense)]
    target = torch.randn(4, d)
    generator = torch.Generator().manual_seed(1)
    never = torch.tensor([n_added - 1])
    for step in range(steps):
        used = torch.randint(0, n_added - 1, (4,), generator=generator) if step % 3 else torch.zeros(4, dtype=torch.long)
        ids = (used + n_base).unsqueeze(0)
        split.load_rows(ids)
        ((split(ids)[0] - target) ** 2).sum().backward()
        ((reference[used] - target) ** 2).sum().backward()
        for optimizer, schedule in zip((rows, dense), schedules):
            optimizer.step()
            optimizer.zero_grad()
            schedule.step()
        if step == 30:
            split.eval()  # an evaluation in the middle brings the rows up to date, and training goes on from there
            assert torch.allclose(split.added, reference.detach(), atol=2e-6)
            split.train()
    split.flush()
    assert torch.allclose(split.added, reference.detach(), atol=2e-6)
    assert not torch.equal(split.added[never], weight[n_base:][never])  # decayed although never used
    assert torch.equal(split.base.weight, weight[:n_base])  # frozen original rows
    assert rows.state_size_rows() == n_added - 1  # state only for the rows ever used


def test_state_grows_with_used_rows_not_vocabulary() -> None:
    n_base, n_added = 10, 1_000_000
    weight = torch.zeros(n_base + n_added, 4)
    split = SplitWordEmbedding(weight, n_base, None, train_base=False, capacity=64)
    split.train()
    optimizer = RowAdamW(split, lr=0.01)
    for step in range(3):
        ids = torch.tensor([[n_base + step, n_base + 999_999, 3]])
        split.load_rows(ids)
        split(ids).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    assert optimizer.state_size_rows() == 4  # rows 0, 1, 2 and 999999 of the added block
    assert optimizer.exp_avg.shape[0] < 10_000  # moments for used rows only, never 1M × dim
    assert split.active.shape[0] == 64
    changed = (split.added != 0).any(dim=1).nonzero().flatten().tolist()
    assert changed == [0, 1, 2, 999_999]


def test_install_modes_and_merge_back(tiny_bert_base) -> None:  # type: ignore[no-untyped-def]
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(tiny_bert_base))
    n = model.get_input_embeddings().weight.shape[0]
    assert install(model, n_base=n, mode="new", capacity=8) is None  # no added rows: nothing to split
    assert not model.get_input_embeddings().weight.requires_grad

    model = AutoModel.from_pretrained(str(tiny_bert_base))
    before = model.get_input_embeddings().weight.detach().clone()
    split = install(model, n_base=n - 10, mode="all", capacity=8)
    assert isinstance(split, SplitWordEmbedding) and split.base.weight.requires_grad
    assert isinstance(model.get_input_embeddings(), SplitWordEmbedding)
    merge_back(model)
    restored = model.get_input_embeddings()
    assert isinstance(restored, nn.Embedding) and torch.equal(restored.weight, before)


def test_merging_back_writes_the_trained_rows_into_the_one_table_without_a_copy() -> None:
    n_base, n_added = 6, 5
    weight = _table(n_base + n_added)
    split = SplitWordEmbedding(weight, n_base, None, train_base=True, capacity=8)
    assert split.added.data_ptr() == weight[n_base:].data_ptr()  # the added rows were not copied
    split.train()
    dense = torch.optim.AdamW(split.base.parameters(), lr=0.1)
    rows = RowAdamW(split, lr=0.1)
    ids = torch.tensor([[1, n_base + 1, 3, n_base + 4]])
    for _ in range(3):
        split.load_rows(ids)
        split(ids).pow(2).sum().backward()
        dense.step()
        rows.step()
        dense.zero_grad()
        rows.zero_grad()
    expected = torch.cat([split.base.weight.detach(), split.added]).clone()
    assert not torch.equal(expected[:n_base], _table(n_base + n_added)[:n_base])  # the original rows did train

    model = nn.Module()
    model.embeddings = split
    model.get_input_embeddings = lambda: model.embeddings  # type: ignore[method-assign]
    model.set_input_embeddings = lambda module: setattr(model, "embeddings", module)  # type: ignore[method-assign]
    merge_back(model)
    merged = model.embeddings.weight
    assert torch.equal(merged, expected)
    assert merged.data_ptr() == weight.data_ptr()  # one table throughout: no second copy of a 1.5 GB matrix


def test_weights_restored_from_a_snapshot_owe_nothing_for_the_steps_after_it() -> None:
    """The best epoch's weights, loaded back at the end of training, are saved as they were (settle), not moved on."""
    n_base, n_added = 4, 6
    split = SplitWordEmbedding(_table(n_base + n_added), n_base, None, train_base=False, capacity=8)
    split.train()
    rows = RowAdamW(split, lr=0.1, weight_decay=0.1)

    def step(ids: list[int]) -> None:
        batch = torch.tensor([ids])
        split.load_rows(batch)
        split(batch).pow(2).sum().backward()
        rows.step()
        rows.zero_grad()

    step([n_base, n_base + 1])
    split.eval()  # the best epoch's evaluation
    best = {k: v.clone() for k, v in split.state_dict().items()}
    split.train()
    for _ in range(3):
        step([n_base + 2])  # rows 0 and 1 are owed moves from here on
    split.load_state_dict(best)
    split.settle()
    assert torch.equal(split.merged_weight()[n_base:], best["added"])
