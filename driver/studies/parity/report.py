"""The result as text: each pair, the median ratio and its spread, what was measured where."""

from __future__ import annotations

from tabulate import tabulate

from driver.core.command import option_text
from driver.studies.parity.records import ParityResult


def variant_label(result: ParityResult) -> str:
    options = ", ".join(f"{k}={option_text(v)}" for k, v in sorted(result.options.items()))
    variant = "" if result.variant == "default" else f" [{result.variant}]"
    return result.precision + variant + (f" ({options})" if options else "")


def format_result(result: ParityResult) -> str:
    """Each pair, then the median ratio and its spread, and what was measured where."""
    rows = [
        [
            pair.round,
            pair.first,
            f"{pair.bare.throughput:.3f}",
            f"{pair.kit.throughput:.3f}",
            f"{pair.ratio:.3f}",
            f"{pair.bare.load_1min:.2f} / {pair.kit.load_1min:.2f}",
            f"{pair.bare.cpu_share:.2f} / {pair.kit.cpu_share:.2f}",
            number_or_dash(pair.share_adjusted_ratio),
            number_or_dash(pair.kit.driver.ms_per_s if pair.kit.driver else None, ".1f"),
        ]
        for pair in result.pairs
    ]
    headers = ["round", "first", "bare samples/s", "kit samples/s", "kit/bare", "load bare/kit",
               "CPU share bare/kit", "kit/bare per CPU share",
               "kit driver CPU ms/s"]  # fmt: skip
    low, high = result.spread
    what = "per-step sync vs boundary-only timing" if result.on_gpu else "harness cost"
    adjusted = result.median_share_adjusted
    lines = [
        f"{result.framework} {result.model} batch {result.batch_size} {variant_label(result)}, "
        f"{result.warmup_steps} warm-up + {result.measured_steps} measured steps, "
        f"{result.threads} threads; {result.machine}",
        tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True),
        f"median kit/bare {result.median_ratio:.3f} over {len(result.pairs)} rounds "
        f"(spread {low:.3f}..{high:.3f}; {what})",
    ]
    if adjusted is not None:
        values = [pair.share_adjusted_ratio or 0.0 for pair in result.pairs]
        lines.append(
            f"median kit/bare per CPU share {adjusted:.3f} (spread {min(values):.3f}.."
            f"{max(values):.3f}; each side's throughput over the share of the cores it got)"
        )
    if result.handed:
        lines.append(
            f"both sides ran the same {len(result.handed)} options of the kit's header "
            f"(case {result.case_id}, profile {result.profile})"
        )
    return "\n".join(lines)


def number_or_dash(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)
