"""``greenadapt report``'s options, declared once (:mod:`greenadapt.options`), and the function the command and
``greenadapt.report`` both run; import-light, so the command line can declare the command without the report's code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from greenadapt.options import INPUT_OUTPUT, REQUIRED, Settings, option

if TYPE_CHECKING:
    from greenadapt.options import Run


@dataclass(frozen=True, kw_only=True)
class ReportSettings(Settings):
    """``greenadapt report``: summarise run folders (cost beside the paper's, alignment, results, curves)."""

    command = "report"
    positional = ("runs",)
    run_options = ()

    runs: tuple[str, ...] = option(REQUIRED, "--runs", panel=INPUT_OUTPUT, metavar="RUN", argument=True,
                                   help="Run folders: a workspace run (<workdir>/<corpus>/<model>), stage or finetune output folders.")
    html: str | None = option(None, "--html", panel=INPUT_OUTPUT, help="Also write a self-contained HTML page (plots embedded) here.")


def run_report(settings: ReportSettings, run: Run) -> dict[str, Any]:
    """The report's data (what ``--json`` prints); the HTML page written first where ``html`` names one."""
    from pathlib import Path

    from greenadapt.artifacts.destination import check_report_output
    from greenadapt.reporting import collect, write_html

    if settings.html is not None:
        check_report_output(settings.html)
    data = collect([Path(folder) for folder in settings.runs])
    if settings.html is not None:
        write_html(data, Path(settings.html))
    return data
