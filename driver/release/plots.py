"""Matplotlib PNGs of a release: per table, throughput vs devices (with ideal scaling) and
efficiency vs devices, one line per series (framework; per device model too where a table holds
several), as DLPerf's report figures. The legend stands right of the axes, one entry per series
and one each for the ideal and all-reduce-bound lines every series draws in its colour."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from driver.core.footnotes import series_name
from driver.core.report import tables
from driver.core.summary import CaseSummary, baseline_of
from driver.release.compute import Computed
from driver.release.readme import plot_files

# Series are told by colour and marker together: ten colours and seven markers, cycled at once
# (7 and 10 share no factor: 70 series before a pair repeats).
MARKERS = ("o", "s", "D", "^", "v", "P", "X")
IDEAL_LABEL = "ideal (1n1g x devices), in each series' colour"
BOUND_LABEL = "all-reduce bound (probe), in each series' colour"


def _series(group: list[CaseSummary]) -> dict[str, list[CaseSummary]]:
    """Lines of one table, by series; where the table holds several device models, a series
    per model too (one line never joins two machines)."""
    models = {s.device_model for s in group}
    out: dict[str, list[CaseSummary]] = defaultdict(list)
    for s in group:
        name = series_name(s)
        out[f"{name} on {s.device_model}" if len(models) > 1 else name].append(s)
    for items in out.values():
        items.sort(key=lambda s: (s.case.topology.world_size, s.case.topology.nodes))
    return dict(out)


def _style(index: int) -> dict[str, Any]:
    return {"color": f"C{index % 10}", "marker": MARKERS[index % len(MARKERS)]}


def render_plots(computed: Computed, out_dir: Path) -> list[str]:
    """Write every plot under ``out_dir``; returns their paths relative to it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[str] = []
    for title, group in tables(computed.summaries):
        throughput_file, efficiency_file = plot_files(title)
        labels = sorted(
            {
                (s.case.topology.world_size, s.case.topology.nodes, s.case.topology.label)
                for s in group
            }
        )
        x_of = {label: i for i, (_d, _n, label) in enumerate(labels)}
        ticks = [label for _d, _n, label in labels]
        series = _series(group)
        axes = (x_of, ticks, title)
        _plot_throughput(plt, series, axes, out_dir / throughput_file)
        written.append(throughput_file)
        _plot_efficiency(plt, computed, group, series, axes, out_dir / efficiency_file)
        written.append(efficiency_file)
    return written


def _plot_throughput(
    plt: Any,
    series: dict[str, list[CaseSummary]],
    axes: tuple[dict[str, int], list[str], str],
    path: Path,
) -> None:
    """Samples/s against the topology, min-max bars, and perfect scaling from each series'
    baseline; ``axes``: each topology's x position, the tick labels, the title."""
    from matplotlib.lines import Line2D

    x_of, ticks, title = axes
    fig, ax = _figure(plt)
    has_ideal = False
    for index, (name, items) in enumerate(series.items()):
        style = _style(index)
        color = style["color"]
        xs = [x_of[s.case.topology.label] for s in items]
        ax.plot(xs, [s.stats.median for s in items], "-", **style, label=name)
        low = [s.stats.median - s.stats.minimum for s in items]
        high = [s.stats.maximum - s.stats.median for s in items]
        ax.errorbar(
            xs,
            [s.stats.median for s in items],
            yerr=[low, high],
            fmt="none",
            ecolor=color,
            capsize=3,
        )
        base = baseline_of(items[0], items)
        if base is not None:
            ax.plot(
                xs,
                [base.stats.median * s.case.topology.world_size for s in items],
                "--",
                color=color,
                alpha=0.5,
            )
            has_ideal = True
    ylabel = "samples/s (median, min-max bars)"
    extra = [Line2D([], [], color="grey", linestyle="--", alpha=0.7)] if has_ideal else []
    _finish(fig, ax, ticks, ylabel, title, path, extra, [IDEAL_LABEL])


def _plot_efficiency(
    plt: Any,
    computed: Computed,
    group: list[CaseSummary],
    series: dict[str, list[CaseSummary]],
    axes: tuple[dict[str, int], list[str], str],
    path: Path,
) -> None:
    """Scaling efficiency (%) against the topology, with each case's scaling bound."""
    from matplotlib.lines import Line2D

    x_of, ticks, title = axes
    fig, ax = _figure(plt)
    ax.axhline(100, color="grey", linewidth=0.8, linestyle=":")
    has_bound = False
    for index, (name, items) in enumerate(series.items()):
        style = _style(index)
        xs, ys = _percents(x_of, items, lambda s: s.efficiency)
        if xs:
            ax.plot(xs, ys, "-", **style, label=name)
        xs, ys = _percents(x_of, items, lambda s: computed.rows[s.key].scaling_bound)
        if xs:
            ax.plot(
                xs, ys, "_", color=style["color"], markersize=14, markeredgewidth=2, alpha=0.7
            )
            has_bound = True
    shown = _percents(x_of, group, lambda s: s.efficiency)[1]
    shown += _percents(x_of, group, lambda s: computed.rows[s.key].scaling_bound)[1]
    ax.set_ylim(
        max(0.0, min([50.0, *(v - 5 for v in shown)])), max([110.0, *(v + 5 for v in shown)])
    )
    bound = Line2D([], [], color="grey", marker="_", markersize=14, markeredgewidth=2, ls="")
    ylabel = "scaling efficiency (%)"
    extra = [bound] if has_bound else []
    _finish(fig, ax, ticks, ylabel, title, path, extra, [BOUND_LABEL])


def _percents(
    x_of: dict[str, int], items: list[CaseSummary], value: Callable[[CaseSummary], float | None]
) -> tuple[list[int], list[float]]:
    """x positions and percentages of the items whose ``value`` is known."""
    known = [(x_of[s.case.topology.label], v) for s in items if (v := value(s)) is not None]
    return [x for x, _v in known], [100 * v for _x, v in known]


def _figure(plt: Any) -> tuple[Any, Any]:
    """A figure whose layout leaves the legend its own column right of the axes."""
    return plt.subplots(figsize=(10, 4.6), dpi=100, layout="constrained")


def _finish(
    fig: Any,
    ax: Any,
    ticks: list[str],
    ylabel: str,
    title: str,
    path: Path,
    extra_handles: list[Any],
    extra_labels: list[str],
) -> None:
    """Axes, labels and legend the two plots share; then the file, and the figure closed.

    The legend stands outside the axes, right of them, so that it never covers a point: one
    entry per series, then one for the lines every series draws alike (ideal scaling, the
    all-reduce bound), drawn in grey and named once.
    """
    import matplotlib.pyplot as plt

    ax.set_xticks(range(len(ticks)), ticks)
    ax.set_xlabel("nodes / devices")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(
        handles + extra_handles,
        labels + extra_labels[: len(extra_handles)],
        loc="outside right upper",
        fontsize=7,
        frameon=False,
    )
    _save(fig, path)
    plt.close(fig)


def _save(fig: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})  # type: ignore[attr-defined]
