"""The cells and tables of a report, in Markdown and HTML: numbers as people read them, intervals, images."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def num(value: Any, digits: int = 3) -> str:
    """A number for a table cell: integers with separators, others with about ``digits`` significant digits."""
    if value is None:
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or (abs(value) >= 100 and float(value).is_integer()):
        return f"{int(value):,}"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return plain(value, digits)


def plain(value: float, digits: int = 3) -> str:
    """About ``digits`` significant digits in plain decimals, never scientific notation (0.000123, not 1.23e-04)."""
    if value == 0:
        return "0"
    if abs(value) >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    decimals = digits - 1 - math.floor(math.log10(abs(value)))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def html_table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: Callable[[int], bool] = lambda i: False) -> str:
    # Wide tables scroll sideways inside their own box on a phone instead of widening the whole page.
    out = ['<div class="scroll"><table><thead><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for row in rows:
        cells = "".join(
            f'<td class="n">{html.escape(c)}</td>' if numeric(i) else f"<td>{html.escape(c)}</td>" for i, c in enumerate(row)
        )
        out.append(f"<tr>{cells}</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def img(png: bytes | None, alt: str) -> str:
    if png is None:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def signed(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.2f}"


def interval(pair: Mapping[str, Any], key: str) -> str:
    found = pair.get(key)
    return f"[{signed(found[0])}, {signed(found[1])}]" if found else "-"
