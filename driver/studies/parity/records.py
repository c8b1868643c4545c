"""What a parity run is asked and what it found: the request, each side's run, the pairs.

A side's throughput, CPU share and (the kit's) driver cost are read by ``reading.py`` and
``cpu.py``; the rounds (``rounds.py``) pair them; ``report.py`` prints them.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from driver.bench.host import cpu_count
from driver.core.session import AUTO
from driver.frameworks.base import REPO_ROOT
from driver.schema import StrictModel

Side = Literal["bare", "kit"]


class ParityError(RuntimeError):
    """A parity run that cannot start or whose two sides did not do the same work."""


@dataclass(frozen=True)
class ParityRequest:
    framework: str
    model: str = "resnet50"
    batch_size: int = 8
    precision: str = "fp32"  # fp32 | amp
    variant: str = "default"  # the matrix's option variant
    xla: bool = False
    topology: str = "1n1g"  # 1n<k>g: k processes on this host (the bare loop under torchrun)
    profile: str = AUTO  # as dlperf run: auto picks cpu-smoke on a CPU host, dlperf with GPUs
    options: Mapping[str, Any] = field(default_factory=dict)  # --option overrides (both sides)
    rounds: int = 5
    warmup_steps: int = 3
    measured_steps: int = 12
    threads: int = 0  # CPU threads of both sides; 0: the kit's default (bare: the same count)
    python: str | None = None  # an existing framework install instead of .venvs/<framework>
    results: Path = REPO_ROOT / "results"  # the kit's sessions go to <results>/parity-<stamp>
    timeout_s: float = 1800.0  # per process
    terminal: bool = True  # the kit's driver on a pseudo-terminal (its rich progress bar)

    @property
    def cpu_threads(self) -> int:
        return self.threads or cpu_count()


class DriverCost(StrictModel):
    """CPU time of the kit's driver process (every thread of it, not its children) over the
    kit's measured window: the harness's own work beside the benchmark."""

    window_s: float = Field(gt=0)
    main_thread_s: float = Field(ge=0)  # the runner and the local runtime's wait
    other_threads_s: float = Field(ge=0)  # the telemetry sampler, the progress bar's refresh

    @property
    def ms_per_s(self) -> float:
        return 1000.0 * (self.main_thread_s + self.other_threads_s) / self.window_s


class SideRun(StrictModel):
    """One process of one side: what it ran and how fast."""

    side: Side
    throughput: float = Field(gt=0)  # samples / s over the measured steps
    seconds: float = Field(gt=0)  # the measured steps' duration
    samples: int = Field(gt=0)
    model: str
    batch_size: int
    precision: str
    parameters: int
    device: str
    shape: dict[str, Any] = {}  # image size, classes, channels_last as this side ran them
    # kit: the handed options as its header records them; bare: as the loop applied them
    options: dict[str, Any] = {}
    load_1min: float  # the host's 1-minute load average when the process started
    # CPU time of the training process over its measured window / (window x threads): well
    # below 1, the machine's other work took cores from this run. 0: not measured.
    cpu_share: float = Field(default=0.0, ge=0)
    session: str | None = None  # kit: the session dlperf run wrote
    driver: DriverCost | None = None  # kit: its driver's own CPU over the window


class ParityPair(StrictModel):
    round: int
    bare: SideRun
    kit: SideRun
    first: Side

    @property
    def ratio(self) -> float:
        """kit / bare throughput: 1.0 is a harness that costs nothing."""
        return self.kit.throughput / self.bare.throughput

    @property
    def share_adjusted_ratio(self) -> float | None:
        """The ratio with each side's throughput divided by its CPU share: what it would have
        been had both sides had the same share of the cores (a shared machine's other work
        takes cores from one run more than the other). None without both shares."""
        if self.kit.cpu_share <= 0 or self.bare.cpu_share <= 0:
            return None
        return self.ratio * self.bare.cpu_share / self.kit.cpu_share


class ParityResult(StrictModel):
    framework: str
    model: str
    batch_size: int
    precision: str
    options: dict[str, Any]  # the --option overrides
    threads: int
    warmup_steps: int
    measured_steps: int
    machine: str
    pairs: list[ParityPair]
    variant: str = "default"
    topology: str = "1n1g"
    profile: str = ""
    case_id: str = ""
    handed: dict[str, Any] = {}  # every option handed to the bare loop, from the kit's header
    kit_command: list[str] = []  # the dlperf run command of the kit side (one round's)
    bare_command: list[str] = []
    python: str = ""

    @property
    def ratios(self) -> list[float]:
        return [pair.ratio for pair in self.pairs]

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.ratios), max(self.ratios)

    @property
    def median_share_adjusted(self) -> float | None:
        adjusted = [pair.share_adjusted_ratio for pair in self.pairs]
        if any(value is None for value in adjusted):
            return None
        return statistics.median(value for value in adjusted if value is not None)

    @property
    def on_gpu(self) -> bool:
        return any(pair.kit.device.startswith(("cuda", "gpu")) for pair in self.pairs)
