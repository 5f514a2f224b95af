"""The report's figures as PNG bytes (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

DPI = 100


def _figure(width: float = 7.0, height: float = 3.2) -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    # A bare Figure (not pyplot): no global state, nothing to close, safe in threads.
    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


# (unit, how many of it make one base unit), smallest first; an axis takes the largest unit its top value is >= 1 in.
ENERGY_UNITS = (("mWh", 1e6), ("Wh", 1e3), ("kWh", 1.0), ("MWh", 1e-3))  # base: kWh
TIME_UNITS = (("ms", 1e3), ("s", 1.0), ("min", 1 / 60), ("h", 1 / 3600), ("days", 1 / 86400))  # base: s


def axis_unit(values: Sequence[float], units: Sequence[tuple[str, float]]) -> tuple[str, float]:
    """The unit (and its factor) a chart axis of these values reads best in: no 1e-5 on the axis."""
    top = max((abs(v) for v in values), default=0.0)
    chosen = units[0]
    for unit in units:
        if top * unit[1] >= 1:
            chosen = unit
    return chosen


def _plain_axis(ax: Any, axis: str) -> None:
    ax.ticklabel_format(axis=axis, style="plain", useOffset=False)


def cost_chart(stages: Sequence[Mapping[str, Any]]) -> bytes | None:
    """Energy and wall time per stage, horizontal bars, each in the unit its largest bar reads best in."""
    rows = [s for s in stages if s["cost"].get("energy_kwh") is not None]
    if not rows:
        return None
    fig = _figure(8.0, max(2.2, 0.32 * len(rows) + 1.2))
    energy, wall = fig.subplots(1, 2, sharey=True)
    labels = [s["name"] for s in rows]
    positions = list(range(len(rows)))
    kwh = [float(s["cost"]["energy_kwh"]) for s in rows]
    seconds = [float(s["cost"].get("wall_seconds") or 0) for s in rows]
    energy_unit, energy_factor = axis_unit(kwh, ENERGY_UNITS)
    time_unit, time_factor = axis_unit(seconds, TIME_UNITS)
    energy.barh(positions, [v * energy_factor for v in kwh], color="#4c9a2a")
    energy.set_yticks(positions, labels, fontsize=7)
    energy.invert_yaxis()
    energy.set_xlabel(f"energy ({energy_unit})")
    wall.barh(positions, [v * time_factor for v in seconds], color="#3b6ea8")
    wall.set_xlabel(f"wall time ({time_unit})")
    for ax in (energy, wall):
        _plain_axis(ax, "x")
    return _png(fig)


MEMORY_UNITS = (("MiB", 1.0), ("GiB", 1 / 1024), ("TiB", 1 / 1024**2))  # base: MiB


def count_label(value: float) -> str:
    """A size on an axis: 560k, 1.7M, 1B."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.2g}{unit}" if value / size < 10 else f"{value / size:.0f}{unit}"
    return f"{value:g}"


def growth_chart(series: Sequence[Mapping[str, Any]]) -> bytes | None:
    """Wall time and peak memory against size, one row of two panels per stage kind (log size axis)."""
    if not series:
        return None
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    fig = _figure(8.0, 2.4 * len(series) + 0.4)
    axes = fig.subplots(len(series), 2, squeeze=False)
    for (time_ax, memory_ax), one in zip(axes, series):
        sizes = [p[0] for p in one["points"]]
        seconds = [p[1] for p in one["points"]]
        time_unit, time_factor = axis_unit(seconds, TIME_UNITS)
        time_ax.plot(sizes, [v * time_factor for v in seconds], "o-", color="#3b6ea8")
        time_ax.set_ylabel(f"wall time ({time_unit})")
        time_ax.set_title(one["label"], fontsize=9)
        measured = [(p[0], float(p[2])) for p in one["points"] if isinstance(p[2], int | float)]
        memory_unit, memory_factor = axis_unit([m[1] for m in measured], MEMORY_UNITS)
        if measured:
            memory_ax.plot([m[0] for m in measured], [m[1] * memory_factor for m in measured], "s-", color="#4c9a2a")
        memory_ax.set_ylabel(f"peak memory ({memory_unit})")
        memory_ax.set_title(one["label"], fontsize=9)
        for ax in (time_ax, memory_ax):
            ax.set_xscale("log")
            # The measured sizes themselves as ticks: a few points, and no 4×10⁶ crowding between decades.
            ax.xaxis.set_major_locator(FixedLocator(sorted(set(sizes))))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: count_label(value)))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel(str(one["size"]))
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
    return _png(fig)


def results_chart(rows: Sequence[Mapping[str, Any]], title: str) -> bytes | None:
    """Mean ± std of the primary metric, one bar per group and pooling mode."""
    fig = results_figure(rows, title)
    return None if fig is None else _png(fig)


