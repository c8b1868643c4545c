"""What the GPU check ran, read back from its work folder: one row per case (the kit's
figures, the device clock's, the GPU's NVML samples, MFU), parity and the selftest, and the
goals of the first GPU run judged against them (``summary.json``, ``summary.md``)."""

from __future__ import annotations

import contextlib
import json
import platform
import re
import statistics
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from driver.diagnose.gpucheck.archive import SESSION
from driver.diagnose.gpucheck.node import REPO_ROOT
from driver.diagnose.gpucheck.stages import GOALS, MODES, Shapes, StageResult


def session_rows(session: Path, python: str | None) -> list[dict[str, Any]]:
    """One row per case of the session: the kit's figures (every repeat as its record gives
    it), the device clock's figure from each repeat's ``device-window`` record, the GPU's
    telemetry in the windows, and MFU against ``reports/peaks.yaml``."""
    rows = []
    for case_file in sorted(session.glob("cases/**/case.json")):
        case_dir = case_file.parent
        repeats = []
        for record_file in sorted(case_dir.glob("repeat-*/record.json")):
            with contextlib.suppress(OSError, ValueError):
                repeats.append(repeat_row(record_file))
        if not repeats:
            continue
        ok = [r for r in repeats if r["verdict"] == "ok" and r["throughput"]]
        header = next((r["header"] for r in ok), repeats[0]["header"]) or {}
        options = dict(header.get("options") or {})
        case = json.loads(case_file.read_text())
        row: dict[str, Any] = {
            "case": case.get("id") or str(case_dir.relative_to(session / "cases")),
            "model": header.get("model"),
            "framework": header.get("framework") or case.get("framework"),
            "precision": options.get("precision"),
            "variant": case.get("variant", ""),
            "batch": options.get("batch_size"),
            "device": (header.get("devices") or [None])[0],
            "repeats_ok": len(ok),
            "repeats": len(repeats),
            "verdicts": [r["verdict"] for r in repeats],
            "throughputs": [r["throughput"] for r in ok],
            "median": statistics.median([r["throughput"] for r in ok]) if ok else None,
            "device_clock": [r["device_throughput"] for r in ok],
            "telemetry": [r["telemetry"] for r in ok],
        }
        pairs = [(r["throughput"], r["device_throughput"]) for r in ok if r["device_throughput"]]
        row["kit_vs_device_clock"] = (
            max(abs(kit / device - 1) for kit, device in pairs) if pairs else None
        )
        row["flops_per_sample"] = (
            flops_per_sample(row["model"], options, python) if python else None
        )
        peak = peak_tflops(row["device"], row["precision"], options)
        row["peak_tflops"] = peak
        row["mfu"] = (
            row["median"] * row["flops_per_sample"] / (peak * 1e12)
            if row["median"] and row["flops_per_sample"] and peak
            else None
        )
        rows.append(row)
    return rows


def repeat_row(record_file: Path) -> dict[str, Any]:
    record = json.loads(record_file.read_text())
    measurement = record.get("measurement") or {}
    log = record_file.parent / "node0.log"
    rank0 = rank0_log(log.read_text(errors="replace") if log.exists() else "")
    window = rank0.device_window_s if rank0 is not None else None
    samples = measurement.get("samples")
    run = (record.get("started_at"), record.get("finished_at"))
    return {
        "verdict": record.get("verdict"),
        "throughput": measurement.get("throughput"),
        "header": record.get("header"),
        "device_throughput": samples / window if window and samples else None,
        "telemetry": gpu_telemetry(record_file.parent, host_window(rank0), run),
    }


def rank0_log(log_text: str) -> Any:
    """Rank 0 of a node log as the kit's own parser reads it (its steps, header and the
    device clock's window); None where the log does not parse."""
    from driver.parsers.base import LogParseError
    from driver.parsers.dlperf_jsonl import DlperfJsonlParser

    try:
        return DlperfJsonlParser().parse({"node0.log": log_text}).ranks.get(0)
    except (LogParseError, KeyError, TypeError, ValueError):
        return None


def host_window(rank: Any) -> tuple[float, float] | None:
    """(start, end) of the measured window on the host's monotonic clock: rank 0's steps
    (``rank0_log``), None without them."""
    if rank is None:
        return None
    options = rank.header.get("options") or {}
    times = {point.step: point.t for point in rank.points}
    warmup, total = options.get("warmup_steps"), options.get("total_steps")
    return (times[warmup], times[total]) if warmup in times and total in times else None


def gpu_telemetry(
    repeat_dir: Path, window: tuple[float, float] | None, run: tuple[Any, Any]
) -> dict[str, Any]:
    """The GPU's NVML samples over the measured window (the whole run on the wall clock where
    the steps give none), median and maximum per metric as a release summarizes them."""
    from driver.telemetry.summary import summarize_samples

    files = {
        path.name: path.read_text(errors="replace")
        for path in sorted(repeat_dir.glob("telemetry-node*.jsonl"))
    }
    whole = run if all(isinstance(t, (int, float)) for t in run) else None
    summary = summarize_samples(files, {0: window} if window else None, whole)
    prefix = "telemetry_gpu_"
    gpu = {k.removeprefix(prefix): v for k, v in summary.items() if k.startswith(prefix)}
    if not any(v is not None for v in gpu.values()):
        status = summary["telemetry_status"]
        return {"note": "no GPU samples in the window" if status == "nvml" else status}
    return {"samples": summary["telemetry_samples"], "window": summary["telemetry_window"], **gpu}


