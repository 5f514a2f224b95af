"""Where the benches find the real data sets: ``../shared/data`` beside the checkout, or ``$GREENADAPT_SHARED_DATA``.

One place for every bench (a bench run as ``python bench/NAME.py`` has this folder first on ``sys.path``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

SHARED_DATA = Path(os.environ.get("GREENADAPT_SHARED_DATA", Path(__file__).resolve().parent.parent.parent / "shared" / "data"))


def run_bench(main: Callable[[], object]) -> None:
    """Run a bench's ``main``; a missing data set or model, or a greenadapt refusal, ends it in one line (exit 1) naming
    what is missing and where the benches look, not in a traceback (GREENADAPT_DEBUG=1 shows the traceback)."""
    import subprocess
    import sys

    from greenadapt.errors import GreenAdaptError

    try:
        main()
    except (GreenAdaptError, FileNotFoundError, subprocess.CalledProcessError) as error:
        if os.environ.get("GREENADAPT_DEBUG") == "1":
            raise
        if isinstance(error, FileNotFoundError):
            said = f"{error.filename}: not found"
        elif isinstance(error, subprocess.CalledProcessError):
            said = f"a step exited {error.returncode} ({' '.join(map(str, error.cmd))[:120]}…)"
        else:
            said = error.one_line()
        sys.exit(f"error: {said} (the benches read the data sets from {SHARED_DATA}: set GREENADAPT_SHARED_DATA to their folder)")
