"""driver.release.plots: figures a person reads at a glance, with ten series and more."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from driver.core.summary import CaseSummary, baseline_of
from driver.model.case import Case, Topology
from driver.model.measure import case_stats
from driver.release import plots
from driver.release.compute import Computed

PNG = b"\x89PNG\r\n\x1a\n"
TOPOLOGIES = (Topology(1, 1), Topology(1, 2), Topology(1, 4), Topology(2, 8))
# Ten series: five frameworks, each with its default and a named variant.
SERIES = [(f, v) for f in ("pytorch", "tensorflow", "paddle", "mxnet", "oneflow")
          for v in ("default", "graph")]  # fmt: skip


def summary(
    framework: str, variant: str, topology: Topology, rate: float, device: str, scaling: float
) -> Any:
    case = Case(
        model="resnet50", framework=framework, topology=topology, batch_size=64,
        precision="fp32", dataset="synthetic", variant=variant,
    )  # fmt: skip
    per_device = rate * topology.world_size**scaling  # sub-linear, as measured ones scale
    throughputs = [per_device * 0.98, per_device, per_device * 1.03]
    return CaseSummary(
        case=case, stats=case_stats(throughputs), batch_size=64, speedup=None,
        efficiency=None, throughputs=throughputs, devices=[device],
    )  # fmt: skip


def computed(summaries: list[CaseSummary], bound: float | None = 0.95) -> Computed:
    for s in summaries:
        base = baseline_of(s, summaries)
        if base is not None:
            s.speedup = s.stats.median / base.stats.median
            s.efficiency = s.speedup / s.case.topology.world_size
    extras = {
        s.key: s.row(scaling_bound=bound if s.case.topology.world_size > 1 else None)
        for s in summaries
    }
    return Computed(summaries, [], extras, {}, {})


def ten_series(device: str = "NVIDIA A100-SXM4-40GB") -> list[CaseSummary]:
    return [
        summary(framework, variant, topology, 100.0 + 40 * index, device, 0.8 + 0.02 * index)
        for index, (framework, variant) in enumerate(SERIES)
        for topology in TOPOLOGIES
    ]


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every figure render_plots saves, kept open for the test (saved as it would be)."""
    kept: list[Any] = []
    save = plots._save

    def keep(fig: Any, path: Path) -> None:
        save(fig, path)
        fig.canvas.draw()  # the layout as the file has it
        kept.append(fig)

    monkeypatch.setattr(plots, "_save", keep)
    monkeypatch.setattr("matplotlib.pyplot.close", lambda fig=None: None)
    return kept


def legend_entries(fig: Any) -> list[str]:
    (legend,) = fig.legends
    return [text.get_text() for text in legend.get_texts()]


def test_ten_series_get_a_legend_clear_of_the_data_and_one_ideal_entry(
    tmp_path: Path, figures: list[Any]
) -> None:
    out = Path(os.environ.get("DLPERF_PLOT_DIR", tmp_path))  # a folder to look at them in
    written = plots.render_plots(computed(ten_series()), out)
    assert len(written) == 2 and all((out / w).read_bytes().startswith(PNG) for w in written)
    throughput, efficiency = figures
    for fig in figures:
        (ax,) = fig.axes
        assert not ax.get_legend()  # none inside the axes
        (legend,) = fig.legends
        box, area = legend.get_window_extent(), ax.get_window_extent()
        assert box.x0 >= area.x1  # right of the axes: it covers no point
        assert box.x1 <= fig.bbox.x1 and box.y0 >= fig.bbox.y0  # and inside the image
    entries = legend_entries(throughput)
    assert entries[:10] == [plots.series_name(s) for s in ten_series()[::4]]
    assert entries[10:] == [plots.IDEAL_LABEL]  # one for every series' ideal line
    dashed = [line for line in throughput.axes[0].get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 10  # yet each series draws its own, in its colour
    assert len({line.get_color() for line in dashed}) == 10
    assert legend_entries(efficiency)[10:] == [plots.BOUND_LABEL]
    # No two series look alike: colour and marker together.
    styles = {(line.get_color(), line.get_marker()) for line in throughput.axes[0].get_lines()
              if line.get_linestyle() == "-"}  # fmt: skip
    assert len(styles) == 10


def test_without_baselines_or_bounds_no_grey_entry_is_shown(
    tmp_path: Path, figures: list[Any]
) -> None:
    multi = [s for s in ten_series() if s.case.topology.world_size > 1]
    plots.render_plots(computed(multi, bound=None), tmp_path)
    throughput, efficiency = figures
    assert plots.IDEAL_LABEL not in legend_entries(throughput)
    assert plots.BOUND_LABEL not in legend_entries(efficiency)


def test_a_table_of_two_machines_draws_a_line_per_machine(
    tmp_path: Path, figures: list[Any]
) -> None:
    two = ten_series()[:8] + ten_series("Tesla V100-SXM2-16GB")[:8]  # 2 series x 2 machines
    plots.render_plots(computed(two), tmp_path)
    entries = legend_entries(figures[0])
    assert entries[:4] == [
        "PyTorch on NVIDIA A100-SXM4-40GB",
        "PyTorch [graph] on NVIDIA A100-SXM4-40GB",
        "PyTorch on Tesla V100-SXM2-16GB",
        "PyTorch [graph] on Tesla V100-SXM2-16GB",
    ]
