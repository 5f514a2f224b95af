"""Training the word embeddings of a model with a very large added vocabulary.

An expanded model may carry hundreds of thousands or millions of added
rows. Trained as one dense parameter, every step would pay for all of them:
a dense gradient, AdamW's two moment tensors and an update of every row,
although a batch of 32 sentences touches at most a few thousand rows.

So during fine-tuning the word-embedding module is replaced by
:class:`SplitWordEmbedding`:

- the *original* rows (those of the general tokenizer) stay an ordinary
  dense parameter, trained by the main AdamW (``--train-embeddings all``) or
  frozen (``new``, ``none``);
- the *added* rows live in a plain buffer. Before each optimizer step the
  rows the global batch uses are copied into ``active``, a small parameter
  of fixed size (at most ``batch_size * max_length`` rows), through which
  the forward pass reads them. Its gradient is dense and small, so DDP,
  gradient clipping and the fp16 grad scaler handle it like any other
  parameter. :class:`RowAdamW` then updates those rows and writes them back.

RowAdamW is "lazy" AdamW per row: a row's moments and bias-correction step
count advance only in steps whose batch uses the row (as in TensorFlow's
LazyAdam and ``torch.optim.SparseAdam``), and weight decay is applied to it
only then. A row used in every step is updated exactly as ``torch.optim.AdamW``
would update it. Its state is kept only for rows ever used (plus one int64
slot index per added row), so optimizer memory grows with the vocabulary the
training data touches, not with the vocabulary size.

After training :func:`merge_back` restores a plain ``nn.Embedding`` so the
saved model is an ordinary transformers checkpoint.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)

TRAIN_EMBEDDINGS = ("all", "new", "none")


class SplitWordEmbedding(nn.Module):
    """Word embeddings as dense original rows plus row-wise trained added rows."""

    added: torch.Tensor  # a registered buffer (Module.__getattr__ would type it Tensor | Module)

    def __init__(self, weight: torch.Tensor, n_base: int, padding_idx: int | None, *, train_base: bool, capacity: int) -> None:
        super().__init__()
        self.n_base = n_base
        self.embedding_dim = weight.shape[1]
        self.padding_idx = padding_idx
        # The added rows stay where they are, in the loaded table (a view, no copy: with a million added rows the
        # table is 1.5 GB); only the original rows, a small part, get a parameter of their own. merged_weight()
        # writes those back into the same table, so training and saving never hold a second copy of it.
        self.table = weight.detach()
        self.base = nn.Embedding.from_pretrained(weight[:n_base].detach().clone(), freeze=not train_base, padding_idx=padding_idx)
        self.register_buffer("added", self.table[n_base:], persistent=True)
        self.active = nn.Parameter(torch.zeros(max(capacity, 1), self.embedding_dim, dtype=weight.dtype, device=weight.device))
        self.loaded: torch.Tensor | None = None  # sorted added-row indices now held in ``active``

    @property
    def n_added(self) -> int:
        return self.added.shape[0]

    @property
    def capacity(self) -> int:
        return self.active.shape[0]

    def load_rows(self, token_ids: torch.Tensor) -> None:
        """Copy the added rows that ``token_ids`` use into ``active`` for the next step."""
        rows = torch.unique(token_ids[token_ids >= self.n_base]) - self.n_base
        if rows.numel() > self.capacity:
            raise RuntimeError(f"a batch uses {rows.numel()} added rows, more than the capacity {self.capacity}")
        with torch.no_grad():
            self.active[: rows.numel()].copy_(self.added.index_select(0, rows))
        self.loaded = rows

    def store_rows(self) -> None:
        """Write the (updated) active rows back into the table."""
        if self.loaded is not None and self.loaded.numel():
            with torch.no_grad():
                self.added.index_copy_(0, self.loaded, self.active[: self.loaded.numel()].detach())

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        is_added = input_ids >= self.n_base
        out = self.base(torch.where(is_added, torch.zeros_like(input_ids), input_ids))
        added_ids = input_ids[is_added] - self.n_base
        if self.training and self.loaded is not None:
            slots = torch.searchsorted(self.loaded, added_ids)
            if added_ids.numel() and not torch.equal(self.loaded[slots.clamp(max=self.loaded.numel() - 1)], added_ids):
                raise RuntimeError("an added row was used that load_rows() did not load for this step")
            # Always through ``active`` (even with no rows) so DDP sees the parameter used on every rank.
            vectors = self.active.index_select(0, slots)
        else:
            vectors = self.added.index_select(0, added_ids)
        return out.masked_scatter(is_added.unsqueeze(-1), vectors.to(out.dtype))

    def merged_weight(self) -> torch.Tensor:
        """All rows as one table: the trained original rows written back into the table the added rows live in."""
        if self.added.data_ptr() != self.table[self.n_base :].data_ptr():  # moved to another device after it was built
            return torch.cat([self.base.weight.detach(), self.added], dim=0)
        with torch.no_grad():
            self.table[: self.n_base].copy_(self.base.weight.detach())
        return self.table


class RowAdamW(torch.optim.Optimizer):
    """Lazy per-row AdamW for :class:`SplitWordEmbedding`'s active rows (see the module docstring)."""

    def __init__(
        self,
        embedding: SplitWordEmbedding,
        *,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__([embedding.active], {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.embedding = embedding
        device = embedding.added.device
        self.slot_of = torch.full((embedding.n_added,), -1, dtype=torch.long, device=device)
        self.exp_avg = torch.zeros(0, embedding.embedding_dim, device=device)
        self.exp_avg_sq = torch.zeros(0, embedding.embedding_dim, device=device)
        self.row_steps = torch.zeros(0, dtype=torch.long, device=device)
        self.used = 0

    def _slots(self, rows: torch.Tensor) -> torch.Tensor:
        fresh = rows[self.slot_of[rows] < 0]
        if fresh.numel():
            needed = self.used + fresh.numel()
            if needed > self.exp_avg.shape[0]:
                grow = max(needed, 2 * self.exp_avg.shape[0], 1024) - self.exp_avg.shape[0]
                dim = self.embedding.embedding_dim
                self.exp_avg = torch.cat([self.exp_avg, self.exp_avg.new_zeros(grow, dim)])
                self.exp_avg_sq = torch.cat([self.exp_avg_sq, self.exp_avg_sq.new_zeros(grow, dim)])
                self.row_steps = torch.cat([self.row_steps, self.row_steps.new_zeros(grow)])
            self.slot_of[fresh] = torch.arange(self.used, needed, device=rows.device)
            self.used = needed
        return self.slot_of[rows]

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        rows = self.embedding.loaded
        active = self.embedding.active
        if rows is None or rows.numel() == 0 or active.grad is None:
            return
        group = self.param_groups[0]
        lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        k = rows.numel()
        slots = self._slots(rows)
        grad = active.grad[:k].float()
        param = active.data[:k]
        m = self.exp_avg[slots].lerp_(grad, 1 - beta1)
        v = self.exp_avg_sq[slots].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        t = self.row_steps[slots] + 1
        # torch.optim.AdamW's arithmetic (decoupled decay, then the Adam step), with a step count per row.
        step_size = (lr / (1 - beta1 ** t.double())).float().unsqueeze(1)
        bias2_sqrt = (1 - beta2 ** t.double()).sqrt().float().unsqueeze(1)
        param.mul_(1 - lr * decay)
        param.addcdiv_(m * -step_size, (v.sqrt() / bias2_sqrt).add_(eps))
        self.exp_avg[slots] = m
        self.exp_avg_sq[slots] = v
        self.row_steps[slots] = t
        self.embedding.store_rows()

    def state_size_rows(self) -> int:
        """How many rows have optimizer state (the rows training has used so far)."""
        return self.used

    def state_dict(self) -> dict[str, Any]:
        """The base optimizer's state (learning rate, betas) plus the per-row moments and step counts.

        Only the ``used`` slots are exported, as copies: a slice of the grown
        tables would drag their whole storage into a saved file.
        """
        state = super().state_dict()
        used = self.used
        state["rows"] = {
            "slot_of": self.slot_of.detach().cpu().clone(),
            "exp_avg": self.exp_avg[:used].detach().cpu().clone(),
            "exp_avg_sq": self.exp_avg_sq[:used].detach().cpu().clone(),
            "row_steps": self.row_steps[:used].detach().cpu().clone(),
        }
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        rows = state.pop("rows", None)
        if not isinstance(rows, dict) or set(rows) != {"slot_of", "exp_avg", "exp_avg_sq", "row_steps"}:
            raise ValueError("not a RowAdamW state: the per-row state is missing")
        slot_of, exp_avg, exp_avg_sq, row_steps = (rows[k] for k in ("slot_of", "exp_avg", "exp_avg_sq", "row_steps"))
        used = exp_avg.shape[0]
        dim = self.embedding.embedding_dim
        if (
            slot_of.shape != self.slot_of.shape
            or exp_avg.shape != (used, dim)
            or exp_avg_sq.shape != (used, dim)
            or row_steps.shape != (used,)
            or (used and int(slot_of.max()) >= used)
        ):
            raise ValueError(f"RowAdamW state for {slot_of.shape[0]} added rows of width {exp_avg.shape[-1]} does not fit this embedding")
        super().load_state_dict(state)
        device = self.embedding.added.device
        self.slot_of = slot_of.to(device=device, dtype=torch.long).clone()
        self.exp_avg = exp_avg.to(device=device, dtype=self.exp_avg.dtype).clone()
        self.exp_avg_sq = exp_avg_sq.to(device=device, dtype=self.exp_avg_sq.dtype).clone()
        self.row_steps = row_steps.to(device=device, dtype=torch.long).clone()
        self.used = used


def install(model: Any, *, n_base: int, mode: str, capacity: int) -> SplitWordEmbedding | None:
    """Set up the word embeddings for ``--train-embeddings mode``; return the split module if one was installed."""
    if mode not in TRAIN_EMBEDDINGS:
        raise ValueError(mode)
    embedding = model.get_input_embeddings()
    n_rows = embedding.weight.shape[0]
    if mode == "none" or n_rows <= n_base:
        # No added rows: "new" has nothing to train, "all" is ordinary fine-tuning.
        embedding.weight.requires_grad_(mode == "all")
        return None
    split = SplitWordEmbedding(
        embedding.weight.data, n_base, embedding.padding_idx, train_base=(mode == "all"), capacity=min(capacity, n_rows - n_base)
    )
    model.set_input_embeddings(split)
    log.info("word embeddings: %d original rows (%s), %d added rows trained row-wise", n_base, "trained" if mode == "all" else "frozen", n_rows - n_base)
    return split


def merge_back(model: Any) -> None:
    """Replace a SplitWordEmbedding by a plain nn.Embedding holding all rows (for saving)."""
    split = model.get_input_embeddings()
    if not isinstance(split, SplitWordEmbedding):
        return
    merged = nn.Embedding.from_pretrained(split.merged_weight(), freeze=False, padding_idx=split.padding_idx)
    model.set_input_embeddings(merged)
