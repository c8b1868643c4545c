"""``dlperf factor``: the effect of one factor, as the TensorFlow benchmark sheets show it.

For a factor with two values A and B (synthetic vs real data, batch 64 vs 32, device type,
machine, model, framework, AMP vs FP32, XLA on vs off, ...), every case with the value A is
paired with the case that has the value B and every other factor equal; each pair gives B/A of
a metric (the median throughput, the speedup or the efficiency), and the table ends with the
median ratio (and the geometric mean), overall and per group of a factor (``--by``) the way the
published sheets show a median column. ``--where factor=value`` keeps only matching cases
(``--where topology=1n1g``, ``--where device=V100``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from statistics import geometric_mean
from typing import Any

from tabulate import tabulate

from driver.analysis.compare import CaseView, Side

FACTORS = (
    "precision",
    "dataset",
    "batch",
    "device",
    "model",
    "framework",
    "xla",
    "topology",
    "variant",
    "source",
    "hardware",
    "machine",
)
# Descriptive factors: not part of "every other factor equal" (hardware is device x devices per
# node, both already compared; the machine a case ran on differs between sessions) unless they
# are the factor studied.
DESCRIPTIVE = ("hardware", "machine")
ALIASES = {
    "amp": "precision",
    "data": "dataset",
    "gpu": "device",
    "batch_size": "batch",
    "host": "machine",
    "system": "machine",
}
METRICS = ("throughput", "speedup", "efficiency")
# Factors whose pairs may set a published figure beside a measured one (your H100 beside a
# published V100); any other factor pairs figures of one publisher, or measured cases only.
CROSS_PUBLISHER = ("device", "hardware", "machine", "source")
# What a case's factors do not hold but its run does, named wherever two paired cases differ in
# them (an H100's bf16 AMP beside DLPerf's fp16 V100 figure is no pure device ratio): AMP's
# autocast dtype, an upstream source's image (its current image beside the pinned code's
# figure: the software its ``current_image.differs`` names), the software versions, the data
# set's identity (``dlperf data``), a Llama case's attention kernel (torchtitan 0.3.0's
# FlexAttention beside its published SDPA figures).
PROVENANCE = ("amp_dtype", "image", "software", "data", "attention")
UNKNOWN = ("unknown", "as published", "no manifest")
_TRUTH = {"true": "on", "1": "on", "yes": "on", "false": "off", "0": "off", "no": "off"}


def normalize_factor(name: str) -> str:
    factor = ALIASES.get(name.lower(), name.lower())
    if factor not in FACTORS:
        raise SystemExit(f"--factor {name!r}: one of {', '.join(FACTORS)}")
    return factor


def _value(view: CaseView, factor: str) -> str:
    return str(view.fields[factor])


def matches(view: CaseView, factor: str, wanted: str) -> bool:
    value = _value(view, factor).lower()
    wanted = wanted.lower()
    if factor == "xla":
        wanted = _TRUTH.get(wanted, wanted)
    if factor in ("device", "hardware", "machine"):
        return wanted in value  # "H100" matches "NVIDIA H100 80GB HBM3"
    return value == wanted


def parse_where(items: Sequence[str]) -> list[tuple[str, str]]:
    """``["topology=1n1g", "device=V100"]`` -> [(factor, value)]; a bad item exits naming it."""
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value:
            raise SystemExit(f"--where {item!r}: give factor=value, e.g. topology=1n1g")
        out.append((normalize_factor(name), value))
    return out


def metric_of(view: CaseView, metric: str) -> float | None:
    if metric == "throughput":
        return view.stats.median
    if metric in ("speedup", "efficiency"):
        return getattr(view, metric)
    raise SystemExit(f"--metric {metric!r}: one of {', '.join(METRICS)}")


def _key_factors(factor: str) -> list[str]:
    """The factors equal in every pair: all but the one studied and the descriptive ones; a
    machine or hardware comes with its device model, so that differs with them too."""
    follows = ("device",) if factor in ("machine", "hardware") else ()
    return [f for f in FACTORS if f != factor and f not in DESCRIPTIVE and f not in follows]


def paired_source(name: str) -> str:
    """The source a case pairs as: one pinned to another release of a source's code pairs as
    that source (``pairs_with``: torchtitan 0.2.2's SDPA cases beside torchtitan's figures)."""
    from driver.sources.upstream import SPECS

    spec = SPECS.get(name)
    return spec.pairs_with if spec is not None and spec.pairs_with else name


def _others(view: CaseView, factor: str) -> tuple:
    return tuple(
        paired_source(_value(view, f)) if f == "source" else _value(view, f)
        for f in _key_factors(factor)
    )


def _published(view: CaseView) -> str:
    return view.published_by or ""


# A pair of cases that differ in the studied factor, and the ratio of their metric (b / a).
Pair = tuple[CaseView, CaseView, float]


def factor_pairs(
    sides: list[Side],
    factor: str,
    a: str,
    b: str,
    where: Sequence[tuple[str, str]] = (),
    metric: str = "throughput",
) -> list[Pair]:
    views = [
        v
        for side in sides
        for v in side.cases.values()
        if all(matches(v, name, value) for name, value in where)
    ]
    b_by_key: dict[tuple, list[CaseView]] = {}
    for view in views:
        if matches(view, factor, b):
            b_by_key.setdefault(_others(view, factor), []).append(view)
    pairs = []
    for view in views:
        if not matches(view, factor, a):
            continue
        for other in b_by_key.get(_others(view, factor), []):
            if other is view:
                continue
            if factor not in CROSS_PUBLISHER and _published(other) != _published(view):
                continue  # a published figure pairs with one of its own publisher
            value_a, value_b = metric_of(view, metric), metric_of(other, metric)
            if value_a and value_b is not None:
                pairs.append((view, other, value_b / value_a))
    pairs.sort(key=lambda p: (p[0].case_id, p[1].case_id))
    return pairs


def also_differs(a: CaseView, b: CaseView, factor: str) -> list[str]:
    """Every factor beyond the one studied in which a pair differs, as ``name: A vs B``: the
    provenance factors, and the descriptive ones (hardware, machine) where they are not what
    the device factor brings with it. A value not known on one side (a published figure's
    software) is a difference too: nothing says it is equal."""
    out = []
    one_publisher = bool(a.published_by) and a.published_by == b.published_by
    for name in PROVENANCE:
        if name == factor or (name == "amp_dtype" and factor == "precision"):
            continue  # AMP vs FP32 brings its dtype with it
        if name == "software" and factor == "framework":
            continue  # PyTorch vs JAX brings its own libraries (each in its environment)
        value_a, value_b = str(a.fields.get(name, "unknown")), str(b.fields.get(name, "unknown"))
        if value_a == value_b and (value_a not in UNKNOWN or one_publisher):
            continue  # equal (FP32's "-" too), or one publisher's own setup on both sides
        out.append(f"{name}: {value_a} vs {value_b}")
    if factor != "source" and _value(a, "source") != _value(b, "source"):
        out.append(f"source: {_value(a, 'source')} vs {_value(b, 'source')}")  # pairs_with
    return out


def near_misses(views: list[CaseView], factor: str, a: str, b: str, limit: int = 5) -> list[str]:
    """Where nothing pairs: for cases with value ``a``, the ``b`` case that differs in the
    fewest other factors, and which ones (so the user sees why, not an empty table)."""
    others = _key_factors(factor)
    lines = []
    b_views = [v for v in views if matches(v, factor, b)]
    for view in [v for v in views if matches(v, factor, a)][:limit]:
        best = min(
            b_views,
            key=lambda o: sum(_value(o, f) != _value(view, f) for f in others),
            default=None,
        )
        if best is None:
            continue
        differing = [
            f"{f} {_value(view, f)} vs {_value(best, f)}"
            for f in others
            if _value(view, f) != _value(best, f)
        ]
        lines.append(f"- {view.case_id} and {best.case_id}: differ in {', '.join(differing)}")
    return lines


def _metric_cell(view: CaseView, metric: str) -> str:
    value = metric_of(view, metric)
    if value is None:
        return "-"
    return f"{value:.2%}" if metric == "efficiency" else f"{value:.2f}"


def _heading(
    sides: list[Side], factor: str, a: str, b: str, metric: str, filters: Sequence[tuple[str, str]]
) -> list[str]:
    """The report's title and the cases it is limited to."""
    names = " + ".join(s.name for s in sides)
    label = "" if metric == "throughput" else f" {metric}"
    out = [f"# {factor}{label}: {b} against {a} ({names})", ""]
    if filters:
        out += ["Only cases with " + ", ".join(f"{n}={v}" for n, v in filters) + ".", ""]
    return out


