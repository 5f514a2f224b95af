"""`greenadapt info`: what a folder is (stage, method, sizes, figures, parents, scores, cost)."""

from __future__ import annotations

import json
import sys
from typing import Any

from greenadapt import api
from greenadapt.artifacts.info import InfoSettings
from greenadapt.cli._build import declared_command


def _show(info: dict[str, Any], as_json: bool) -> None:
    from greenadapt.artifacts.info import render
    from greenadapt.errors import StageError

    sys.stdout.write((json.dumps(info, indent=2, default=str) if as_json else render(info)) + "\n")
    sys.stdout.flush()
    # The description is printed either way; the exit status tells a script the folder is corrupt (README: 4).
    redo = "rerun the command that wrote it with --force"
    if "check" in info and not info["check"]["ok"]:
        raise StageError(f"--check failed: {info['check']['problem']}", path=info["path"], hint=redo)
    if info.get("damaged"):
        raise StageError(str(info["manifest"]), path=info["path"], hint=redo)


declared_command(InfoSettings, api.info, _show, example="greenadapt info runs/ncbi --check",
                 help="Describe a folder: stage, method, vocabulary sizes, figures, parent artifacts, scores and cost.")
