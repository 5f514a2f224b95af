"""`greenadapt report`: cost, alignment quality, training curves and results of run folders."""

from __future__ import annotations

import json
import sys
from typing import Any

from greenadapt import api
from greenadapt.cli._build import declared_command
from greenadapt.reporting.settings import ReportSettings


def _show(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        return
    from greenadapt.errors import escape_controls
    from greenadapt.reporting import markdown

    # text read from run folders reaches the terminal without its control characters (line breaks kept)
    sys.stdout.write("\n".join(escape_controls(line) for line in markdown(data).rstrip("\n").split("\n")) + "\n")


declared_command(ReportSettings, api.report, _show, example="greenadapt report runs/compare-ncbi --html compare.html",
                 help="Summarise run folders: stage cost (time, energy, CO2) beside the paper's, alignment, results, curves.")
