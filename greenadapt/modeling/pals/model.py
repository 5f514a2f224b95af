"""MultiTaskModel: one shared BERT-style encoder, per-task adapters (PALs) and heads.

The encoder is a bare transformers model (``AutoModel``); every layer's
output block is wrapped by :class:`~greenadapt.modeling.pals.layer.PalOutput`, and
:meth:`MultiTaskModel.set_task` points the wrappers at one task's adapter.
Each task has a head: a linear layer on the pooled output (``classify``:
BERT's pooler when the encoder has one, else the [CLS] state) or on every
token (``ner``). :meth:`MultiTaskModel.task_view` gives a module that runs
one task and returns ``.logits`` like a transformers model, so the
fine-tuning machinery (``collate``, ``output_rows``, pooled inference) runs
on it unchanged.

Saved layout (written by :meth:`save`)::

    base/                     the shared encoder (transformers folder, safetensors)
    pals_config.json          adapter kind, size, heads, and the task list
    tasks/<name>/adapter.safetensors   that task's adapter and head weights
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from greenadapt.errors import ModelError, StageError, UsageError
from greenadapt.modeling.pals.config import (
    ADAPTER_FILE,
    BASE_DIR,
    CONFIG_FILE,
    TASK_TYPES,
    TASKS_DIR,
    PalsConfig,
    adapter_parameters,
    check_task_name,
    head_parameters,
)
from greenadapt.modeling.pals.layer import PalMlp, PalOutput, build_adapter, encoder_layers, unwrap_layer, wrap_layer

NORM_NAMES = ("LayerNorm", "layer_norm", "norm")


@dataclass
class TaskOutput:
    logits: torch.Tensor


class TaskHead(nn.Module):
    def __init__(self, kind: str, hidden: int, n_labels: int, dropout: float, std: float) -> None:
        super().__init__()
        self.kind = kind
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden, n_labels)
        nn.init.normal_(self.classifier.weight, mean=0.0, std=std)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, outputs: Any) -> torch.Tensor:
        if self.kind == "ner":
            return self.classifier(self.dropout(outputs.last_hidden_state))
        pooled = getattr(outputs, "pooler_output", None)
        if pooled is None:
            pooled = outputs.last_hidden_state[:, 0]
        return self.classifier(self.dropout(pooled))


class MultiTaskModel(nn.Module):
    """A shared encoder with one adapter (unless ``adapter == "none"``) and one head per task."""

    def __init__(self, base: Any, config: PalsConfig) -> None:
        super().__init__()
        self.base = base
        self.pals_config = config
        layers = encoder_layers(base)
        if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
            raise ModelError(
                f"{type(base).__name__} has no encoder.layer or layers list", hint="PALs support BERT-style and ModernBERT-style encoders"
            )
        self.n_layers = len(layers)
        self.hidden = int(base.config.hidden_size)
        self.std = float(getattr(base.config, "initializer_range", 0.02))
        self.outputs: list[PalOutput | PalMlp] = []
        if config.adapter != "none":
            self.outputs = [wrap_layer(layer, i, name=f"layer {i}") for i, layer in enumerate(layers)]
        self.adapters = nn.ModuleDict()
        self.heads = nn.ModuleDict()
        self.task_types: dict[str, str] = {}
        self.task_labels: dict[str, int] = {}
        self.active: str | None = None
        self.fusion: nn.Module | None = None  # a GmapModel around ``base`` (G-MAP), when attached

    def attach_fusion(self, fusion: nn.Module) -> None:
        """Run the encoder through ``fusion`` (a :class:`~greenadapt.modeling.gmap.model.GmapModel` whose domain model is ``base``)."""
        if getattr(fusion, "domain", None) is not self.base:
            raise ValueError("the G-MAP model must wrap this model's own encoder")
        self.fusion = fusion

    # -- tasks ----------------------------------------------------------------
    @property
    def tasks(self) -> list[str]:
        return list(self.task_types)

    def add_task(self, name: str, kind: str, n_labels: int) -> None:
        check_task_name(name)
        if name in self.task_types:
            raise UsageError(f"two tasks are named {name!r}", hint="give every task its own name=")
        if kind not in TASK_TYPES:
            raise UsageError(f"unknown task type {kind!r}", hint=f"choose from {', '.join(TASK_TYPES)}")
        config = self.base.config
        dropout = getattr(config, "classifier_dropout", None)
        dropout = float(dropout if dropout is not None else getattr(config, "hidden_dropout_prob", 0.1))
        key = _key(name)
        adapter = build_adapter(self.pals_config, self.hidden, self.n_layers, self.std)
        if adapter is not None:
            self.adapters[key] = adapter
        self.heads[key] = TaskHead(kind, self.hidden, n_labels, dropout, self.std)
        self.task_types[name] = kind
        self.task_labels[name] = n_labels
        self.heads[key].train(self.training)  # new modules follow the model's mode (eval: no dropout)
        if adapter is not None:
            adapter.train(self.training)

    def set_task(self, name: str | None) -> None:
        if name is not None and name not in self.task_types:
            raise UsageError(f"no task {name!r} in this model", hint=f"tasks: {', '.join(self.tasks)}")
        adapter = self.adapters[_key(name)] if name is not None and _key(name) in self.adapters else None
        for output in self.outputs:
            output.set_adapter(adapter)
        self.active = name

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        *,
        task: str,
        **memory: Any,
    ) -> TaskOutput:
        """``memory``: G-MAP's ``general_input_ids`` / ``general_attention_mask`` / ``general_token_type_ids``."""
        self.set_task(task)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        try:
            if self.fusion is not None:
                outputs = self.fusion(**inputs, **memory)
            elif memory:
                raise ValueError("G-MAP memory inputs for a model without G-MAP")
            else:
                outputs = self.base(**inputs)
        finally:
            self.set_task(None)
        return TaskOutput(self.heads[_key(task)](outputs))

    def task_view(self, name: str) -> TaskModel:
        if name not in self.task_types:
            raise UsageError(f"no task {name!r} in this model", hint=f"tasks: {', '.join(self.tasks)}")
        return TaskModel(self, name)

    # -- parameters -----------------------------------------------------------
    def freeze_base(self) -> list[str]:
        """Freeze the shared encoder except its layer norms; returns the names left trainable."""
        trainable = []
        for name, parameter in self.base.named_parameters():
            keep = any(part in NORM_NAMES for part in name.split("."))
            parameter.requires_grad_(keep)
            if keep:
                trainable.append(name)
        return trainable

    def parameter_counts(self) -> dict[str, Any]:
        """Actual counts: base, per task (adapter, head), total and total relative to one base model."""
        base = sum(p.numel() for p in self.base.parameters())
        shared = {id(p) for p in self.base.parameters()}
        fusion = sum(p.numel() for p in self.fusion.parameters() if id(p) not in shared) if self.fusion is not None else 0
        per_task = {}
        for name in self.tasks:
            key = _key(name)
            adapter = sum(p.numel() for p in self.adapters[key].parameters()) if key in self.adapters else 0
            head = sum(p.numel() for p in self.heads[key].parameters())
            per_task[name] = {"adapter": adapter, "head": head, "total": adapter + head}
        total = base + fusion + sum(t["total"] for t in per_task.values())
        counts = {"base": base, "per_task": per_task, "total": total, "relative_to_base": total / base if base else None}
        if self.fusion is not None:
            counts["gmap"] = fusion  # the general model and the gates, shared by all tasks
        return counts

    def expected_task_parameters(self, name: str) -> int:
        """The formula's count for one task (checked against :meth:`parameter_counts` by the tests)."""
        return adapter_parameters(self.pals_config, self.hidden, self.n_layers) + head_parameters(self.hidden, self.task_labels[name])

    # -- saving ---------------------------------------------------------------
    def save(self, folder: Path, *, tasks: Iterable[str] | None = None, save_base: bool = True) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        if save_base:
            self.base.save_pretrained(str(folder / BASE_DIR))
        names = list(tasks) if tasks is not None else self.tasks
        for name in names:
            task_dir = folder / TASKS_DIR / name
            task_dir.mkdir(parents=True, exist_ok=True)
            save_file({k: v.detach().cpu().contiguous() for k, v in self.task_state(name).items()}, str(task_dir / ADAPTER_FILE))
        doc = {
            **self.pals_config.to_json(),
            "tasks": [{"name": n, "type": self.task_types[n], "labels": self.task_labels[n]} for n in names],
        }
        (folder / CONFIG_FILE).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")

    def task_state(self, name: str) -> dict[str, torch.Tensor]:
        key = _key(name)
        state = {f"head.{k}": v for k, v in self.heads[key].state_dict().items()}
        if key in self.adapters:
            state.update({f"adapter.{k}": v for k, v in self.adapters[key].state_dict().items()})
        return state

    def load_task_state(self, name: str, state: dict[str, torch.Tensor]) -> None:
        key = _key(name)
        head = {k[len("head.") :]: v for k, v in state.items() if k.startswith("head.")}
        adapter = {k[len("adapter.") :]: v for k, v in state.items() if k.startswith("adapter.")}
        self.heads[key].load_state_dict(head, strict=True)
        if key in self.adapters:
            self.adapters[key].load_state_dict(adapter, strict=True)
        elif adapter:
            raise StageError(f"task {name!r} holds adapter weights but the model has adapter 'none'")

    @classmethod
    def load(cls, folder: Path, *, tasks: Iterable[str] | None = None, device: Any = "cpu",
             base: nn.Module | None = None) -> MultiTaskModel:
        """The saved model with all its tasks, or only ``tasks``; ``base``: the encoder, already loaded (G-MAP)."""
        import transformers
        from safetensors.torch import load_file

        doc = read_pals_config(folder)
        if base is None:
            base = transformers.AutoModel.from_pretrained(str(folder / BASE_DIR), dtype=torch.float32)
        model = cls(base, PalsConfig.from_json(doc))
        saved = {t["name"]: t for t in doc.get("tasks", [])}
        wanted = list(tasks) if tasks is not None else list(saved)
        for name in wanted:
            if name not in saved:
                raise UsageError(f"no task {name!r} in this multitask model", path=folder, hint=f"tasks: {', '.join(saved)}")
            model.add_task(name, saved[name]["type"], int(saved[name]["labels"]))
            model.load_task_state(name, load_file(str(folder / TASKS_DIR / name / ADAPTER_FILE)))
        model.to(device)
        model.eval()
        return model

    def unwrap(self) -> nn.Module:
        for layer in encoder_layers(self.base):
            unwrap_layer(layer)
        self.outputs = []
        return self.base


