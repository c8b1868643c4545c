"""``dlperf selftest --nodes 2,4,8,16,32``: the kit's error and its own cost as nodes grow.

For each node count N it makes N simulated hosts (``driver.testbed.simhosts``: own network,
hostname, files view and clock each), runs the calibration case ``NnNg`` (``--devices`` per host)
through the ``process`` or ``slurm`` runtime, and prints the kit's error, its overhead per repeat
(the repeat's wall time minus the workload's own steps), per case (the same with the session's
preparation: pre-flight, code sync, provenance) and the phase timings the runtime recorded, so
their growth with N is visible; then what follows the run: the door over the sealed session
(every repeat's logs hashed and re-measured) and a release of it (built, audited, published
into a scratch reports folder). Making the hosts is timed apart ("hosts s"), not counted.
Each of the kit's own parts is fitted by a line in N and extrapolated to
:data:`EXTRAPOLATE_TO` nodes (:func:`extrapolation`).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from driver.core.selftest import ERROR_BOUND, WARMUP_STEPS, SelftestResult, run_selftest
from driver.testbed.simhosts import SimulatedHosts, missing_requirements

CURVE_RUNTIMES = ("process", "slurm")
MAX_SIMULATED_NODES = 200  # addresses 10.251.X.11 and up in one /24
EXTRAPOLATE_TO = 1024  # nodes: the largest clusters booked for a day's benchmark


class CostCurveError(RuntimeError):
    """The curve cannot run here (the message names what to install or run)."""


@dataclass(frozen=True)
class CurvePoint:
    nodes: int
    result: SelftestResult
    hosts_s: float  # making and removing the simulated hosts (not the kit's cost)
    # The case's whole wall time minus its repeats' steps: the per-repeat overhead plus the
    # session's preparation (pre-flight, code sync, provenance), once per case here.
    case_overhead_s: float = 0.0
    repeat_steps_s: float = 0.0  # the workload's own steps in one repeat
    door_s: float | None = None  # the door over the whole sealed session, per repeat
    release_s: float | None = None  # a release of the session (built, audited, published)

    @property
    def nodes_side_s(self) -> float | None:
        """The nodes' own share of the overhead per repeat: their longest process (SSH
        runtimes) or the ``srun`` step (slurm) minus the workload's steps, i.e. the ranks'
        start-up, rendezvous and exit. On simulated hosts every node's processes share this
        machine's cores, so this part grows with N here; on real hosts they run side by side."""
        phases = self.result.phases
        window = phases.get("nodes_process_s", phases.get("step_s"))
        return None if window is None else max(0.0, window - self.repeat_steps_s)

    @property
    def driver_s(self) -> float | None:
        """The rest of the overhead per repeat: the driver's own (fan-out, watch, collection,
        parsing, the record) and, under slurm, the scheduler's step launch."""
        side = self.nodes_side_s
        return None if side is None else max(0.0, self.result.overhead_s - side)


def refusal(runtime: str) -> str | None:
    """None when the curve can run here on ``runtime``, else one line saying why and the fix."""
    if runtime not in CURVE_RUNTIMES:
        why = {
            "local": "the local runtime runs every process on this one machine, with no "
            "hosts to reach over SSH or Slurm, so it would not rehearse separate hosts",
            "docker": "docker's containers share this machine's one engine (its network and "
            "clock), so they would not rehearse separate hosts",
        }.get(runtime, "it would not run each node as a separate host")
        return (
            f"--nodes runs on simulated hosts through --runtime {' or '.join(CURVE_RUNTIMES)}, "
            f"not {runtime}: {why}"
        )
    return missing_requirements(slurm=runtime == "slurm", sshd=runtime == "process")


