"""Real calibration sessions for tests, and a large version for sizing the audit.

``real_session`` runs the framework-free calibration workload for real (LocalRuntime, real
processes, real logs and telemetry). ``multiply`` makes a large session out of a real one:
every synthetic repeat is a byte-for-byte copy of a real repeat's folder (logs, telemetry) under
a new case (batch, precision and dataset labels) and repeat number, with its record and case
files rewritten to match. ``python -m tests.synth --repeats 1000`` releases and audits
such a session and prints the audit time and the size of the version on disk.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from itertools import cycle, product
from pathlib import Path
from typing import Any

from driver.core.runner import run_cases
from driver.core.selftest import calibration_cases
from driver.model.case import Case
from driver.model.results import Session
from driver.runtimes.local import LocalRuntime
from driver.telemetry.sampler import ENV_INTERVAL


@contextmanager
def telemetry_interval(seconds: float) -> Iterator[None]:
    old = os.environ.get(ENV_INTERVAL)
    os.environ[ENV_INTERVAL] = str(seconds)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV_INTERVAL, None)
        else:
            os.environ[ENV_INTERVAL] = old


def real_session(
    root: Path,
    *,
    topologies: tuple[str, ...] = ("1n1g", "1n2g", "2n2g"),
    batches: tuple[int, ...] = (8,),
    repeats: int = 3,
    measured_steps: int = 30,
    step_time: float = 0.01,
    options: dict[str, Any] | None = None,
    variant: str = "default",
    telemetry_s: float = 0.05,
) -> Path:
    """Run calibration cases for real into the session folder ``root``."""
    cases: list[Case] = []
    for batch in batches:
        for case in calibration_cases(step_time, batch, list(topologies), repeats, measured_steps):
            cases.append(
                replace(case, options={**case.options, **(options or {})}, variant=variant)
            )
    session = Session.open(root, {"profile": "selftest", "runtime": "local", "kind": "synth"})
    with telemetry_interval(telemetry_s):
        summary = run_cases(cases, session, LocalRuntime(), printer=lambda _line: None)
    if not summary.ok:
        raise RuntimeError(f"calibration runs failed: {summary.failed}")
    return root


_CACHE: dict[tuple, Path] = {}


def cached_session(name: str = "base", **kwargs: Any) -> Path:
    """A real calibration session made once per process (tests share it; never modify it)."""
    key = (name, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
    if key not in _CACHE:
        scratch = Path(tempfile.mkdtemp(prefix="dlperf-synth-"))
        atexit.register(shutil.rmtree, scratch, True)
        _CACHE[key] = real_session(scratch / name, **kwargs)
    return _CACHE[key]


def multiply(
    source: Path,
    target: Path,
    repeats: int,
    precisions: tuple[str, ...] = ("fp32", "amp"),
    datasets: tuple[str, ...] = ("synthetic", "real"),
) -> Path:
    """A session with about ``repeats`` repeats, copied from the real repeats of ``source``."""
    src = Session(source)
    real: dict[tuple[str, int], list[Path]] = {}
    cases: dict[tuple[str, int], Case] = {}
    for case, record, folder in src.records():
        key = (case.topology.label, record.batch_size)
        real.setdefault(key, []).append(folder)
        cases[key] = case
    labels = list(product(sorted(real), precisions, datasets))
    per_case = max(1, round(repeats / len(labels)))
    target.mkdir(parents=True)
    shutil.copyfile(source / "session.json", target / "session.json")
    meta = json.loads((target / "session.json").read_text())
    meta["name"] = target.name
    (target / "session.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    out = Session(target)
    for key, precision, dataset in labels:
        case = replace(cases[key], precision=precision, dataset=dataset, repeats=per_case)
        out.save_case(case)
        for number, folder in zip(range(1, per_case + 1), cycle(real[key]), strict=False):
            destination = out.repeat_dir(case, number)
            shutil.copytree(folder, destination)
            record_path = destination / "record.json"
            record = json.loads(record_path.read_text())
            record.update(case_id=case.id, repeat=number)
            record_path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return target


def directory_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    from driver.release.audit import audit
    from driver.release.release import release

    parser = argparse.ArgumentParser(description="size the audit on a large calibration version")
    parser.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--repeats", type=int, default=1000)
    parser.add_argument("--real-repeats", type=int, default=5)
    args = parser.parse_args(argv)
    work = Path(args.out or tempfile.mkdtemp(prefix="dlperf-size-"))
    started = time.perf_counter()
    base = real_session(
        work / "real",
        topologies=("1n1g", "1n2g", "2n2g"),
        batches=(4, 8),
        repeats=args.real_repeats,
    )
    print(f"real session: {time.perf_counter() - started:.1f} s")
    big = multiply(base, work / "results" / "big", args.repeats)
    started = time.perf_counter()
    version = release("v9.9-size", [big], reports_root=work / "reports", printer=print)
    print(f"release: {time.perf_counter() - started:.1f} s")
    report = audit(version)
    print(report.text().splitlines()[0])
    print(f"audit: {report.elapsed_s:.2f} s, verdict {'PASS' if report.ok else 'FAIL'}")
    size = directory_size(version)
    raw = directory_size(version / "raw")
    print(f"version on disk: {size / 1e6:.2f} MB ({raw / 1e6:.2f} MB of compressed raw data)")
    print(f"work folder: {work}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
