"""How the adaptation stages find each other: the upstream folder a stage reads (the w2v folder an align folder read,
the other word2vec draws an expand averages), the model it was made with, and the folder names and recorded options
of a method."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.adaptation.methods import DEFAULT_METHOD, InitMethod, options_for
from greenadapt.adaptation.methods.lstsq import MAP_FILE, fit_linear_map, mean_cosine  # noqa: E402,F401
from greenadapt.adaptation.methods.random import COV_FILE, MEAN_FILE, gaussian_rows  # noqa: E402,F401
from greenadapt.artifacts import kinds
from greenadapt.artifacts.manifest import Manifest, load_stage, manifest_identity, recorded_input_path, same_identity
from greenadapt.errors import InputError, StageError, UsageError

if TYPE_CHECKING:

    from greenadapt.adaptation.domain_tokenizer import GeneralTokenizer
    from greenadapt.artifacts.pretrained import ModelRef


log = logging.getLogger(__name__)


def locate_upstream(
    kind: str,
    explicit: Path | None,
    corpus: Sequence[str] | None,
    model: str | None,
    workdir: Path | None,
) -> Path:
    """The folder of upstream stage ``kind``: given explicitly, or found in the workspace by corpus (and model)."""
    from greenadapt.artifacts.pretrained import resolve_model
    from greenadapt.artifacts.workspace import find_stage_dir
    from greenadapt.artifacts.workspace import workdir as workspace_root

    if explicit is not None and corpus:
        raise UsageError(f"pass either --{kind} or --corpus, not both")
    if explicit is not None:
        return Path(explicit)
    if not corpus:
        raise UsageError("no input given", hint=f"pass --{kind} DIR, or --corpus NAME to find it in the workspace")
    from greenadapt.artifacts.workspace import model_folder_name

    root = workspace_root(workdir)
    slug = model_folder_name(root, list(corpus), resolve_model(model)) if model else None
    return find_stage_dir(root, list(corpus), slug, kind)


def model_for_stage(spec: str | None, recorded: Any, stage_dir: Path) -> ModelRef:
    """``--model`` if given, else the model an upstream manifest recorded (its ``ModelRef.identity()``)."""
    from greenadapt.artifacts.pretrained import DEFAULT_MODEL_NAME, ModelRef, resolve_model

    if spec:
        return resolve_model(spec)
    if not isinstance(recorded, Mapping) or not recorded.get("model"):
        raise StageError(
            "the upstream manifest does not record which model it was made for",
            path=stage_dir / "manifest.json",
            hint="pass --model",
        )
    path = Path(str(recorded.get("path", "")))
    if recorded.get("path") and (path / "config.json").is_file():
        return ModelRef(str(recorded["model"]), path)
    name = str(recorded["model"])
    log.info("model folder %s is gone; resolving %s again", path, name)
    return resolve_model(None if name == DEFAULT_MODEL_NAME else name)


def check_normalization(general: GeneralTokenizer, w2v_manifest: Manifest, w2v_dir: Path, ref: ModelRef) -> None:
    """The word2vec words must be normalized exactly as the model normalizes text."""
    config = w2v_manifest.config
    if "lowercase" not in config:
        log.warning("%s records no normalization; assuming it matches %s", w2v_dir, ref.name)
        return
    lowercase = bool(config["lowercase"])
    strip = config.get("strip_accents")
    used = {"lowercase": lowercase, "strip_accents": lowercase if strip is None else bool(strip)}
    wanted = general.normalization()
    if used != wanted:
        raise InputError(
            f"word2vec was trained on text normalized with {_describe(used)}, "
            f"but model {ref.name} normalizes with {_describe(wanted)}",
            path=w2v_dir,
            hint=f"rerun `greenadapt w2v --model {ref.name}`, or pass the --model that w2v used",
        )


def _describe(norm: Mapping[str, bool]) -> str:
    return f"lowercase={norm['lowercase']}, strip_accents={norm['strip_accents']}"


def vocab_digest(general: GeneralTokenizer) -> str:
    """Names the tokenizer's vocabulary, so expand can tell whether a model matches the one aligned to."""
    entries = sorted((i, t) for t, i in list(general.vocab.items()) + list(general.added.items()))
    return hashlib.sha256("\n".join(f"{i}\t{t}" for i, t in entries).encode("utf-8")).hexdigest()[:16]