@contextmanager
def _slurm_clients_at(conf: Path) -> Iterator[None]:
    """This process's Slurm clients point at the simulated cluster, then back."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("SLURM_")}
    for key in saved:
        del os.environ[key]
    os.environ["SLURM_CONF"] = str(conf)
    try:
        yield
    finally:
        os.environ.pop("SLURM_CONF", None)
        os.environ.update(saved)


def _one_point(
    nodes: int, runtime_name: str, devices: int, scratch: Path, printer: Callable[[str], None],
    **selftest: float,
) -> tuple[SelftestResult, float, float]:  # fmt: skip
    from driver.cluster.slurm import SlurmConfig
    from driver.runtimes.base import Runtime
    from driver.runtimes.slurm.runtime import SlurmRuntime
    from driver.runtimes.ssh.runtime import ProcessRuntime

    made = time.monotonic()
    hosts = SimulatedHosts(
        scratch / "hosts", nodes, sshd=runtime_name == "process",
        slurm=runtime_name == "slurm", cpus=max(8, devices),
    )  # fmt: skip
    hosts.start()
    hosts_s = time.monotonic() - made
    started = time.monotonic()
    topology = f"{nodes}n{nodes * devices}g"
    try:
        with ExitStack() as held:  # under Slurm: its clients at the hosts, its job cancelled
            if runtime_name == "process":
                inventory = hosts.write_inventory(scratch / "hosts.yaml", devices=devices)
                runtime: Runtime = ProcessRuntime(inventory)
            else:
                held.enter_context(_slurm_clients_at(hosts.conf))
                config = SlurmConfig(time_limit="30", container="none")
                runtime = held.enter_context(closing(SlurmRuntime(config=config, printer=printer)))
            results = run_selftest(
                topologies=(topology,), results_dir=scratch / "session", printer=printer,
                runtime=runtime, **selftest,  # type: ignore[arg-type]
            )  # fmt: skip
        case_s = time.monotonic() - started
    finally:
        stopping = time.monotonic()
        hosts.stop()
        hosts_s += time.monotonic() - stopping
    return results[0], hosts_s, case_s


def _after_the_run(session: Path, scratch: Path) -> tuple[float, float]:
    """(seconds of the door over the sealed session, seconds of a release of it): what the
    kit does with a session once it ran, on this machine alone (the hosts are gone)."""
    from driver.release.release import release
    from driver.verify.folder import verify_sessions

    started = time.monotonic()
    verify_sessions([session])
    door_s = time.monotonic() - started
    started = time.monotonic()
    release(
        "v0.0-cost", [session], reports_root=scratch / "reports", compute_flops=False,
        printer=lambda _line: None,
    )  # fmt: skip
    return door_s, time.monotonic() - started


def run_cost_curve(
    node_counts: list[int],
    runtime_name: str,
    *,
    devices: int = 1,
    step_time: float = 0.02,
    repeats: int = 3,
    measured_steps: int = 100,
    printer: Callable[[str], None] = print,
    plot: Path | None = None,
) -> list[CurvePoint]:
    """The calibration case on each node count in turn; prints the table and returns it (and
    draws it into ``plot``, a PNG, where given)."""
    why = refusal(runtime_name)
    if why:
        raise CostCurveError(why)
    points = []
    for nodes in node_counts:
        with tempfile.TemporaryDirectory(prefix="dlperf-costcurve-") as scratch:
            result, hosts_s, case_s = _one_point(
                nodes, runtime_name, devices, Path(scratch), printer,
                step_time=step_time, repeats=repeats, measured_steps=measured_steps,
            )  # fmt: skip
            door_s, release_s = _after_the_run(Path(scratch) / "session", Path(scratch))
        steps_s = repeats * (WARMUP_STEPS + measured_steps) * step_time
        points.append(
            CurvePoint(
                nodes, result, hosts_s, case_s - steps_s,
                repeat_steps_s=(WARMUP_STEPS + measured_steps) * step_time,
                door_s=door_s / repeats, release_s=release_s,
            )
        )  # fmt: skip
    printer(curve_table(points, runtime_name))
    for line in extrapolation(points):
        printer(line)
    if plot is not None:
        printer(f"plot: {plot_curve(points, plot, runtime_name)}")
    return points


# The kit's own parts the extrapolation fits: what grows with the cluster on a real one (the
# nodes' own part grows here only because every simulated host shares this machine's cores).
OWN_PARTS = (
    ("the driver's part of a repeat", lambda p: p.driver_s),
    ("the door, per repeat", lambda p: p.door_s),
    ("a release of the session", lambda p: p.release_s),
)


def _measured(
    points: list[CurvePoint], part: Callable[[CurvePoint], float | None]
) -> tuple[list[float], list[float], tuple[float, float] | None]:
    """One part's (node counts, seconds) where measured, and its least-squares line (slope,
    intercept) where two counts or more were."""
    pairs = [(float(p.nodes), float(s)) for p in points if (s := part(p)) is not None]
    xs, ys = [n for n, _ in pairs], [s for _, s in pairs]
    fit = statistics.linear_regression(xs, ys) if len(set(xs)) >= 2 else None
    return xs, ys, (tuple(fit) if fit is not None else None)  # type: ignore[return-value]


def plot_curve(points: list[CurvePoint], path: Path, runtime_name: str) -> Path:
    """The kit's own parts against the node count (log 2), each with its fitted line carried
    to :data:`EXTRAPOLATE_TO` nodes, as a PNG at ``path`` (written whole)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from driver.files import write_bytes

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for (name, part), marker in zip(OWN_PARTS, "os^", strict=True):
        xs, ys, fit = _measured(points, part)
        if not xs:
            continue
        line = ax.plot(xs, ys, marker, label=name)[0]
        if fit is not None:
            slope, intercept = fit
            far = [min(xs), EXTRAPOLATE_TO]
            ax.plot(far, [intercept + slope * n for n in far], "--", color=line.get_color(),
                    linewidth=0.8)  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("simulated hosts (nodes)")
    ax.set_ylabel("seconds")
    ax.set_title(f"the kit's own cost on the {runtime_name} runtime; dashed: fitted lines")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", linewidth=0.3)
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return write_bytes(path, buffer.getvalue())


