"""What every API function shares: how a path argument may be given."""

from __future__ import annotations

import os

PathLike = str | os.PathLike[str]
