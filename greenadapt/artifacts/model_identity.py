"""What a run records of the model it trains from: one owner for every runner (finetune, QA, multitask, pretrain)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from greenadapt.artifacts import kinds
from greenadapt.artifacts.manifest import load_stage, manifest_identity, read_manifest
from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR
from greenadapt.artifacts.model_weights import check_weights_load_safely
from greenadapt.artifacts.pretrained import ModelRef


def identity_of_model(ref: ModelRef) -> dict[str, Any]:
    """An expanded folder by its expand manifest (its files' SHA-256, the general tokenizer's included); any other by
    its files' sizes and times, and a two-tokenizer folder's ``general-tokenizer/`` files too, so a changed second view
    makes the runs made from it out of date."""
    check_weights_load_safely(ref.path)
    manifest = read_manifest(ref.path)
    if manifest is not None and manifest.get("kind") == kinds.EXPAND:
        return manifest_identity(ref.path, load_stage(ref.path, kinds.EXPAND))
    identity = ref.identity()
    general = ref.path / GENERAL_TOKENIZER_DIR
    if general.is_dir():
        files = {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in sorted(general.iterdir()) if f.is_file()}
        identity["general_tokenizer_digest"] = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    return identity