def stage_suffix(method: InitMethod, options: Any) -> str:
    """How the default align and expand folders of a method are told apart: "" for the paper's lstsq,
    ``-focus``, ``-lstsq-match-norm``, ``-focus-<hash of its options>`` when they differ from the defaults."""
    from greenadapt.artifacts.manifest import canonical_json

    chosen = recorded_options(method, options)
    norm = "-match-norm" if chosen.pop("match_norm", False) else ""
    name = "" if method.name == DEFAULT_METHOD and not norm else f"-{method.name}"
    from greenadapt.adaptation.settings import AlignSettings

    if chosen == recorded_options(method, AlignSettings()):  # the methods' options at their declared defaults
        return f"{name}{norm}"
    return f"{name}{norm}-{hashlib.sha256(canonical_json(chosen).encode()).hexdigest()[:8]}"


def recorded_options(method: InitMethod, options: Any) -> dict[str, Any]:
    """The method options align's config records: those the method uses, and --match-norm when on. ``options``: the command's
    MethodSettings (align's, adapt's), as it is."""
    chosen = options_for(method, options)
    if not chosen.get("match_norm"):
        chosen.pop("match_norm", None)
    return chosen


def w2v_of_align(align_dir: Path, align_manifest: Manifest) -> tuple[Path, Manifest]:
    """The w2v folder align read, checked to be unchanged since."""
    recorded = next((i for i in align_manifest.inputs if i.get("stage") == "w2v"), None)
    if recorded is None or not recorded.get("path"):
        raise StageError("the align manifest names no w2v input", path=align_dir, hint="rerun `greenadapt align --force`")
    w2v_dir = recorded_input_path(recorded, align_dir)
    w2v_manifest = load_stage(w2v_dir, "w2v")
    if not same_identity(manifest_identity(w2v_dir, w2v_manifest), recorded):
        raise StageError(
            "the w2v output changed after align read it",
            path=w2v_dir,
            hint="rerun `greenadapt align ... --force` before expand",
        )
    return w2v_dir, w2v_manifest


def other_draws(also_align: Sequence[Path], align_dir: Path, fitted: InitMethod, ref: ModelRef) -> list[tuple[Path, Manifest, Path]]:
    """(align folder, its manifest, its w2v folder) of each other draw, checked to be the same fit of another draw."""
    if also_align and fitted.vector_source != "word2vec":
        raise UsageError(f"--method {fitted.name} uses no word2vec vectors: there are no draws to average",
                         hint="average word2vec draws of lstsq, focus, hybrid or identity")
    draws = []
    seen = {align_dir.resolve()}
    for other in also_align:
        other = Path(other)
        manifest = load_stage(other, kinds.ALIGN)
        if other.resolve() in seen:
            raise UsageError("the same align folder is named twice", path=other, hint="name each word2vec draw's align folder once")
        seen.add(other.resolve())
        if str(manifest.config.get("method", DEFAULT_METHOD)) != fitted.name:
            raise UsageError(f"this draw was aligned with --method {manifest.config.get('method')}, not {fitted.name}", path=other,
                             hint="average draws of one method")
        recorded = manifest.config.get("model")
        if isinstance(recorded, dict) and recorded.get("path") and Path(str(recorded["path"])).resolve() != Path(ref.path).resolve():
            raise UsageError(f"this draw was aligned for another model ({recorded['path']})", path=other,
                             hint="average draws aligned for the same --model")
        w2v_dir, _ = w2v_of_align(other, manifest)
        draws.append((other, manifest, w2v_dir))
    return draws