def extrapolation(points: list[CurvePoint], to: int = EXTRAPOLATE_TO) -> list[str]:
    """Each of the kit's own parts fitted by a least-squares line in the node count and read
    at ``to`` nodes, with the fit's largest relative miss over the measured points (how far a
    line holds); nothing where fewer than two counts were measured."""
    lines = []
    for name, part in OWN_PARTS:
        nodes, seconds, fit = _measured(points, part)
        if fit is None:
            continue
        slope, intercept = fit
        miss = max(
            abs(intercept + slope * n - s) / s if s > 0 else 0.0
            for n, s in zip(nodes, seconds, strict=True)
        )
        lines.append(
            f"{name}: {intercept:.3f} s + {slope * 1000:.2f} ms per node (largest miss of the "
            f"line {miss:.0%}); at {to:,} nodes {intercept + slope * to:.1f} s"
        )
    return lines


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def curve_table(points: list[CurvePoint], runtime_name: str) -> str:
    """The curve: per node count the error, the overhead per repeat and each recorded phase
    (medians over repeats, seconds)."""
    phases = sorted({key for p in points for key in p.result.phases})
    rows = [
        [
            p.nodes, p.result.topology, f"{p.result.error:.4%}",
            "ok" if p.result.passed else "FAIL", f"{p.result.overhead_s:.2f}",
            _seconds(p.nodes_side_s), _seconds(p.driver_s),
            f"{p.case_overhead_s:.2f}", _seconds(p.door_s), _seconds(p.release_s),
            f"{p.hosts_s:.1f}",
            *(f"{p.result.phases[k]:.3f}" if k in p.result.phases else "" for k in phases),
        ]
        for p in points
    ]  # fmt: skip
    headers = [
        "nodes", "topology", "error", f"< {ERROR_BOUND:.2%}", "overhead s/repeat",
        "of which nodes' own", "of which driver's", "overhead s/case", "door s/repeat",
        "release s", "hosts s", *phases,
    ]  # fmt: skip
    return f"cost curve on the {runtime_name} runtime (simulated hosts):\n" + tabulate(
        rows, headers=headers, tablefmt="github", disable_numparse=True
    )
