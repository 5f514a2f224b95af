"""`greenadapt report`: cost, alignment quality, training curves and results of run folders."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from greenadapt.cli import app
from greenadapt.cli._common import QuietOption, VerboseOption, setup_logging


@app.command("report")
def report_command(
    runs: list[Path] = typer.Argument(..., metavar="RUN",
                                      help="Run folders: a workspace run (<workdir>/<corpus>/<model>), stage or finetune output folders."),
    html: Path | None = typer.Option(None, "--html", help="Also write a self-contained HTML page (plots embedded) here."),
    as_json: bool = typer.Option(False, "--json", help="Print the report's data as JSON instead of Markdown."),
    quiet: bool = QuietOption,
    verbose: bool = VerboseOption,
) -> None:
    """Summarise run folders: stage cost (time, energy, CO2) beside the paper's, alignment, results, curves."""
    setup_logging(quiet=quiet, verbose=verbose)
    from greenadapt.artifacts.destination import check_report_output
    from greenadapt.redaction import scrub_secrets
    from greenadapt.report import collect, markdown, write_html

    if html is not None:
        check_report_output(html)
    data = collect(runs)
    if html is not None:
        write_html(data, html)
    if as_json:
        sys.stdout.write(scrub_secrets(json.dumps(data, indent=2, default=str) + "\n"))
    else:
        from greenadapt.errors import escape_controls

        # text read from run folders reaches the terminal without its control characters (line breaks kept)
        page = "\n".join(escape_controls(line) for line in markdown(data).rstrip("\n").split("\n"))
        sys.stdout.write(scrub_secrets(page + "\n"))
    sys.stdout.flush()