SHAPE_KEYS = ("image_size", "num_classes", "seq_len", "vocab_size", "bert_layers",
              "bert_hidden", "bert_heads", "bert_intermediate", "max_predictions")  # fmt: skip


def flops_per_sample(model: str | None, options: dict[str, Any], python: str) -> float | None:
    """Training FLOPs per sample from the model definitions, counted by the framework's own
    interpreter (``python -m PyTorch.benchmark.flops``); None when it cannot count."""
    if not model:
        return None
    if model == "llama":  # the formula every consumer of a Llama MFU uses (no torch needed)
        from driver.workloads.llama import training_flops_per_sample

        return training_flops_per_sample(options)
    pairs = [f"--option={key}={options[key]}" for key in SHAPE_KEYS if options.get(key) is not None]
    key = (python, model, *pairs)
    if key not in _FLOPS:  # counted once per shape: the summary is rewritten after every stage
        _FLOPS[key] = _count_flops(python, model, pairs)
    return _FLOPS[key]


_FLOPS: dict[tuple[str, ...], float | None] = {}


def _count_flops(python: str, model: str, pairs: list[str]) -> float | None:
    try:
        done = subprocess.run(
            [python, "-m", "PyTorch.benchmark.flops", model, *pairs],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        return float(json.loads(done.stdout)["flops_per_sample"]["total"])
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError, TypeError):
        return None


def peak_tflops(device: str | None, precision: str | None, options: dict[str, Any]) -> float | None:
    """The dense peak of ``device`` at the precision the run computed in (reports/peaks.yaml)."""
    from driver.model.figures import load_peaks, match_device, peak_precision

    entry = match_device(device, load_peaks())
    if entry is None:
        return None
    value = (entry.get("peaks") or {}).get(peak_precision(precision or "", options))
    return float(value) if value else None


def parity_figures(work: Path) -> dict[str, Any] | None:
    path = work / "parity.json"
    if not path.exists():
        return None
    with contextlib.suppress(ValueError, OSError):
        data = json.loads(path.read_text())
        ratios = [p["kit"]["throughput"] / p["bare"]["throughput"] for p in data.get("pairs", [])]
        if ratios:
            return {"median_kit_over_bare": statistics.median(ratios), "ratios": ratios}
    return None


def selftest_errors(work: Path) -> list[str]:
    log = work / "logs" / "selftest.log"
    if not log.exists():
        return []
    return [line for line in log.read_text(errors="replace").splitlines()
            if line.startswith("selftest ")]  # fmt: skip


def summarize(
    work: Path, results: list[StageResult], on_gpu: bool, shapes: Shapes, python: str | None
) -> dict[str, Any]:
    session = work / "results" / SESSION
    rows = session_rows(session, python) if session.exists() else []
    facts = {}
    with contextlib.suppress(OSError, ValueError):
        facts = json.loads((work / "facts" / "torch.json").read_text())
    with contextlib.suppress(OSError, ValueError):
        facts["hardware"] = json.loads((work / "facts" / "fingerprint.json").read_text())[
            "hardware"
        ]
    summary: dict[str, Any] = {
        "mode": MODES[on_gpu],
        "profile": shapes.profile,
        "host": platform.node(),
        "torch": facts,
        "stages": [asdict(r) for r in results],
        "cases": rows,
        "parity": parity_figures(work),
        "selftest": selftest_errors(work),
        "goals": GOALS,
    }
    summary["markdown"] = markdown(summary)
    return summary


def markdown(summary: dict[str, Any]) -> str:
    from tabulate import tabulate

    torch_facts = summary["torch"] or {}
    lines = [
        f"# GPU check ({summary['mode']}, profile {summary['profile']}) on {summary['host']}",
        "",
        f"machine: {torch_facts.get('hardware', '?')}; device: {torch_facts.get('name', 'none')}"
        f", torch {torch_facts.get('torch', '?')}, CUDA {torch_facts.get('cuda', '-')}",
        "",
        tabulate(
            [
                [r["name"], r["status"], f"{r['seconds']:.0f}", r["detail"][:120]]
                for r in summary["stages"]
            ],
            headers=["stage", "status", "s", "detail"],
            tablefmt="github",
        ),  # fmt: skip
        "",
    ]
    rows = []
    for case in summary["cases"]:
        telemetry = next((t for t in case["telemetry"] if t and "samples" in t), None) or {}
        rows.append([
            case["case"], case["batch"], f"{case['repeats_ok']}/{case['repeats']}",
            _num(case["median"]), _pct(case["kit_vs_device_clock"], 3), _pct(case["mfu"], 1),
            _num(telemetry.get("power_w_median")), _num(telemetry.get("sm_clock_mhz_median")),
            _num(telemetry.get("mem_used_mib_max")), _num(telemetry.get("temp_c_max")),
        ])  # fmt: skip
    if rows:
        lines += [
            tabulate(rows, headers=["case", "batch", "ok", "samples/s (median)",
                                    "kit vs device clock", "MFU", "W", "SM MHz", "mem MiB max",
                                    "temp C max"], tablefmt="github", disable_numparse=True),
            "",
        ]  # fmt: skip
    pair = framework_pair(summary["cases"])
    if pair:
        lines.append(pair)
    if summary["parity"]:
        lines.append(f"parity: kit/bare median {summary['parity']['median_kit_over_bare']:.3f}")
    lines += summary["selftest"]
    lines += ["", tabulate(goal_rows(summary), headers=["goal", "target", "measured", "verdict"],
                           tablefmt="github", disable_numparse=True)]  # fmt: skip
    return "\n".join(lines) + "\n"


