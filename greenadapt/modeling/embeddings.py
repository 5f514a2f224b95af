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

Nothing in a step waits for a GPU: which rows a batch uses, and which state
slot holds each, are worked out on the host from the batch before it is
copied (found on the device, their data-dependent count would be read back
every step), and the forward pass gathers a vector for every position and
keeps the added ones instead of selecting them by mask.

RowAdamW is ``torch.optim.AdamW`` over the added rows, computed lazily: a
step touches only the rows its batch uses, yet every row ends where dense
AdamW would have put it. Dense AdamW keeps moving a row in the steps that do
not use it (its decaying first moment over the root of its decaying second,
and the weight decay); RowAdamW owes those moves to the row and pays them in
closed form when the row is next loaded, and for every row when the weights
are read (:meth:`SplitWordEmbedding.flush`: evaluation and merging back). A
checkpoint holds the rows as they are with what they are owed, so a resumed
run pays it exactly when the uninterrupted one does. Paying needs the
learning rate of every step so far (a float64 history, two numbers per step)
and, per row, the step it was last brought up to date with. The moment terms
of a row fall by ``β1/√β2`` per step, so only the last ``CATCH_UP_STEPS``
(200; the next term would be below 1e-9 of the first) are summed, and the
``eps`` of the denominator is left out of the owed moves (it is ~1e-8
against √v of 1e-6 or more for any row that had a gradient). State is kept
only for rows ever used (plus one int64 slot index per added row), so
optimizer memory grows with the vocabulary the training data touches, not
with the vocabulary size. (It used to be "lazy" like
``torch.optim.SparseAdam``, leaving a row alone between its uses: on
NCBI-disease the rows the data used moved ~6× less than under dense AdamW,
and F1 was lower; see docs/design.md.)

After training :func:`merge_back` restores a plain ``nn.Embedding`` so the
saved model is an ordinary transformers checkpoint.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch import nn

from greenadapt.defaults import TRAIN_EMBEDDINGS
from greenadapt.machine.devices import to_device

log = logging.getLogger(__name__)


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
        self.loaded_on_host: torch.Tensor | None = None  # the same indices, on the CPU
        self.owed: RowAdamW | None = None  # the optimizer training these rows: pays the moves dense AdamW would have made

    def flush(self) -> None:
        """Bring every added row to where dense AdamW would have it now (see the module docstring)."""
        if self.owed is not None:
            self.owed.pay_all()

    def settle(self) -> None:
        """Take the rows as they now are as up to date (after weights from a snapshot were loaded into them)."""
        if self.owed is not None:
            self.owed.forgive()

    def train(self, mode: bool = True) -> SplitWordEmbedding:
        if not mode:  # evaluation reads the rows
            self.flush()
        return super().train(mode)

    @property
    def n_added(self) -> int:
        return self.added.shape[0]

    @property
    def capacity(self) -> int:
        return self.active.shape[0]

    def load_rows(self, token_ids: torch.Tensor | np.ndarray) -> None:
        """Copy the added rows that ``token_ids`` use into ``active`` for the next step.

        Which rows those are is worked out on the host, from the batch before it goes to the
        device: finding them on a GPU (a mask, ``unique``) has a data-dependent size, which
        makes the host wait for every kernel queued so far.
        """
        ids = token_ids.detach().cpu().numpy() if isinstance(token_ids, torch.Tensor) else np.asarray(token_ids)
        rows = torch.from_numpy(np.unique(ids[ids >= self.n_base]).astype(np.int64) - self.n_base)
        if rows.numel() > self.capacity:
            raise RuntimeError(f"a batch uses {rows.numel()} added rows, more than the capacity {self.capacity}")
        on_device = to_device(rows, self.added.device)
        if self.owed is not None:  # the gradient is taken where dense AdamW would have the rows by now
            self.owed.pay(rows, on_device)
        with torch.no_grad():
            self.active[: rows.numel()].copy_(self.added.index_select(0, on_device))
        self.loaded, self.loaded_on_host = on_device, rows

    def store_rows(self) -> None:
        """Write the (updated) active rows back into the table."""
        if self.loaded is not None and self.loaded.numel():
            with torch.no_grad():
                self.added.index_copy_(0, self.loaded, self.active[: self.loaded.numel()].detach())

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # Every position gathers a vector and torch.where keeps the added ones: selecting only the added
        # positions (input_ids[is_added]) has a data-dependent size, a host sync on a GPU every step.
        is_added = input_ids >= self.n_base
        out = self.base(torch.where(is_added, torch.zeros_like(input_ids), input_ids))
        added_ids = (input_ids - self.n_base).clamp(min=0)
        if self.training and self.loaded is not None:
            slots = torch.searchsorted(self.loaded, added_ids).clamp(max=self.capacity - 1)
            if input_ids.device.type == "cpu":  # checking is a host read; on a GPU the CPU tests stand for it
                self._check_loaded(added_ids[is_added], slots[is_added])
            # Always through ``active`` (even with no rows) so DDP sees the parameter used on every rank.
            table: torch.Tensor = self.active
            index = slots
        else:
            table, index = self.added, added_ids
        vectors = table.index_select(0, index.flatten()).view(*input_ids.shape, self.embedding_dim)
        return torch.where(is_added.unsqueeze(-1), vectors.to(out.dtype), out)

    def _check_loaded(self, added_ids: torch.Tensor, slots: torch.Tensor) -> None:
        """Refuse a step whose inputs read an added row that load_rows() did not load (it would read another row's slot)."""
        loaded = self.loaded
        if loaded is None or not added_ids.numel():
            return
        if not loaded.numel() or not torch.equal(loaded[slots.clamp(max=loaded.numel() - 1)], added_ids):
            raise RuntimeError("an added row was used that load_rows() did not load for this step")

    def merged_weight(self) -> torch.Tensor:
        """All rows as one table: the trained original rows written back into the table the added rows live in."""
        self.flush()
        if self.added.data_ptr() != self.table[self.n_base :].data_ptr():  # moved to another device after it was built
            return torch.cat([self.base.weight.detach(), self.added], dim=0)
        with torch.no_grad():
            self.table[: self.n_base].copy_(self.base.weight.detach())
        return self.table


