"""PALs: projected attention layers for multi-task fine-tuning.

Stickland & Murray, ICML 2019 (``../shared/DESIGN-NOTES.md`` §3). One shared
BERT-style encoder; each task adds a small function in parallel with every
layer: TS(h) = GELU(V_D · MH(V_E · h)) with the encoder V_E (d → s) and the
decoder V_D (s → d) shared across the layers of one task and a multi-head
attention in the s-dimensional space per layer.

Laid out like peft's ``tuners/<method>/``: ``config`` (:class:`PalsConfig`
and the parameter-count formula; import-free), ``layer`` (the per-task
modules and :class:`PalOutput`, the wrapper around a layer's output block),
``model`` (:class:`MultiTaskModel`: the shared encoder, per-task adapters and
heads, save/reload).

Kept import-free so ``greenadapt --help`` does not load torch.
"""

from __future__ import annotations