SELFTEST_ERROR = re.compile(r"error (?P<pct>[0-9.]+)%")


def framework_pair(cases: list[dict[str, Any]]) -> str:
    """JAX's ResNet-50 AMP beside PyTorch's at the same fixed batch on this device ('' unless
    both ran): the framework factor of the first GPU, shown, not judged."""
    medians = {
        (c["framework"], c["batch"]): c["median"]
        for c in cases
        if c["model"] == "resnet50" and c["precision"] == "amp" and c["median"]
        and "/bsmax/" not in c["case"] and c["variant"] in ("", "default")
    }  # fmt: skip
    for (framework, batch), jax_median in sorted(medians.items(), key=str):
        torch_median = medians.get(("pytorch", batch))
        if framework == "jax" and torch_median:
            return (
                f"ResNet-50 AMP at batch {batch}, JAX / PyTorch: {jax_median:,.1f} / "
                f"{torch_median:,.1f} samples/s = {jax_median / torch_median:.3f}"
            )
    return ""


def goal_rows(summary: dict[str, Any]) -> list[list[str]]:
    """Each goal of the check against what this run measured ("not measured" when it did not)."""
    cases = summary["cases"]

    def best(model: str, key: str) -> float | None:
        """The best AMP figure of the kit's PyTorch cases (the goals are PyTorch's)."""
        values = [c[key] for c in cases if c["model"] == model and c["precision"] == "amp"
                  and c.get("framework", "pytorch") == "pytorch"]  # fmt: skip
        values = [v for v in values if v is not None]
        return max(values) if values else None

    clock = [c["kit_vs_device_clock"] for c in cases if c["kit_vs_device_clock"] is not None]
    errors = [float(m["pct"]) / 100 for line in summary["selftest"]
              if (m := SELFTEST_ERROR.search(line))]  # fmt: skip
    parity = (summary["parity"] or {}).get("median_kit_over_bare")
    synced = {c["variant"]: c["median"] for c in cases
              if c["model"] == "resnet50" and c["precision"] == "amp" and "/bsmax/" not in c["case"]
              and c.get("framework", "pytorch") == "pytorch"
              and c["variant"] in ("", "default", "boundary-sync") and c["median"]}  # fmt: skip
    every = synced.get("default") or synced.get("")
    sync_cost = synced["boundary-sync"] / every - 1 if every and "boundary-sync" in synced else None
    # (goal, target, measured, below the target is met, format, a GPU's figure: a CPU
    # rehearsal's is shown, not judged)
    rows = [
        ("ResNet-50 AMP samples/s (best variant)", GOALS["resnet50_amp_samples_s"],
         best("resnet50", "median"), False, "{:,.0f}", True),
        ("BERT-base AMP MFU", GOALS["bert_amp_mfu"], best("bert", "mfu"), False, "{:.1%}", True),
        ("Llama 3.2 1B AMP MFU", GOALS["llama_1b_amp_mfu"], best("llama", "mfu"), False,
         "{:.1%}", True),
        ("kit vs device clock, worst case", GOALS["kit_vs_device_clock"],
         max(clock) if clock else None, True, "{:.3%}", True),
        ("selftest error, worst topology", GOALS["selftest_error"],
         max(errors) if errors else None, True, "{:.4%}", False),
        ("kit / bare loop (parity)", GOALS["kit_over_bare"], parity, False, "{:.3f}", False),
        ("per-step device sync's cost (boundary-only / every step - 1; above it, boundary "
         "timing becomes the GPU default)", GOALS["step_sync_cost"], sync_cost, True, "{:.2%}",
         True),
    ]  # fmt: skip
    rehearsal = summary.get("mode") != "gpu"
    out = []
    for name, target, value, below, shape, on_gpu_only in rows:
        bound = ("< " if below else ">= ") + shape.format(target)
        if value is None:
            out.append([name, bound, "not measured", "-"])
        elif rehearsal and on_gpu_only:
            out.append([name, bound, shape.format(value), "n/a (CPU rehearsal)"])
        else:
            met = value <= target if below else value >= target
            out.append([name, bound, shape.format(value), "met" if met else "MISSED"])
    return out


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _pct(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}%}"
