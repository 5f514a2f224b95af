"""`greenadapt info`: what a folder is (stage, method, sizes, figures, parents, scores, cost)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from greenadapt.cli import app
from greenadapt.cli._common import QuietOption, VerboseOption, setup_logging


@app.command("info")
def info_command(
    path: Path = typer.Argument(..., metavar="PATH",
                                help="A folder greenadapt wrote (w2v, align, expand, finetune, ...) or a model folder."),
    check: bool = typer.Option(False, "--check", help="Also verify every file against the manifest's checksums (reads them all)."),
    as_json: bool = typer.Option(False, "--json", help="Print the description as JSON."),
    quiet: bool = QuietOption,
    verbose: bool = VerboseOption,
) -> None:
    """Describe a folder: stage, method, vocabulary sizes, figures, parent artifacts, scores and cost."""
    setup_logging(quiet=quiet, verbose=verbose)
    from greenadapt.artifacts.info import describe_folder, render

    info = describe_folder(path, check_files=check)
    from greenadapt.redaction import scrub_secrets

    sys.stdout.write(scrub_secrets((json.dumps(info, indent=2, default=str) if as_json else render(info)) + "\n"))
    sys.stdout.flush()
    from greenadapt.errors import StageError

    # The description is printed either way; the exit status tells a script the folder is corrupt (README: 4).
    if check and not info["check"]["ok"]:
        raise StageError(f"--check failed: {info['check']['problem']}", path=path, hint="rerun the command that wrote it with --force")
    if info.get("damaged"):
        raise StageError(str(info["manifest"]), path=path, hint="rerun the command that wrote it with --force")
