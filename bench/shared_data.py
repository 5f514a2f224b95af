"""Where the benches find the real data sets: ``../shared/data`` beside the checkout, or ``$GREENADAPT_SHARED_DATA``.

One place for every bench (a bench run as ``python bench/NAME.py`` has this folder first on ``sys.path``).
"""

from __future__ import annotations

import os
from pathlib import Path

SHARED_DATA = Path(os.environ.get("GREENADAPT_SHARED_DATA", Path(__file__).resolve().parent.parent.parent / "shared" / "data"))
