"""`greenadapt export --onnx`: a fine-tuned folder as a self-contained ONNX folder to serve without greenadapt."""

from __future__ import annotations

from typing import Any

from greenadapt import api
from greenadapt.cli._build import declared_command
from greenadapt.cli._common import show_stage
from greenadapt.inference.onnx_export import ExportSettings


def _summary(outcome: Any) -> str:
    stats = outcome.manifest.get("stats") or {}
    state = "up to date" if outcome.skipped else "wrote"
    return (f"{state} {outcome.path}: {' and '.join(stats.get('formats') or [])} ONNX of a {stats.get('task')} model with "
            f"{stats.get('views')} view(s); run it with `python {outcome.path}/serve_onnx.py {outcome.path} < text.txt`")


declared_command(ExportSettings, api.export, show_stage(_summary), example="greenadapt export --onnx -m runs/ncbi --out served/ncbi",
                 help="Export a fine-tuned folder to ONNX (fp32 and int8) with its tokenizers and pooling recipe, to serve without "
                      "greenadapt.")