CATCH_UP_STEPS = 200


class RowAdamW(torch.optim.Optimizer):
    """AdamW for :class:`SplitWordEmbedding`'s added rows, computed lazily (see the module docstring)."""

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
        embedding.owed = self
        device = embedding.added.device
        # Which slot holds each added row's state is decided on the host (a data-dependent choice; see load_rows).
        self.slot_of = torch.full((embedding.n_added,), -1, dtype=torch.long)
        self.row_of = torch.zeros(0, dtype=torch.long, device=device)  # the added row of each slot
        self.exp_avg = torch.zeros(0, embedding.embedding_dim, device=device)
        self.exp_avg_sq = torch.zeros(0, embedding.embedding_dim, device=device)
        self.row_step = torch.zeros(0, dtype=torch.long, device=device)  # the step each slot's row is up to date with
        self.used = 0
        self.paid: tuple[torch.Tensor, torch.Tensor] | None = None  # the rows pay() last brought up to date, and their slots
        self.steps = 0  # optimizer steps taken
        self.decayed_to = 0  # the step every row without a slot has had its weight decay up to
        # Per step j (index 0: before the first): cumulative log(1 - lr_j·wd), and lr_j·√(1-β2^j)/(1-β1^j).
        self.log_keep = torch.zeros(1, dtype=torch.float64, device=device)
        self.owed_rate = torch.zeros(1, dtype=torch.float64, device=device)

    def _slots(self, rows: torch.Tensor) -> torch.Tensor:
        """The state slots of added ``rows`` (given on the CPU, returned on the state's device), given out on first use."""
        device = self.exp_avg.device
        fresh = rows[self.slot_of[rows] < 0]
        if fresh.numel():
            needed = self.used + fresh.numel()
            if needed > self.exp_avg.shape[0]:
                grow = max(needed, 2 * self.exp_avg.shape[0], 1024) - self.exp_avg.shape[0]
                dim = self.embedding.embedding_dim
                self.exp_avg = torch.cat([self.exp_avg, self.exp_avg.new_zeros(grow, dim)])
                self.exp_avg_sq = torch.cat([self.exp_avg_sq, self.exp_avg_sq.new_zeros(grow, dim)])
                self.row_step = torch.cat([self.row_step, self.row_step.new_zeros(grow)])
                self.row_of = torch.cat([self.row_of, self.row_of.new_zeros(grow)])
            self.slot_of[fresh] = torch.arange(self.used, needed)
            new_slots = torch.arange(self.used, needed, device=device)
            self.row_of[new_slots] = to_device(fresh, device)
            # Up to date with the step every slot-less row has had its decay to; its moments are zero.
            self.row_step[new_slots] = self.decayed_to
            self.used = needed
        return to_device(self.slot_of[rows], device)

    def _record(self, lr: float, betas: tuple[float, float], decay: float) -> None:
        """Append this step's learning rate to the history the owed moves are computed from."""
        import math

        beta1, beta2 = betas
        self.steps += 1
        t = self.steps
        if t >= self.log_keep.numel():
            grow = max(t + 1, 2 * self.log_keep.numel())
            self.log_keep = torch.cat([self.log_keep, self.log_keep.new_zeros(grow - self.log_keep.numel())])
            self.owed_rate = torch.cat([self.owed_rate, self.owed_rate.new_zeros(grow - self.owed_rate.numel())])
        self.log_keep[t] = self.log_keep[t - 1] + math.log1p(-lr * decay)
        self.owed_rate[t] = lr * math.sqrt(1 - beta2**t) / (1 - beta1**t)

    def _pay(self, slots: torch.Tensor, until: int) -> torch.Tensor:
        """Move ``slots``' rows (and decay their moments) through the steps after their own, up to ``until``.

        Returns the rows, brought up to date (the caller writes them where they belong).
        """
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        rows = self.embedding.added.index_select(0, self.row_of[slots]).double()
        since = self.row_step[slots]
        skipped = until - since  # steps whose batches did not use the row
        keep = (self.log_keep[until] - self.log_keep[since]).exp().unsqueeze(1)
        m = self.exp_avg[slots].double()
        v = self.exp_avg_sq[slots].double()
        k = torch.arange(1, CATCH_UP_STEPS + 1, dtype=torch.long, device=slots.device)
        step_of = since.unsqueeze(1) + k  # (rows, K): the steps owed
        within = step_of <= until
        step_of = step_of.clamp(max=until)
        ratio = beta1 / beta2**0.5
        # Step j moves the row by owed_rate_j · ratio^(j-s) · m/√v, later shrunk by the decay of steps j+1..until.
        weights = self.owed_rate[step_of] * ratio ** k.double() * (self.log_keep[until] - self.log_keep[step_of]).exp()
        owed = (weights * within).sum(dim=1, keepdim=True)
        direction = torch.where(v > 0, m / v.sqrt().clamp(min=1e-300), torch.zeros_like(m))
        rows = rows * keep - owed * direction
        self.exp_avg[slots] = (m * beta1 ** skipped.double().unsqueeze(1)).float()
        self.exp_avg_sq[slots] = (v * beta2 ** skipped.double().unsqueeze(1)).float()
        self.row_step[slots] = until
        return rows.to(self.embedding.added.dtype)

    @torch.no_grad()
    def pay(self, rows: torch.Tensor, on_device: torch.Tensor) -> None:
        """Bring added ``rows`` (on the CPU; ``on_device``: the same on the rows' device) up to the current step."""
        if rows.numel():
            slots = self._slots(rows)
            self.embedding.added.index_copy_(0, on_device, self._pay(slots, self.steps))
            self.paid = (rows, slots)  # the step that follows uses the same rows: it need not look their slots up again

    def forgive(self) -> None:
        """Take every row as up to date with the current step (its values were just set from a snapshot)."""
        self.row_step[: self.used] = self.steps
        self.decayed_to = self.steps

    def pay_all(self) -> None:
        """Bring every added row up to the current step: those with state through :meth:`_pay`, the rest decayed."""
        import math

        added = self.embedding.added
        with torch.no_grad():
            if self.used:
                slots = torch.arange(self.used, device=added.device)
                behind = slots[self.row_step[: self.used] < self.steps]
                for start in range(0, behind.numel(), 4096):
                    part = behind[start : start + 4096]
                    added.index_copy_(0, self.row_of[part], self._pay(part, self.steps))
            factor = math.exp(float(self.log_keep[self.steps] - self.log_keep[self.decayed_to]))
            if factor != 1.0:
                # The rows no batch has used only decay; a chunk at a time, so a million rows are never copied whole.
                for start in range(0, added.shape[0], 16384):
                    chunk = added[start : start + 16384]
                    untouched = to_device(self.slot_of[start : start + 16384] < 0, added.device)
                    chunk[untouched] = chunk[untouched] * factor
            self.decayed_to = self.steps  # where rows that get their first slot later start from

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        group = self.param_groups[0]
        lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        self._record(lr, (beta1, beta2), decay)
        rows = self.embedding.loaded_on_host
        active = self.embedding.active
        if rows is None or rows.numel() == 0 or active.grad is None:
            return
        t = self.steps
        k = rows.numel()
        # load_rows brought these rows up to date with step t - 1, and pay() found their slots.
        slots = self.paid[1] if self.paid is not None and self.paid[0] is rows else self._slots(rows)
        grad = active.grad[:k].float()
        param = active.data[:k]
        m = self.exp_avg[slots].lerp_(grad, 1 - beta1)
        v = self.exp_avg_sq[slots].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        # torch.optim.AdamW's arithmetic (decoupled decay, then the Adam step) at the global step t.
        step_size = lr / (1 - beta1**t)
        bias2_sqrt = (1 - beta2**t) ** 0.5
        param.mul_(1 - lr * decay)
        param.addcdiv_(m, (v.sqrt() / bias2_sqrt).add_(eps), value=-step_size)
        self.exp_avg[slots] = m
        self.exp_avg_sq[slots] = v
        self.row_step[slots] = t
        self.embedding.store_rows()

    def state_size_rows(self) -> int:
        """How many rows have optimizer state (the rows training has used so far)."""
        return self.used

    def state_dict(self) -> dict[str, Any]:
        """The base optimizer's state (learning rate, betas), the per-row moments and steps, and the step history.

        Only the ``used`` slots and the steps taken are exported, as copies: a slice of the grown
        tables would drag their whole storage into a saved file.
        """
        # The rows are saved as they are, owed moves and all: a resumed run pays them exactly when the
        # uninterrupted one does (bringing rows up to date earlier would round differently).
        state = super().state_dict()
        used, steps = self.used, self.steps
        state["rows"] = {
            "slot_of": self.slot_of.detach().cpu().clone(),
            "row_of": self.row_of[:used].detach().cpu().clone(),
            "exp_avg": self.exp_avg[:used].detach().cpu().clone(),
            "exp_avg_sq": self.exp_avg_sq[:used].detach().cpu().clone(),
            "row_step": self.row_step[:used].detach().cpu().clone(),
            "log_keep": self.log_keep[: steps + 1].clone(),
            "owed_rate": self.owed_rate[: steps + 1].clone(),
            "steps": torch.tensor([steps, self.decayed_to]),
        }
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        rows = state.pop("rows", None)
        if isinstance(rows, dict) and "row_steps" in rows:
            raise ValueError(
                "this checkpoint was written by an earlier greenadapt, whose row-wise optimizer left unused rows alone; "
                "it cannot be continued with this one (start the run again without --resume)"
            )
        names = ("slot_of", "row_of", "exp_avg", "exp_avg_sq", "row_step", "log_keep", "owed_rate", "steps")
        if not isinstance(rows, dict) or set(rows) != set(names):
            raise ValueError("not a RowAdamW state: the per-row state is missing")
        slot_of, row_of, exp_avg, exp_avg_sq, row_step, log_keep, owed_rate, steps = (rows[k] for k in names)
        used = exp_avg.shape[0]
        dim = self.embedding.embedding_dim
        taken, decayed_to = (int(x) for x in steps.tolist())
        if (
            slot_of.shape != self.slot_of.shape
            or exp_avg.shape != (used, dim)
            or exp_avg_sq.shape != (used, dim)
            or row_step.shape != (used,)
            or row_of.shape != (used,)
            or (used and int(slot_of.max()) >= used)
            or log_keep.shape != (taken + 1,)
            or owed_rate.shape != (taken + 1,)
            or not 0 <= decayed_to <= taken
        ):
            raise ValueError(f"RowAdamW state for {slot_of.shape[0]} added rows of width {exp_avg.shape[-1]} does not fit this embedding")
        super().load_state_dict(state)
        device = self.embedding.added.device
        self.slot_of = slot_of.to(device="cpu", dtype=torch.long).clone()
        self.row_of = row_of.to(device=device, dtype=torch.long).clone()
        self.exp_avg = exp_avg.to(device=device, dtype=self.exp_avg.dtype).clone()
        self.exp_avg_sq = exp_avg_sq.to(device=device, dtype=self.exp_avg_sq.dtype).clone()
        self.row_step = row_step.to(device=device, dtype=torch.long).clone()
        self.log_keep = log_keep.to(device=device, dtype=torch.float64).clone()
        self.owed_rate = owed_rate.to(device=device, dtype=torch.float64).clone()
        self.used, self.steps, self.decayed_to = used, taken, decayed_to
        self.paid = None  # slots found before this state was loaded no longer hold


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
    log.info("word embeddings: %d original rows (%s), %d added rows trained row-wise", n_base, "trained" if mode == "all" else "frozen",
             n_rows - n_base)
    return split


def merge_back(model: Any) -> None:
    """Replace a SplitWordEmbedding by a plain nn.Embedding holding all rows (for saving)."""
    split = model.get_input_embeddings()
    if not isinstance(split, SplitWordEmbedding):
        return
    merged = nn.Embedding.from_pretrained(split.merged_weight(), freeze=False, padding_idx=split.padding_idx)
    model.set_input_embeddings(merged)
