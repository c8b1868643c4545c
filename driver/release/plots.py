"""Matplotlib PNGs of a release: per table, throughput vs devices (with ideal scaling) and
efficiency vs devices, one line per series (framework), as DLPerf's report figures."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from driver.core.report import series_name, tables
from driver.core.summary import CaseSummary, baseline_of
from driver.release.compute import Computed
from driver.release.render import plot_files


def _series(group: list[CaseSummary]) -> dict[str, list[CaseSummary]]:
    out: dict[str, list[CaseSummary]] = defaultdict(list)
    for s in group:
        out[series_name(s)].append(s)
    for items in out.values():
        items.sort(key=lambda s: (s.case.topology.world_size, s.case.topology.nodes))
    return dict(out)


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

        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
        for index, (name, items) in enumerate(series.items()):
            color = f"C{index % 10}"
            xs = [x_of[s.case.topology.label] for s in items]
            ax.plot(xs, [s.stats.median for s in items], "o-", color=color, label=name)
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
                    label=f"{name} ideal",
                )
        ylabel = "samples/s (median, min-max bars)"
        _finish(fig, ax, ticks, ylabel, title, out_dir / throughput_file)
        written.append(throughput_file)

        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
        ax.axhline(100, color="grey", linewidth=0.8, linestyle=":")
        for index, (name, items) in enumerate(series.items()):
            color = f"C{index % 10}"
            points = [
                (x_of[s.case.topology.label], s.efficiency)
                for s in items
                if s.efficiency is not None
            ]
            if points:
                ax.plot(
                    [p[0] for p in points],
                    [100 * p[1] for p in points],
                    "o-",
                    color=color,
                    label=name,
                )
            bounds = [
                (x_of[s.case.topology.label], computed.extras[s.case_id].scaling_bound)
                for s in items
            ]
            bounds = [(x, b) for x, b in bounds if b is not None]
            if bounds:
                ax.plot(
                    [b[0] for b in bounds],
                    [100 * b[1] for b in bounds],
                    "v",
                    color=color,
                    alpha=0.6,
                    label=f"{name} all-reduce bound",
                )
        shown = [100 * s.efficiency for s in group if s.efficiency is not None]
        shown += [
            100 * b
            for s in group
            if (b := computed.extras[s.case_id].scaling_bound) is not None
        ]
        ax.set_ylim(
            max(0.0, min([50.0, *(v - 5 for v in shown)])), max([110.0, *(v + 5 for v in shown)])
        )
        _finish(fig, ax, ticks, "scaling efficiency (%)", title, out_dir / efficiency_file)
        written.append(efficiency_file)
    return written


def _finish(fig: Any, ax: Any, ticks: list[str], ylabel: str, title: str, path: Path) -> None:
    """Axes, labels and legend the two plots share; then the file, and the figure closed."""
    import matplotlib.pyplot as plt

    ax.set_xticks(range(len(ticks)), ticks)
    ax.set_xlabel("nodes / devices")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _save(fig: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})  # type: ignore[attr-defined]
