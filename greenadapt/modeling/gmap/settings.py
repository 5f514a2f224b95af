"""G-MAP's options for the fine-tuning commands (``finetune``, ``multitask``), declared once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from greenadapt.options import MODEL, PERFORMANCE, Settings, option

if TYPE_CHECKING:
    from greenadapt.modeling.gmap.options import GmapOptions


@dataclass(frozen=True, kw_only=True)
class GmapSettings(Settings):
    gmap: str = option("none", "--gmap", panel=MODEL,
                       help="G-MAP: fuse a frozen general model's hidden states as memory: none, single, multi, gated or chunk (the paper's best).")
    gmap_layers: str | None = option(None, "--gmap-layers", panel=MODEL,
                                     help='Fused domain layers, 1-based, e.g. "6,12" (default per strategy: single/gated ⌈3L/4⌉, chunk L/2 and L, multi all).')
    general_model: str | None = option(None, "--general-model", panel=MODEL,
                                       help="G-MAP general model (default for an expanded model: the model it was expanded from).")
    gmap_unfrozen: bool = option(False, "--gmap-unfrozen", panel=MODEL, help="G-MAP ablation: train the general model too.")
    gmap_indexing: str = option("reference", "--gmap-indexing", panel=MODEL, metavar="NAME",
                                help="G-MAP: which general states multi/gated read: reference (the reference code: layer l-1, states 0..G) "
                                     "or paper (M^l: layer l, states 1..G).")
    gmap_cache: bool = option(False, "--gmap-cache", panel=PERFORMANCE,
                              help="Cache the frozen general model's hidden states on disk (<workdir>/cache/gmap) across epochs.")

    def gmap_options(self) -> GmapOptions:
        from greenadapt.modeling.gmap.options import GmapOptions

        return GmapOptions.from_cli(self.gmap, self.gmap_layers, self.general_model, self.gmap_unfrozen, self.gmap_cache, self.gmap_indexing)
