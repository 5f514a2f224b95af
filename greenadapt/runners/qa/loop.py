"""QA fine-tuning as a task of the training runtime (:mod:`greenadapt.training.runtime`).

Every question is featurised under each tokenizer once; in epoch e all its
windows come from T̂ with probability ``mix`` (a fresh draw per question and
epoch, as in ``greenadapt finetune``), otherwise from T_LM. Batches are
length-grouped windows; the loss is transformers' QA loss, (start + end) / 2,
averaged over the windows of the global batch. One process.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from greenadapt.machine.devices import to_device
from greenadapt.runners.qa.features import Features
from greenadapt.compute.batches import choose_views, length_grouped_batches, pad_rows, padded_width
from greenadapt.training.config import filled
from greenadapt.training.finetuning import FinetuneLoopSettings
from greenadapt.training.runtime import TrainingHooks, TrainingTask, run_training
from greenadapt.training.trainer import Trainer


def drawn_views(n_views: int, mix: float) -> list[int]:
    """The views an epoch can draw: general unless ``mix`` is 1, domain when ``mix`` > 0. With mix 1 the
    general windows are never drawn, so they must not stretch the epochs either."""
    return [v for v in range(n_views) if (v == 0 and mix < 1) or (v == 1 and mix > 0)]


class QaTask(TrainingTask):
    """Start/end-position training on windows; each question's windows all come from the tokenizer its epoch drew."""

    label = "fine-tuning (qa)"

    def __init__(self, trainer: Trainer[FinetuneLoopSettings], views: list[Features], n_questions: int, *, pad_id: int) -> None:
        self.trainer, self.views, self.n_questions, self.pad_id = trainer, views, n_questions, pad_id
        self.mix = trainer.config.mix or 0.0
        self.used = drawn_views(len(views), self.mix)
        self.rows: list[tuple[int, int]] = []
        self.lengths = np.zeros(0, np.int64)
        self.batch_rows: list[tuple[int, int]] = []
        self.widest = max((len(ids) for view in views for ids in view.input_ids), default=1)

    def epoch_batches(self, epoch: int, step: int) -> list[np.ndarray]:
        config, views = self.trainer.config, self.views
        chosen = choose_views(self.n_questions, self.mix, config.seed, epoch)
        self.rows = [(v, int(r)) for v in self.used for r in np.flatnonzero(chosen[views[v].question_index] == v)]
        self.lengths = np.array([len(views[v].input_ids[r]) for v, r in self.rows])
        return length_grouped_batches(self.lengths, filled(config.batch_size), config.seed, epoch)

    def parts(self, trainer: Trainer[FinetuneLoopSettings], batch: np.ndarray) -> list[Any] | None:
        parts = super().parts(trainer, batch)
        if parts is not None:
            self.batch_rows = [self.rows[i] for i in batch]
            trainer.load_rows([self.views[v].input_ids[r] for v, r in self.batch_rows if v == 1])
        return parts

    def loss(self, part: np.ndarray) -> Any:
        import torch

        trainer = self.trainer
        width = padded_width(int(self.lengths[part].max()), trainer.config.pad_to_multiple, self.widest)
        inputs, starts, ends = collate_windows(self.views, [self.rows[i] for i in part], self.pad_id, trainer.ctx.device, width)
        output = trainer.module(**inputs)
        cross_entropy = torch.nn.functional.cross_entropy
        summed = (cross_entropy(output.start_logits.float(), starts, reduction="sum")
                  + cross_entropy(output.end_logits.float(), ends, reduction="sum"))
        # transformers' QA loss, (start + end) / 2 averaged over the batch, taken over the global batch.
        return summed * trainer.ctx.world / (2 * len(self.batch_rows))

    def record(self, batch: np.ndarray) -> dict[str, Any]:
        in_domain = sum(v for v, _ in self.batch_rows)
        return {"windows": len(batch), "domain_windows": in_domain, "wordpieces": int(self.lengths[batch].sum())}

    def counts(self, batch: np.ndarray) -> dict[str, int]:
        return {"domain_windows": sum(v for v, _ in self.batch_rows), "seen_windows": len(batch)}

    def weights(self) -> dict[str, Any]:
        return dict(self.trainer.model.state_dict())

    def load_weights(self, state: dict[str, Any]) -> None:
        self.trainer.model.load_state_dict(state)


def train_qa(
    model: Any,
    views: list[Features],
    n_questions: int,
    n_base_rows: int,
    config: FinetuneLoopSettings,
    device: Any,
    hooks: TrainingHooks,
) -> dict[str, Any]:
    """Train ``model`` on the windows of ``views``; with ``hooks.checkpoint``, resumable as finetune is (``--save-every``,
    ``--save-minutes``, SIGTERM, ``--resume``)."""
    import numpy as np

    from greenadapt.compute.distributed import DistContext
    from greenadapt.training.finetuning import finish_model, prepare_trainer

    mix = config.mix or 0.0
    used = drawn_views(len(views), mix)
    longest = max(len(ids) for features in views for ids in features.input_ids)
    n_windows = max(len(views[v].input_ids) for v in used)
    trainer = prepare_trainer(model, config, DistContext(device=device), n_examples=n_windows, longest=longest, n_base_rows=n_base_rows)
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    run = run_training(trainer, QaTask(trainer, views, n_questions, pad_id=pad_id), hooks)
    finish_model(model)
    seen = run.counts.get("seen_windows", 0)
    return {
        "steps": run.steps,
        "epochs": run.epochs_run,
        "first_loss": run.losses[0],
        "last_loss": float(np.mean(run.losses[-10:])),
        "train_seconds": round(run.seconds, 2),
        "domain_fraction": round(run.counts.get("domain_windows", 0) / seen, 4) if seen else 0.0,
        "warnings": list(run.warnings),
    }


def collate_windows(views: list[Features], batch: list[tuple[int, int]], pad_id: int, device: Any,
                    width: int | None = None) -> tuple[dict[str, Any], Any, Any]:
    """Padded model inputs of ``(view, window)`` rows (``width`` wide, default the longest's), and their start and end
    positions."""
    import numpy as np

    ids, types, mask = pad_rows([(views[v].input_ids[r], views[v].token_type_ids[r]) for v, r in batch], pad_id, width)
    starts = np.array([views[v].start_positions[r] for v, r in batch], dtype=np.int64)
    ends = np.array([views[v].end_positions[r] for v, r in batch], dtype=np.int64)

    def to(array: np.ndarray) -> Any:
        return to_device(array, device)

    inputs = {"input_ids": to(ids), "token_type_ids": to(types), "attention_mask": to(mask)}
    if views[batch[0][0]].memory_ids is not None:
        # G-MAP: the general model's own input of each window (its own length).
        memory = [(views[v].memory_ids[r], views[v].memory_type_ids[r]) for v, r in batch]  # type: ignore[index]
        general_ids, general_types, general_mask = pad_rows(memory, pad_id)
        inputs.update(general_input_ids=to(general_ids), general_token_type_ids=to(general_types), general_attention_mask=to(general_mask))
    return inputs, to(starts), to(ends)
