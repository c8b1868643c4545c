"""What a measurement must look like before any number of it is recorded or published.

The parsers already refuse a log they cannot read; these checks refuse a log that reads well but
cannot be true: timestamps no clock gives, steps out of order, a step that claims more samples
than the batch, a throughput no machine reaches. :func:`measure_checked` applies them all: the
runner before it writes a record (so a record never holds what every reader would refuse), and
the door (``driver.verify.repeat``) on every repeat it lets through, whoever consumes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from driver.model.case import Case
from driver.model.hardware import Hardware, HardwareError, hardware_of
from driver.model.measure import RepeatMeasurement, measure_logs
from driver.parsers.base import ParsedLog, Window

# A step timestamp is seconds on a monotonic clock (since boot) or a Unix wall clock: both are
# below 2e9 for the next decades; 1e11 s (3,000 years) leaves room for any clock offset a time
# namespace or a host gives, and refuses 1e308-like values that would make the window absurd.
MAX_TIMESTAMP_S = 1e11
# Training throughput per device (samples/s). The slowest case measured here is BERT-base with
# bf16 emulated on a CPU (0.03 samples/s); the fastest published per-GPU figures are in the
# thousands (ResNet-50 on an H100 is about 3,000). Six orders of magnitude on each side of
# those still refuse 1e308 and 1e-300 and whatever an edited log would need to move a median.
MIN_PER_DEVICE = 1e-4
MAX_PER_DEVICE = 1e7


class Implausible(ValueError):
    """A log or figure that parses but cannot be a real measurement; says what and why."""


def check_throughput(throughput: float, devices: int, what: str = "throughput") -> None:
    """Bounded per-device throughput (also used for imported published figures)."""
    if not throughput == throughput or throughput in (float("inf"), float("-inf")):
        raise Implausible(f"{what} {throughput!r} is not a finite number")
    per_device = throughput / max(devices, 1)
    if not MIN_PER_DEVICE <= per_device <= MAX_PER_DEVICE:
        raise Implausible(
            f"{what} {throughput:.6g} samples/s on {devices} device(s) is "
            f"{per_device:.3g} per device, outside [{MIN_PER_DEVICE:g}, {MAX_PER_DEVICE:g}]: "
            "no training run measures that; the log or the figure is wrong"
        )


def check_parsed(parsed: ParsedLog, window: Window, batch_size: int) -> None:
    """Per rank: finite, bounded timestamps that never go back; step numbers that only go
    forward; and inside the measured window, exactly ``batch_size`` samples per step (what a
    logging rank processes per step for every parser: its own batch, the job's figure scaled by
    ``samples_scale``)."""
    for rank in sorted(parsed.ranks):
        previous = None
        for point in parsed.ranks[rank].points:
            where = f"rank {rank}, step {point.step}"
            if abs(point.t) > MAX_TIMESTAMP_S:
                raise Implausible(
                    f"{where}: timestamp {point.t:.6g} s is beyond any clock "
                    f"(|t| <= {MAX_TIMESTAMP_S:g})"
                )
            if previous is not None:
                if point.step <= previous.step:
                    raise Implausible(
                        f"{where}: step number does not go forward (after step {previous.step})"
                    )
                if point.t < previous.t:
                    raise Implausible(f"{where}: time goes back ({point.t} after {previous.t})")
                if window.first < point.step <= window.last:
                    expected = batch_size * (point.step - previous.step)
                    if point.samples != expected:
                        raise Implausible(
                            f"{where}: {_count(point.samples)} samples, but "
                            f"{point.step - previous.step} "
                            f"step(s) of batch {batch_size} per device make {expected}"
                        )
            previous = point


def check_measurement(
    measurement: RepeatMeasurement, world_size: int, batch_size: int, model_parallel: int = 1
) -> None:
    """The window as a whole: bounded throughput, and (timestamps used) exactly batch x
    data-parallel replicas (world size / ``model_parallel``) samples per measured step."""
    check_throughput(measurement.throughput, world_size)
    if measurement.reported_by_source:
        return
    if measurement.duration_s <= 0:
        raise Implausible(f"the measured window lasts {measurement.duration_s} s")
    replicas = world_size // model_parallel
    expected = batch_size * replicas * measurement.measured_steps
    if measurement.samples != expected:
        of = (
            f"{world_size} device(s)"
            if model_parallel == 1
            else f"{replicas} data-parallel replica(s) of {model_parallel} devices"
        )
        per = "per device" if model_parallel == 1 else "per replica"
        raise Implausible(
            f"the window holds {measurement.samples} samples in {measurement.measured_steps} "
            f"measured steps of {of}, but batch {batch_size} {per} makes {expected}"
        )


def _count(samples: int) -> str:
    """A sample count as a person reads it (an edited log may hold a 300-digit integer)."""
    return str(samples) if abs(samples) < 10**15 else f"{float(samples):.6g}"


def check_finished(parsed: ParsedLog) -> None:
    """Every rank's log says it ended (the protocol's ``"dlperf": "end"`` record, written after
    its last step; upstream parsers mark their ranks ended where the source's log does): a
    rank without one stopped, or its log was cut, before the run was over, whatever steps it
    logged."""
    unfinished = sorted(rank for rank, log in parsed.ranks.items() if not log.finished)
    if unfinished:
        listed = ", ".join(map(str, unfinished[:8])) + (", ..." if len(unfinished) > 8 else "")
        raise Implausible(
            f"rank(s) {listed} logged no end record (\"dlperf\": \"end\" after the last step): "
            "the run stopped or its log was cut before it was over; re-run the repeat"
        )


def check_one_machine(parsed: ParsedLog) -> None:
    """Every rank on one machine, told by its fingerprint's facts (never by the label a header
    carries): a case runs on one kind of machine, so a figure over two would average them, and
    a rank whose facts differ from the others' was run elsewhere or edited. A rank's facts that
    fail their schema are refused here too (``driver.model.hardware``)."""
    machines: dict[str, tuple[Any, Hardware]] = {}
    for index, header in enumerate(parsed.rank_headers()):
        rank = header.get("rank", index)
        try:
            hardware = hardware_of(header)
        except HardwareError as error:
            raise Implausible(f"rank {rank}'s header: {error}") from None
        if hardware.known:
            machines.setdefault(hardware.key, (rank, hardware))
    if len(machines) > 1:
        (rank_a, a), (rank_b, b) = list(machines.values())[:2]
        differ = sorted(key for key in {*a.facts, *b.facts} if a.facts.get(key) != b.facts.get(key))
        raise Implausible(
            f"its ranks ran on {len(machines)} machines by their hardware facts: rank {rank_a} "
            f"on {a.label}, rank {rank_b} on {b.label} (facts that differ: "
            f"{', '.join(differ) or a.origin + ' and ' + b.origin}); a case runs on one kind of "
            "machine, so its figure would average two: run it on nodes of one kind"
        )


def device_memory_bytes(header: Mapping[str, Any]) -> int | None:
    """The memory of one device of the rank whose header this is, from its fingerprint: the
    largest GPU it lists, else (processes on a CPU) the host's memory, rounded up to the next
    whole GiB (the fingerprint holds whole GiB, rounded down); None where it says neither."""
    facts = header.get("fingerprint")
    if not isinstance(facts, Mapping):
        return None
    gpus = [g.get("memory_mib") for g in facts.get("gpus") or [] if isinstance(g, Mapping)]
    sizes = [size for size in gpus if isinstance(size, int) and not isinstance(size, bool)]
    if sizes:
        return max(sizes) * 2**20
    host = facts.get("memory_gib")
    if isinstance(host, int) and not isinstance(host, bool) and host > 0 and not facts.get("gpus"):
        return (host + 1) * 2**30
    return None


def check_peak_memory(parsed: ParsedLog) -> None:
    """Every rank's stated peak memory (its end record's bytes, NVML's too) at most one device's
    memory as its own fingerprint gives it: more is no measurement (a forged or mixed log)."""
    for rank in sorted(parsed.ranks):
        log = parsed.ranks[rank]
        limit = device_memory_bytes(log.header) if log.peak_memory else None
        if limit is None or log.peak_memory is None:
            continue
        for name in ("bytes", "nvml_bytes"):
            stated = log.peak_memory.get(name)
            if isinstance(stated, int) and stated > limit:
                raise Implausible(
                    f"rank {rank}: peak_memory.{name} {stated / 2**30:.4g} GiB is more than its "
                    f"device's {limit / 2**30:.4g} GiB (its fingerprint): no run uses more "
                    "memory than its device has; the log was edited or mixed with another"
                )


def check_repeated_steps(parsed: ParsedLog, precision: str) -> None:
    """A rate line that repeats the previous step label is one AMP loss-scale overflow iteration
    (the update skipped, the work done: counted); an FP32 run has no loss scale, so there the
    same step logged twice is an edited or mixed log, whose extra line would move the figure."""
    repeated = parsed.meta.get("overflow_iterations")
    if repeated and precision != "amp":
        raise Implausible(
            f"{repeated} step(s) of the measured window logged twice (a repeated step label, "
            f"which only an AMP loss-scale overflow prints) in a {precision} run: the log was "
            "edited or mixed with another; give the log as the run wrote it (or precision: amp "
            "if the run used AMP)"
        )


def measure_checked(
    case: Case, parser: str, texts: Mapping[str, str], batch_size: int
) -> tuple[RepeatMeasurement, ParsedLog]:
    """``measure_logs`` plus every plausibility check; raises LogParseError or Implausible."""
    measurement, parsed = measure_logs(
        case,
        parser,
        texts,
        batch_size,
        check=lambda parsed, window: (
            check_parsed(parsed, window, batch_size),
            check_finished(parsed),
            check_one_machine(parsed),
            check_peak_memory(parsed),
        ),
    )
    check_measurement(measurement, case.topology.world_size, batch_size, parsed.model_parallel)
    check_repeated_steps(parsed, case.precision)
    return measurement, parsed