class TaskModel(nn.Module):
    """One task of a :class:`MultiTaskModel`, called like a transformers model (``.logits``)."""

    def __init__(self, multi: MultiTaskModel, name: str) -> None:
        super().__init__()
        self.multi = multi
        self.task = name
        self.config = _LabelConfig(multi.task_labels[name])

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, token_type_ids: torch.Tensor | None = None, **memory: Any
    ) -> TaskOutput:
        return self.multi(input_ids, attention_mask, token_type_ids, task=self.task, **memory)


@dataclass
class _LabelConfig:
    num_labels: int


def read_pals_config(folder: Path) -> dict[str, Any]:
    path = folder / CONFIG_FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StageError(f"not a multitask model (no {CONFIG_FILE})", path=folder,
                         hint="pass the folder `greenadapt multitask` wrote") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise StageError(f"unreadable {CONFIG_FILE}: {exc}", path=path) from None
    if not isinstance(doc, dict):
        raise StageError(f"{CONFIG_FILE} is not a JSON object", path=path)
    return doc


def _key(name: str) -> str:
    # A prefix keeps task names such as "train" or "keys" clear of ModuleDict's own attributes.
    return f"t-{name}"


__all__ = ["MultiTaskModel", "TaskModel", "TaskOutput", "check_task_name", "read_pals_config"]
