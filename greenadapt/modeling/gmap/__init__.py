"""G-MAP: a frozen general model's hidden states as memory of a domain model.

Wan et al., EMNLP 2022 (``../shared/DESIGN-NOTES.md`` §2). In chosen layers of
the domain model, the self-attention also attends to a *memory*: hidden
states of a frozen general model, projected by that layer's own key and value
matrices and appended to its keys and values.

Modules: ``config`` (:class:`GmapConfig`, the strategies, their default
layers and which general hidden states each fused layer reads; import-free so
the CLI can use it), ``layer`` (:class:`MemoryAttention`, the wrapper around a
layer's self-attention), ``model`` (:class:`GmapModel`: domain + general
model, save/reload), ``cache`` (:class:`MemoryCache`: the general model's
hidden states per example on disk, for ``--gmap-cache``), ``general_model``
(which general model, and whether it fits the domain model), ``settings``
(the fine-tuning commands' G-MAP options), ``wiring`` (the general model's
inputs in ``finetune`` and ``predict``; building and reloading the fused model).

Kept import-free so ``greenadapt --help`` does not load torch.
"""

from __future__ import annotations
