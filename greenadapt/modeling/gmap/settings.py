"""G-MAP's options for the fine-tuning commands (``finetune``, ``multitask``), declared once: the object
:func:`greenadapt.modeling.gmap.wiring.prepare` receives (``--gmap none``: no fusion).

Import-free (no torch), so the CLI can build and check them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from greenadapt.errors import UsageError
from greenadapt.options import MODEL, PERFORMANCE, Settings, option

if TYPE_CHECKING:
    from greenadapt.artifacts.pretrained import ModelRef
    from greenadapt.modeling.gmap.config import GmapConfig

NONE = "none"


def strategy_name(value: str) -> str:
    """``--gmap``'s strategy, in the one spelling the stages record."""
    from greenadapt.modeling.gmap.config import STRATEGIES

    name = value.strip().lower()
    if name not in (NONE, *STRATEGIES):
        raise UsageError(f"unknown --gmap {value!r}", hint=f"choose from {', '.join((NONE, *STRATEGIES))}")
    return name


@dataclass(frozen=True, kw_only=True)
class GmapSettings(Settings):
    gmap: str = option(NONE, "--gmap", panel=MODEL, check=strategy_name,
                       help="G-MAP: fuse a frozen general model's hidden states as memory: none, single, multi, gated or chunk (the "
                            "paper's best).")
    gmap_layers: str | None = option(None, "--gmap-layers", panel=MODEL,
                                     help='Fused domain layers, 1-based, e.g. "6,12" (default per strategy: single/gated ⌈3L/4⌉, chunk L/2 '
                                          'and L, multi all).')
    general_model: str | None = option(None, "--general-model", panel=MODEL,
                                       help="G-MAP general model (default for an expanded model: the model it was expanded from).")
    gmap_unfrozen: bool = option(False, "--gmap-unfrozen", panel=MODEL, help="G-MAP ablation: train the general model too.")
    gmap_indexing: str = option("reference", "--gmap-indexing", panel=MODEL, metavar="NAME", check=lambda value: value.strip().lower(),
                                help="G-MAP: which general states multi/gated read: reference (the reference code: layer l-1, states 0..G) "
                                     "or paper (M^l: layer l, states 1..G).")
    gmap_cache: bool = option(False, "--gmap-cache", panel=PERFORMANCE,
                              help="Cache the frozen general model's hidden states on disk (<workdir>/cache/gmap) across epochs.")

    @property
    def fuses(self) -> bool:
        """Whether G-MAP is on (``--gmap`` other than none)."""
        return self.gmap != NONE

    @property
    def fused_layers(self) -> tuple[int, ...] | None:
        """``--gmap-layers`` as 1-based layer numbers (None: the strategy's defaults)."""
        from greenadapt.modeling.gmap.config import parse_layers

        return parse_layers(self.gmap_layers) if self.gmap_layers is not None else None

    def check_gmap(self) -> None:
        """``--gmap-*`` options need ``--gmap``; the layers and the indexing make a plan; a cache needs a frozen model."""
        if not self.fuses:
            given = [flag for flag, value in (("--gmap-layers", self.gmap_layers is not None),
                                              ("--general-model", self.general_model is not None),
                                              ("--gmap-unfrozen", self.gmap_unfrozen), ("--gmap-cache", self.gmap_cache),
                                              ("--gmap-indexing", self.gmap_indexing != "reference")) if value]
            if given:
                raise UsageError(f"{', '.join(given)} need(s) --gmap", hint="add --gmap chunk (or single, multi, gated)")
            return
        if self.gmap_unfrozen and self.gmap_cache:
            raise UsageError("--gmap-cache needs a frozen general model: an unfrozen one changes every step",
                             hint="drop --gmap-unfrozen or --gmap-cache")
        self.gmap_config(None)  # validates the layers and the indexing

    def gmap_config(self, general_name: str | None) -> GmapConfig:
        """The fused model's configuration (saved as gmap_config.json)."""
        from greenadapt.modeling.gmap.config import GmapConfig

        return GmapConfig(strategy=self.gmap, layers=self.fused_layers, unfrozen=self.gmap_unfrozen, general_model=general_name,
                          indexing=self.gmap_indexing)

    def gmap_record(self, general: ModelRef | None) -> dict[str, Any] | None:
        """What the stage config records (None without G-MAP, so old runs keep their fingerprints)."""
        if not self.fuses:
            return None
        record = {"strategy": self.gmap, "layers": None if self.fused_layers is None else list(self.fused_layers),
                  "unfrozen": self.gmap_unfrozen,
                  "cache": self.gmap_cache, "general_model": None if general is None else str(general.path)}
        if self.gmap_indexing != "reference":  # only when used: runs made before the option stay up to date
            record["indexing"] = self.gmap_indexing
        return record
