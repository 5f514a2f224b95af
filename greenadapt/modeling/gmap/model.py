"""GmapModel: a domain model whose chosen layers attend to a frozen general model's hidden states.

The domain model is any BERT-style transformers model, with any head
(``AutoModelFor*``); the general model is a bare encoder (``AutoModel``)
with the same hidden size and possibly its own tokenizer, so it gets its own
``general_input_ids`` / ``general_attention_mask``; the memory length then
differs from the query length, which memory-attention allows.

Frozen (the default, and what the paper found best) means: the general
model's parameters have ``requires_grad=False``, it runs in eval mode (no
dropout) whatever mode the GmapModel is in, and under ``torch.no_grad()``,
so no gradient is ever computed for or through it. The gates (one
``Linear(hidden, 1)`` per fused layer of the gated and chunk strategies) are
the only new parameters.

A saved G-MAP model is a folder holding the domain model as an ordinary
transformers checkpoint (it loads without G-MAP, minus the memory), the
gates in ``gmap_gates.safetensors``, ``gmap_config.json`` (strategy,
resolved layers, which general states each layer reads, and the general
model's name and weights fingerprint) and, after ``--gmap-unfrozen``
training, the fine-tuned general model in ``gmap-general/``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from greenadapt.errors import GreenAdaptError, ModelError, UsageError
from greenadapt.modeling.gmap.config import CONFIG_FILE, CONFIG_FORMAT, GATES_FILE, GENERAL_DIR, FusionPlan, GmapConfig
from greenadapt.modeling.gmap.layer import GeneralMemory, MemoryAttention, unwrap_layer, wrap_layer

if TYPE_CHECKING:
    from greenadapt.modeling.gmap.cache import MemoryCache

log = logging.getLogger(__name__)


class GmapModel(nn.Module):
    """A domain model fused with a general model's hidden states (G-MAP).

    Construction wraps the fused layers' attention modules of ``domain_model``
    in place (:meth:`unwrap` restores them) and freezes ``general_model``
    unless ``config.unfrozen``.
    """

    def __init__(self, domain_model: Any, general_model: Any, config: GmapConfig) -> None:
        super().__init__()
        layers = encoder_layers(domain_model, "domain")
        n_general = _n_layers(general_model, "general")
        domain_hidden, general_hidden = _hidden_size(domain_model), _hidden_size(general_model)
        if domain_hidden != general_hidden:
            raise ModelError(
                f"the general model's hidden size {general_hidden} differs from the domain model's {domain_hidden}",
                hint="G-MAP projects general states with the domain model's key/value matrices; pick a general model of the same width",
            )
        self.gmap_config = config
        self.plan: FusionPlan = config.plan(len(layers), n_general)
        self.domain = domain_model
        self.general = general_model
        reference = next(domain_model.parameters())
        self.gates = nn.ModuleDict()
        if self.plan.gated:
            for layer in self.plan.layers:
                gate = nn.Linear(domain_hidden, 1, device=reference.device, dtype=reference.dtype)
                # Zero init: every fused layer starts from the plain mean of its
                # general states instead of a random preference among them.
                nn.init.zeros_(gate.weight)
                nn.init.zeros_(gate.bias)
                self.gates[_gate_key(layer)] = gate
        self._wrappers: dict[int, MemoryAttention] = {
            layer: wrap_layer(layers[layer - 1], name=f"domain layer {layer}") for layer in self.plan.layers
        }
        self.general.requires_grad_(config.unfrozen)
        self.fusion_enabled = True
        self.memory_cache: MemoryCache | None = None
        self._fingerprint: str | None = None
        self.train(domain_model.training)
        log.info("G-MAP %s", self.plan.describe())

    # ----------------------------------------------------------------- modes

    @property
    def config(self) -> Any:
        """The domain model's transformers config, so code written for the bare model (``num_labels``) keeps working."""
        return self.domain.config

    def get_input_embeddings(self) -> nn.Module:
        return self.domain.get_input_embeddings()

    def train(self, mode: bool = True) -> GmapModel:
        super().train(mode)
        if not self.gmap_config.unfrozen:
            self.general.eval()  # frozen: never dropout, whatever the domain model does
        return self

    def trainable_parameters(self) -> list[nn.Parameter]:
        """What the optimizer should update: domain model and gates (and the general model when unfrozen)."""
        return [p for p in self.parameters() if p.requires_grad]

    @contextlib.contextmanager
    def fusion_disabled(self) -> Iterator[None]:
        """Run the domain model alone (the general model is not called)."""
        previous, self.fusion_enabled = self.fusion_enabled, False
        try:
            yield
        finally:
            self.fusion_enabled = previous

    def use_cache(self, folder: str | os.PathLike[str], *, dtype: Any = None) -> None:
        """Keep the general hidden states per example under ``folder`` (``--gmap-cache``)."""
        from greenadapt.modeling.gmap.cache import MemoryCache

        if self.gmap_config.unfrozen:
            raise UsageError("--gmap-cache needs a frozen general model", hint="drop --gmap-unfrozen or --gmap-cache")
        self.memory_cache = MemoryCache(
            Path(folder),
            fingerprint=self.general_fingerprint(),
            state_indices=self.plan.state_indices,
            hidden_size=_hidden_size(self.general),
            dtype=dtype if dtype is not None else torch.float32,
        )

    # --------------------------------------------------------------- forward

    def forward(
        self,
        *,
        general_input_ids: torch.Tensor | None = None,
        general_attention_mask: torch.Tensor | None = None,
        general_token_type_ids: torch.Tensor | None = None,
        memory: GeneralMemory | None = None,
        **domain_inputs: Any,
    ) -> Any:
        """The domain model's output (logits, loss with labels, ...) with the general memory fused in.

        ``domain_inputs`` go to the domain model unchanged (``input_ids``,
        ``attention_mask``, ``token_type_ids``, ``labels``, ...). The general
        model reads ``general_*`` (its own tokenization of the same text), or
        pass a precomputed ``memory``.
        """
        if not self.fusion_enabled:
            return self.domain(**domain_inputs)
        if self.training and _checkpointing(self.domain):
            # Checkpointed layers re-run their forward during backward, after
            # the memory of this pass has been detached from the layers.
            raise UsageError("G-MAP does not support gradient checkpointing", hint="disable gradient checkpointing")
        if memory is None:
            if general_input_ids is None:
                raise ValueError("GmapModel.forward needs general_input_ids (or a precomputed memory)")
            memory = self.general_memory(general_input_ids, general_attention_mask, general_token_type_ids)
        self._attach(memory)
        try:
            return self.domain(**domain_inputs)
        finally:
            self._detach()

    def general_memory(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> GeneralMemory:
        """The general states the fused layers read, from the cache when one is attached."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if self.memory_cache is not None:
            return self.memory_cache.memory(self, input_ids, attention_mask, token_type_ids)
        return self.run_general(input_ids, attention_mask, token_type_ids)

    def run_general(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> GeneralMemory:
        """Run the general model (no cache): frozen under no_grad, unfrozen with gradients."""
        inputs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        grad = contextlib.nullcontext() if self.gmap_config.unfrozen else torch.no_grad()
        with grad:
            output = self.general(**inputs, output_hidden_states=True)
        hidden = output.hidden_states
        expected = self.plan.n_general + 1
        if hidden is None or len(hidden) != expected:
            got = "no" if hidden is None else str(len(hidden))
            raise ModelError(f"the general model returned {got} hidden states, expected {expected} (embeddings + every layer)")
        states = torch.stack([hidden[i] for i in self.plan.state_indices])
        return GeneralMemory(states, attention_mask.to(states.device).bool(), self.plan.state_indices)

    def _attach(self, memory: GeneralMemory) -> None:
        for layer, wrapper in self._wrappers.items():
            chosen = memory.states[memory.slots(self.plan.states[layer])]
            if self.plan.gated:
                gate: Any = self.gates[_gate_key(layer)]
                chosen = chosen.to(gate.weight.device, gate.weight.dtype)
                # Softmax over the general states, per token: each position
                # mixes the layers its own way (the paper's token-level gate).
                weights = torch.softmax(gate(chosen).squeeze(-1).float(), dim=0).to(chosen.dtype)
                fused = (weights[..., None] * chosen).sum(dim=0)
            else:
                fused = chosen[0]
            wrapper.set_memory(fused, memory.mask)

    def _detach(self) -> None:
        for wrapper in self._wrappers.values():
            wrapper.set_memory(None)

    # --------------------------------------------------------- housekeeping

    def unwrap(self) -> nn.Module:
        """The domain model with its original attention modules back (the G-MAP wrappers removed)."""
        layers = encoder_layers(self.domain, "domain")
        for layer in self._wrappers:
            unwrap_layer(layers[layer - 1])
        self._wrappers = {}
        return self.domain

    @contextlib.contextmanager
    def _originals(self) -> Iterator[None]:
        """The original attention modules in place for a while (saving writes transformers' own modules)."""
        layers = encoder_layers(self.domain, "domain")
        for layer in self._wrappers:
            unwrap_layer(layers[layer - 1])
        try:
            yield
        finally:
            for layer, wrapper in self._wrappers.items():
                layers[layer - 1].attention.self = wrapper

    def general_fingerprint(self) -> str:
        """sha256 of the general model's weights (cached while frozen: they cannot change)."""
        if self.gmap_config.unfrozen or self._fingerprint is None:
            self._fingerprint = weights_fingerprint(self.general)
        return self._fingerprint

    def general_identity(self) -> dict[str, Any]:
        name = self.gmap_config.general_model or getattr(self.general, "name_or_path", None) or None
        if name is not None and Path(name).is_dir():
            name = str(Path(name).resolve())
        general_config = getattr(self.general, "config", None)
        return {
            "model": name,
            "model_type": getattr(general_config, "model_type", None),
            "num_hidden_layers": self.plan.n_general,
            "hidden_size": _hidden_size(self.general),
            "fingerprint": self.general_fingerprint(),
        }

    def describe(self) -> dict[str, Any]:
        """What ``gmap_config.json`` holds (and what a stage manifest should record)."""
        resolved = replace(self.gmap_config, layers=self.plan.layers)
        return {
            "format": CONFIG_FORMAT,
            "gmap": resolved.to_dict(),
            "plan": self.plan.to_dict(),
            "general": self.general_identity(),
            "domain": {"architecture": type(self.domain).__name__},
        }

    def save_pretrained(self, folder: str | os.PathLike[str]) -> None:
        """Domain model (an ordinary transformers checkpoint), gates, gmap_config.json; the general model if unfrozen."""
        from safetensors.torch import save_file

        from greenadapt.artifacts.files import write_json
        from greenadapt.artifacts.stage import resource_errors

        out = Path(folder)
        with resource_errors(out):
            out.mkdir(parents=True, exist_ok=True)
            with self._originals():
                self.domain.save_pretrained(str(out))
            if self.plan.gated:
                tensors = {k: v.detach().to("cpu").contiguous() for k, v in self.gates.state_dict().items()}
                save_file(tensors, str(out / GATES_FILE), metadata={"format": "pt"})
            if self.gmap_config.unfrozen:
                self.general.save_pretrained(str(out / GENERAL_DIR))
            write_json(out / CONFIG_FILE, self.describe())

    @classmethod
    def from_pretrained(
        cls,
        folder: str | os.PathLike[str],
        general_model: str | os.PathLike[str] | nn.Module | None = None,
        *,
        domain_class: Any = None,
        verify_general: bool = True,
        **load_kwargs: Any,
    ) -> GmapModel:
        """Reload a saved G-MAP model, in eval mode.

        ``general_model``: the general model (folder, Hub id or a loaded
        model); default the one recorded at saving (or ``gmap-general/`` of
        an unfrozen run). Its weights must match the recorded fingerprint
        unless ``verify_general`` is False. ``load_kwargs`` (``dtype``,
        ``attn_implementation``, ...) go to both ``from_pretrained`` calls.
        """
        import transformers

        src = Path(folder)
        doc = read_gmap_config(src)
        config_path = src / CONFIG_FILE
        try:
            config = GmapConfig.from_dict(doc["gmap"])
            recorded = doc["general"]
            architecture = doc["domain"]["architecture"]
        except (KeyError, TypeError, GreenAdaptError) as exc:
            detail = exc.message if isinstance(exc, GreenAdaptError) else f"missing {exc}"
            raise ModelError(f"malformed G-MAP configuration: {detail}", path=config_path) from None

        if isinstance(general_model, nn.Module):
            general = general_model
            source = getattr(general, "name_or_path", None) or recorded.get("model")
        else:
            if general_model is not None:
                source = os.fspath(general_model)
            elif config.unfrozen:
                source = str(src / GENERAL_DIR)
            else:
                source = recorded.get("model")
            if not source:
                raise ModelError("the G-MAP model does not record its general model", path=config_path, hint="pass --general-model")
            general = _load(transformers.AutoModel, source, load_kwargs, role="general")
        if verify_general and recorded.get("fingerprint"):
            if recorded["fingerprint"] not in (weights_fingerprint(general), weights_fingerprint(general, used_only=False)):
                raise ModelError(
                    f"the general model {source} is not the one this G-MAP model was trained with (weights differ)",
                    path=config_path,
                    hint=f"pass the general model used for fine-tuning ({recorded.get('model')}) with --general-model",
                )

        if domain_class is None:
            domain_class = getattr(transformers, str(architecture), None)
            if domain_class is None:
                raise ModelError(f"unknown domain architecture {architecture!r}", path=config_path, hint="upgrade transformers")
        domain = _load(domain_class, str(src), load_kwargs, role="domain")
        # An unfrozen run's general model is its own fine-tuned copy; the name
        # to keep is the model that training started from.
        name = recorded.get("model") if config.unfrozen else source
        model = cls(domain, general, replace(config, general_model=name))
        if model.plan.to_dict() != doc.get("plan", model.plan.to_dict()):
            raise ModelError("the recorded G-MAP layer plan does not match the models' depths", path=config_path)
        if model.plan.gated:
            model._load_gates(src / GATES_FILE)
        return model.eval()

    def _load_gates(self, path: Path) -> None:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        if not path.is_file():
            raise ModelError("the G-MAP gate weights are missing", path=path, hint="the folder is incomplete; save it again")
        try:
            tensors = load_file(str(path))
            self.gates.load_state_dict(tensors, strict=True)
        except (SafetensorError, RuntimeError) as exc:
            raise ModelError(f"cannot load the G-MAP gate weights: {_first_line(exc)}", path=path) from None


def read_gmap_config(folder: Path) -> dict[str, Any]:
    """``gmap_config.json`` of a saved G-MAP model, or a ModelError saying why not."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise ModelError(f"not a G-MAP model folder (no {CONFIG_FILE})", path=folder, hint="save it with GmapModel.save_pretrained")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"cannot read the G-MAP configuration: {exc}", path=path) from None
    if not isinstance(doc, dict) or doc.get("format") != CONFIG_FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else None
        raise ModelError(f"unsupported G-MAP configuration format {found!r}", path=path, hint="was it written by a newer greenadapt?")
    return doc


def encoder_layers(model: nn.Module, role: str) -> Any:
    """The transformer layers of a BERT-style model (``<base>.encoder.layer``, an ``nn.ModuleList`` of
    transformers layers), with or without a head."""
    base = getattr(model, "base_model", model)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise ModelError(
            f"the {role} model ({type(model).__name__}) has no BERT-style encoder.layer list",
            hint="G-MAP supports BERT-style encoders (BERT, RoBERTa, ELECTRA, XLM-R)",
        )
    return layers


def weights_fingerprint(model: nn.Module, *, used_only: bool = True) -> str:
    """sha256 over the state-dict entries' names, dtypes, shapes and bytes: of those G-MAP reads (``used_only``: every
    entry but the pooler's, which G-MAP never runs, and which ``AutoModel`` draws at random on every load of a
    checkpoint without one, as RoBERTa-style checkpoints are), or of every entry (the fingerprint runs recorded before)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        if used_only and (name.startswith("pooler.") or ".pooler." in name):
            continue
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(flat.view(torch.uint8).numpy())
    return digest.hexdigest()


def _n_layers(model: nn.Module, role: str) -> int:
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    if not isinstance(n, int) or n < 1:
        raise ModelError(f"the {role} model ({type(model).__name__}) does not say how many layers it has")
    return n


def _hidden_size(model: nn.Module) -> int:
    size = getattr(getattr(model, "config", None), "hidden_size", None)
    if not isinstance(size, int):
        raise ModelError(f"the model ({type(model).__name__}) does not say its hidden size")
    return size


def _checkpointing(model: nn.Module) -> bool:
    # transformers 5 renamed the flag (the old name warns); read whichever this release has.
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def _gate_key(layer: int) -> str:
    return f"layer{layer}"


def _load(auto: Any, source: str, kwargs: dict[str, Any], *, role: str) -> nn.Module:
    try:
        return auto.from_pretrained(source, **kwargs)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise ModelError(
            f"cannot load the {role} model: {_first_line(exc)}", path=source, hint=f"pass a transformers model folder as the {role} model"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


__all__ = ["GeneralMemory", "GmapModel", "encoder_layers", "read_gmap_config", "weights_fingerprint"]
