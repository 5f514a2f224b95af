"""``greenadapt report``: run folders → a Markdown summary, JSON, or one self-contained HTML page.

>>> data = collect(["greenadapt-work/cord19/all-minilm-l6-v2"])
>>> print(markdown(data))
>>> write_html(data, Path("report.html"))

The page shows every stage's cost (wall, CPU/GPU hours, peak memory, kWh,
CO₂ and how the energy was obtained), the adaptation cost beside the
paper's published figures, alignment quality with its neighbour tables,
the results of fine-tuning runs grouped by configuration (mean ± std over
seeds, per pooling mode) and training curves. Figures are PNGs embedded as
``data:`` URIs, so the file can be mailed or archived alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from greenadapt.reporting.collection import collect as collect
    from greenadapt.reporting.render import markdown as markdown

__all__ = ["collect", "markdown", "render_html", "write_html"]

log = logging.getLogger(__name__)


def __getattr__(name: str) -> Any:
    # The report's code is loaded on first use: every command declares itself at start-up, `report` from
    # greenadapt.reporting.settings, which must not bring the collector and renderer along.
    if name == "collect":
        from greenadapt.reporting.collection import collect

        return collect
    if name == "markdown":
        from greenadapt.reporting.render import markdown

        return markdown
    raise AttributeError(f"module 'greenadapt.reporting' has no attribute {name!r}")


def render_html(data: Mapping[str, Any]) -> str:
    from greenadapt.reporting.render import figure_specs, html_page

    figures = {}
    for key, make in figure_specs(data).items():
        figures[key] = make()
    return html_page(data, figures)


def write_html(data: Mapping[str, Any], path: Path) -> Path:
    """Render and write the page atomically (readers never see half a file)."""
    from greenadapt.artifacts.files import atomic_write_text
    from greenadapt.artifacts.stage import resource_errors
    from greenadapt.redaction import scrub_secrets

    page = render_html(data)
    path = Path(path)
    with resource_errors(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, scrub_secrets(page), user_path=True)
    log.info("report: %s (%d KiB)", path, len(page) // 1024)
    return path
