"""What every training runner resolves before it reads data, written once: finetune (its labelling tasks and QA),
multitask and pretrain call :func:`prepare_runner`; the fine-tuning runners record what it resolved in their stage's
fingerprint with :meth:`RunnerSetup.record` (pretrain records its corpora's identities instead of data files'). Each
then opens :func:`greenadapt.training.job.training_stage` with its settings as they are (device, --resume,
checkpoints)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from greenadapt.artifacts.destination import check_run_destination
from greenadapt.artifacts.files import file_identity
from greenadapt.artifacts.model_folder import ExpandedModel, TokenizerPair
from greenadapt.artifacts.model_identity import identity_of_model
from greenadapt.artifacts.pretrained import ModelRef, resolve_model
from greenadapt.artifacts.workspace import workdir as resolve_workdir

if TYPE_CHECKING:
    from greenadapt.modeling.gmap.wiring import GmapSetup
    from greenadapt.options import Run


class ModelSettings(Protocol):
    """What :func:`prepare_runner` reads of a training command's settings (G-MAP's options too, when it has them)."""

    @property
    def model(self) -> str | None: ...


@dataclass(frozen=True)
class RunnerSetup:
    """The model a run trains from, where the run goes, and G-MAP's general model (None without ``--gmap``)."""

    ref: ModelRef
    folder: ExpandedModel
    out: Path
    identity: dict[str, Any]  # what the stage records of the model: every file, the general tokenizer's too
    gmap: GmapSetup | None

    @property
    def tokenizers(self) -> TokenizerPair:
        return self.folder.tokenizers

    def record(self, config: Mapping[str, Any], files: Iterable[tuple[str, str | os.PathLike[str]]]
               ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The stage's config and inputs: the model's identity, each data file's (role, path), G-MAP's general model."""
        config = dict(config)
        inputs = [self.identity, *({"role": role, **file_identity(path)} for role, path in files)]
        if self.gmap is not None:
            # Only G-MAP runs record it, so the fingerprints of runs without it do not change.
            config["gmap"] = self.gmap.settings.gmap_record(self.gmap.general)
            inputs.append({"role": "general", **identity_of_model(self.gmap.general)})
        return config, inputs


def prepare_runner(settings: ModelSettings, run: Run, *, kind: str,
                   data: Iterable[str | os.PathLike[str] | None], default_out: Callable[[ModelRef], Path]) -> RunnerSetup:
    """Resolve ``settings.model``, choose and check the output folder (``run.out``, else ``default_out``), check the
    model's weights load safely, open its tokenizers and G-MAP's general model: all before any data is read."""
    from greenadapt.modeling.gmap.settings import GmapSettings
    from greenadapt.modeling.gmap.wiring import prepare

    ref = resolve_model(settings.model)
    out = Path(run.out) if run.out is not None else default_out(ref)
    check_run_destination(out, kind=kind, force=run.force, model=ref.path, data=data, workdir=run.workdir)
    identity = identity_of_model(ref)
    folder = ExpandedModel.open(ref)
    gmap = None  # pretrain fuses G-MAP into its masked-LM model itself (--gmap with --general-model)
    if isinstance(settings, GmapSettings):
        gmap = prepare(settings, ref, folder.tokenizers.general, cache_root=resolve_workdir(run.workdir) / "cache")
    return RunnerSetup(ref, folder, out, identity, gmap)