def results_figure(rows: Sequence[Mapping[str, Any]], title: str) -> Any:
    """The figure of :func:`results_chart`: a bar of a single seed has no error bar and is labelled n=1."""
    if not rows:
        return None
    groups = list(dict.fromkeys(r["group"] for r in rows))
    pools = list(dict.fromkeys(r["pool"] for r in rows))
    fig = _figure(max(5.0, 1.1 * len(groups) + 2), 3.4)
    ax = fig.subplots()
    width = 0.8 / max(1, len(pools))
    scale = 100.0 if max(abs(r["mean"]) for r in rows) <= 1 else 1.0
    colours = ["#3b6ea8", "#4c9a2a", "#c9822b", "#8e4ca8"]
    for j, pool in enumerate(pools):
        xs, means, stds, singles = [], [], [], []
        for i, group in enumerate(groups):
            row = next((r for r in rows if r["group"] == group and r["pool"] == pool), None)
            if row is not None:
                xs.append(i + (j - (len(pools) - 1) / 2) * width)
                means.append(row["mean"] * scale)
                stds.append(row["std"] * scale if row.get("n", 1) >= 2 else 0.0)  # a bar of one seed has no spread to show
                singles.append(row.get("n", 1) < 2)
        ax.bar(xs, means, width, yerr=stds if any(stds) else None, capsize=3, label=pool, color=colours[j % len(colours)])
        for x, mean, single in zip(xs, means, singles):
            if single:
                ax.annotate("n=1", (x, mean), textcoords="offset points", xytext=(0, 2), ha="center", fontsize=6)
    ax.set_xticks(range(len(groups)), [g.split("/")[-1] if len(g) > 18 else g for g in groups], fontsize=8, rotation=15)
    ax.set_ylabel(f"{rows[0]['metric']}" + (" (×100)" if scale != 1 else ""))
    ax.set_title(title, fontsize=9)
    ax.legend(title="pooling", fontsize=7, title_fontsize=7)
    return fig


def curve_chart(curves: Sequence[Mapping[str, Any]], title: str) -> bytes | None:
    """Training loss per step (one line per configuration and seed) and, when logged, the dev score."""
    if not any(c["loss"] for c in curves):
        return None
    has_dev = any(c["dev"] for c in curves)
    fig = _figure(7.0, 2.8)
    axes = fig.subplots(1, 2 if has_dev else 1, squeeze=False)[0]
    for curve in curves:
        if curve["loss"]:
            steps, losses = zip(*curve["loss"])
            axes[0].plot(steps, _smooth(losses), linewidth=1, label=_curve_label(curve))
        if has_dev and curve["dev"]:
            steps, scores = zip(*curve["dev"])
            axes[1].plot(steps, scores, marker="o", linewidth=1, label=_curve_label(curve))
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("training loss (smoothed)")
    axes[0].set_title(title, fontsize=9)
    axes[0].legend(fontsize=7)
    if has_dev:
        axes[1].set_xlabel("step")
        axes[1].set_ylabel("dev score")
    return _png(fig)


def _curve_label(curve: Mapping[str, Any]) -> str:
    return f"{curve['group'].rsplit('/', 1)[-1]}, seed {curve['seed']}"


def _smooth(values: Sequence[float], window: int = 10) -> list[float]:
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def accuracy_cost_chart(rows: Sequence[Mapping[str, Any]]) -> bytes | None:
    """Test score against adaptation CPU hours, one point per fine-tuned configuration (error bars where n ≥ 2)."""
    if len(rows) < 2:
        return None
    fig = _figure(6.5, 3.6)
    ax = fig.subplots()
    scale = 100.0 if max(abs(r["mean"]) for r in rows) <= 1 else 1.0
    time_unit, time_factor = axis_unit([r["cpu_hours"] * 3600 for r in rows], TIME_UNITS)
    for row in rows:
        x, y = row["cpu_hours"] * 3600 * time_factor, row["mean"] * scale
        if row["n"] >= 2:
            ax.errorbar(x, y, yerr=row["std"] * scale, fmt="o", capsize=3, color="#3b6ea8")
        else:
            ax.plot(x, y, "o", mfc="white", color="#3b6ea8")
        label = row["group"].split("/")[-1] + ("" if row["n"] >= 2 else " (n=1)")
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7)
    _plain_axis(ax, "both")
    ax.set_xlabel(f"adaptation cost (CPU time, {time_unit})")
    ax.set_ylabel(f"test {rows[0]['metric']}" + (" (×100)" if scale != 1 else ""))
    ax.set_title("accuracy against adaptation cost (mean ± sd over seeds)", fontsize=9)
    return _png(fig)


def forest_plot(pairs: Sequence[Mapping[str, Any]], metric: str) -> bytes | None:
    """Paired differences with their 95% intervals, one row per pair, on an axis that always holds 0.

    The dot is the mean difference over seeds, the thick bar the test-set bootstrap
    interval, the thin bar the interval over seeds; a pair is drawn in colour only
    when every interval it has excludes 0. No absolute scores: a clipped axis under
    bars of absolute scores makes any gap look large.
    """
    if not pairs:
        return None
    fig = _figure(6.4, 0.9 + 0.55 * len(pairs))
    ax = fig.subplots()
    extent = [0.0]
    for row, pair in enumerate(reversed(pairs)):
        y = row
        mean = 100 * pair["mean"]
        colour = "#2a7a3b" if pair.get("significant95") else "#777777"
        seed, boot = pair.get("seed_interval95"), pair.get("bootstrap_interval95")
        if seed:
            ax.plot([100 * seed[0], 100 * seed[1]], [y, y], color=colour, linewidth=1.2)
            extent += [100 * seed[0], 100 * seed[1]]
        if boot:
            ax.plot([100 * boot[0], 100 * boot[1]], [y, y], color=colour, linewidth=5, alpha=0.55, solid_capstyle="butt")
            extent += [100 * boot[0], 100 * boot[1]]
        ax.plot([mean], [y], "o", color=colour, markersize=6)
        extent.append(mean)
    span = max(abs(v) for v in extent) or 1.0
    ax.set_xlim(-1.15 * span, 1.15 * span)
    ax.axvline(0, color="#222222", linewidth=0.8)
    ax.set_yticks(range(len(pairs)), [f"{p['variant']} vs {p['baseline']}" for p in reversed(pairs)], fontsize=8)
    ax.set_ylim(-0.6, len(pairs) - 0.4)
    ax.set_xlabel(f"difference in {metric} (×100): dot mean over seeds, thick bar test-set bootstrap 95%, thin bar seeds 95%", fontsize=7)
    ax.tick_params(axis="x", labelsize=8)
    return _png(fig)