def _nothing_pairs(
    sides: list[Side], factor: str, a: str, b: str, filters: Sequence[tuple[str, str]]
) -> list[str]:
    """Where no pair differs only in ``factor``: the values seen, and the closest cases."""
    out = [
        f"No pair of cases differs only in {factor} ({a} vs {b}). Values seen: "
        + ", ".join(sorted({_value(v, factor) for s in sides for v in s.cases.values()}))
    ]
    views = [v for s in sides for v in s.cases.values()]
    views = [v for v in views if all(matches(v, n, value) for n, value in filters)]
    misses = near_misses(views, factor, a, b)
    if misses:
        out += ["", "The closest cases, and every factor in which they differ:", *misses]
    return out


def _group_ratios(pairs: list[Pair], group_by: str) -> list[dict[str, Any]]:
    """The median and geometric mean ratio of each ``group_by`` value's pairs."""
    groups = []
    for value in sorted({_value(pa, group_by) for pa, _, _ in pairs}):
        members = [r for pa, _, r in pairs if _value(pa, group_by) == value]
        groups.append(
            {
                "factor": group_by,
                "value": value,
                "pairs": len(members),
                "median_ratio": statistics.median(members),
                "geometric_mean_ratio": geometric_mean(members),
            }
        )
    return groups


def _ratio_table(
    pairs: list[Pair],
    differences: list[list[str]],
    shown: list[str],
    groups: list[dict[str, Any]],
    *,
    a: str,
    b: str,
    factor: str,
    metric: str,
) -> str:
    """The pairs' table: the ``shown`` factors, both sides' metric and their ratio, then the
    medians of each group and of all pairs (and the geometric mean)."""
    unit = "samples/s" if metric == "throughput" else metric
    published = any(pa.published_by or pb.published_by for pa, pb, _ in pairs)
    differ = any(differences)
    rows = [
        [
            *(_value(pa, f) for f in shown),
            *([pa.published_by or "measured"] if published else []),
            _metric_cell(pa, metric),
            _metric_cell(pb, metric),
            f"{ratio:.4f}",
            *(["; ".join(d) or "-"] if differ else []),
        ]
        for (pa, pb, ratio), d in zip(pairs, differences, strict=True)
    ]
    ratios = [r for _, _, r in pairs]
    blank = [""] * (len(shown) - 1 + (1 if published else 0) + 2)
    tail = [""] if differ else []
    for g in groups:
        label = f"median {g['factor']}={g['value']}"
        rows.append([label, *blank, f"{g['median_ratio']:.4f}", *tail])
    rows.append(["median (all pairs)", *blank, f"{statistics.median(ratios):.4f}", *tail])
    rows.append(["geometric mean (all pairs)", *blank, f"{geometric_mean(ratios):.4f}", *tail])
    headers = [*shown, *(["published by"] if published else []), f"{a} {unit}", f"{b} {unit}"]
    headers.append(f"{b}/{a}")
    if differ:
        headers.append(f"also differs (not only {factor})")
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def _not_factor_alone(differences: list[list[str]], factor: str) -> str:
    """The warning under a table whose pairs differ in more than ``factor``."""
    named = sorted({d.split(":")[0] for ds in differences for d in ds})
    impure = sum(1 for d in differences if d)
    return (
        f"{impure} of {len(differences)} pair(s) differ in more than {factor}: "
        f"{', '.join(named)} (column 'also differs'); their ratio is not {factor} alone. "
        "Run your side as the other ran (`--amp-dtype fp16` for DLPerf's V100 AMP, the "
        "pinned image where your GPU runs it, the same data prepared by `dlperf data`) or "
        "read the ratio with them."
    )


