"""``dlperf factor``: the effect of one factor, as the TensorFlow benchmark sheets show it.

For a factor with two values A and B (synthetic vs real data, batch 64 vs 32, device type,
model, framework, AMP vs FP32, XLA on vs off, ...), every case with the value A is paired with
the case that has the value B and every other factor equal; each pair gives B/A of the median
throughputs, and the table ends with the median ratio (and the geometric mean).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from tabulate import tabulate

from driver.release.compare import CaseView, Side

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
)
ALIASES = {"amp": "precision", "data": "dataset", "gpu": "device", "batch_size": "batch"}
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
    if factor == "device":
        return wanted in value  # "H100" matches "NVIDIA H100 80GB HBM3"
    return value == wanted


def _others(view: CaseView, factor: str) -> tuple:
    return tuple(_value(view, f) for f in FACTORS if f != factor)


def factor_pairs(
    sides: list[Side], factor: str, a: str, b: str
) -> list[tuple[CaseView, CaseView, float]]:
    views = [v for side in sides for v in side.cases.values()]
    b_by_key: dict[tuple, list[CaseView]] = {}
    for view in views:
        if matches(view, factor, b):
            b_by_key.setdefault(_others(view, factor), []).append(view)
    pairs = []
    for view in views:
        if matches(view, factor, a):
            for other in b_by_key.get(_others(view, factor), []):
                if other is not view:
                    pairs.append((view, other, other.stats.median / view.stats.median))
    pairs.sort(key=lambda p: (p[0].case_id, p[1].case_id))
    return pairs


def factor_report(sides: list[Side], factor: str, a: str, b: str) -> tuple[dict[str, Any], str]:
    factor = normalize_factor(factor)
    pairs = factor_pairs(sides, factor, a, b)
    names = " + ".join(s.name for s in sides)
    out = [f"# {factor}: {b} against {a} ({names})", ""]
    if not pairs:
        out.append(
            f"No pair of cases differs only in {factor} ({a} vs {b}). Values seen: "
            + ", ".join(sorted({_value(v, factor) for s in sides for v in s.cases.values()}))
        )
        return {"factor": factor, "a": a, "b": b, "pairs": [], "median_ratio": None}, "\n".join(
            out
        ) + "\n"
    others = [f for f in FACTORS if f != factor]
    varying = [f for f in others if len({_value(p[0], f) for p in pairs}) > 1]
    shown = varying or others[:3]
    rows = [
        [
            *(_value(pa, f) for f in shown),
            f"{pa.stats.median:.2f}",
            f"{pb.stats.median:.2f}",
            f"{ratio:.4f}",
        ]
        for pa, pb, ratio in pairs
    ]
    headers = [*shown, f"{a} samples/s", f"{b} samples/s", f"{b}/{a}"]
    ratios = [r for _, _, r in pairs]
    median = statistics.median(ratios)
    geomean = math.exp(statistics.fmean(math.log(r) for r in ratios))
    out.append(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))
    constant = [f"{f}={_value(pairs[0][0], f)}" for f in others if f not in varying]
    out += [
        "",
        f"{len(pairs)} pair(s); median {b}/{a} = {median:.4f} (geometric mean {geomean:.4f}).",
        f"Equal in every pair: {', '.join(constant)}." if constant else "",
    ]
    data = {
        "factor": factor,
        "a": a,
        "b": b,
        "pairs": [
            {
                "a_case": pa.case_id,
                "b_case": pb.case_id,
                "a_median": pa.stats.median,
                "b_median": pb.stats.median,
                "ratio": ratio,
            }
            for pa, pb, ratio in pairs
        ],  # fmt: skip
        "median_ratio": median,
        "geometric_mean_ratio": geomean,
    }
    return data, "\n".join(out).rstrip() + "\n"