def _pair_records(
    pairs: list[Pair], differences: list[list[str]], metric: str
) -> list[dict[str, Any]]:
    """The pairs as the report's JSON lists them."""
    return [
        {
            "a_case": pa.case_id,
            "b_case": pb.case_id,
            "a_median": pa.stats.median,
            "b_median": pb.stats.median,
            "a_value": metric_of(pa, metric),
            "b_value": metric_of(pb, metric),
            "published_by": pa.published_by,
            "ratio": ratio,
            "also_differs": d,
        }
        for (pa, pb, ratio), d in zip(pairs, differences, strict=True)
    ]  # fmt: skip


def factor_report(
    sides: list[Side],
    factor: str,
    a: str,
    b: str,
    where: Sequence[str] = (),
    metric: str = "throughput",
    by: str | None = None,
) -> tuple[dict[str, Any], str]:
    factor = normalize_factor(factor)
    if metric not in METRICS:
        raise SystemExit(f"--metric {metric!r}: one of {', '.join(METRICS)}")
    filters = parse_where(where)
    head = {"factor": factor, "a": a, "b": b, "metric": metric, "where": dict(filters)}
    group_by = normalize_factor(by) if by else None
    pairs = factor_pairs(sides, factor, a, b, filters, metric)
    out = _heading(sides, factor, a, b, metric, filters)
    if not pairs:
        out += _nothing_pairs(sides, factor, a, b, filters)
        return {**head, "pairs": [], "median_ratio": None, "groups": []}, "\n".join(out) + "\n"
    others = _key_factors(factor)
    varying = [f for f in others if len({_value(p[0], f) for p in pairs}) > 1]
    shown = varying or others[:3]
    if group_by and group_by != factor and group_by not in shown:
        shown = [group_by, *shown]
    if group_by:  # rows of a group together, as its median row follows them
        pairs.sort(key=lambda p: (_value(p[0], group_by), p[0].case_id, p[1].case_id))
    differences = [also_differs(pa, pb, factor) for pa, pb, _ in pairs]
    ratios = [r for _, _, r in pairs]
    median = statistics.median(ratios)
    geomean = geometric_mean(ratios)
    groups = _group_ratios(pairs, group_by) if group_by else []
    table = _ratio_table(pairs, differences, shown, groups, a=a, b=b, factor=factor, metric=metric)
    out.append(table)
    constant = [f"{f}={_value(pairs[0][0], f)}" for f in others if f not in varying]
    out += [
        "",
        f"{len(pairs)} pair(s); median {b}/{a} = {median:.4f} (geometric mean {geomean:.4f}).",
        f"Equal in every pair: {', '.join(constant)}." if constant else "",
    ]
    if any(differences):
        out.append(_not_factor_alone(differences, factor))
    data = {
        **head,
        "pairs": _pair_records(pairs, differences, metric),
        "median_ratio": median,
        "geometric_mean_ratio": geomean,
        "groups": groups,
    }
    return data, "\n".join(out).rstrip() + "\n"
