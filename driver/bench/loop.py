"""The one benchmark loop every framework script runs: :func:`run_benchmark` over an adapter.

stdlib only: it runs inside framework environments. A framework script supplies a small
:class:`Adapter` (build the model, make a batch, run a step, sync the device, tell an OOM, and
what its header says); this module owns everything else, once for every framework:

- the rank environment and the CPU threads per process (:class:`Run`), resolved before the
  framework starts (Paddle and MXNet read ``OMP_NUM_THREADS`` only when they load);
- the options: shape and shared training knobs plus the framework's own
  (:func:`driver.bench.contract.resolve_options`);
- the header record and its shared keys (with the node's hardware fingerprint,
  :mod:`driver.bench.fingerprint`), the barrier that starts every rank's clock together,
  the ``--total-steps`` steps (the driver cuts the warm-up off the window), a timestamp after a
  device sync at the end of each step, the end record, the weights checksum, the last barrier;
- the ``step_sync`` option: a device sync before every step's timestamp, or only at the
  window's boundaries; and, where the adapter has a :class:`DeviceTimer`, the window timed by
  the device's own clock as well (the ``device-window`` record);
- out of memory: when the adapter calls an error an allocator failure, the OOM record and exit
  :data:`~driver.bench.protocol.EXIT_OOM` (the ``batch_size: max`` search relies on both).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from driver.bench import fingerprint
from driver.bench.archs import PTX, REFUSED, ArchDecision
from driver.bench.archs import decide as decide_arch
from driver.bench.contract import OptionError, parse_benchmark_args, resolve_options
from driver.bench.host import threads_per_process
from driver.bench.protocol import StepLogger, oom_exit, print_weights_checksum, rank_environment

# Allocator failures whose type says nothing: the framework's message does. Near a GPU's limit
# the failure may come from cuBLAS (the backward's own handle), cuDNN, or cuDNN's search for an
# algorithm with no workspace left: for a batch search all of them mean "does not fit".
OOM_MESSAGES = (
    "out of memory",
    "can't allocate memory",
    "resourceexhausted",
    "oom when",
    "cublas_status_alloc_failed",
    "cudnn_status_alloc_failed",
    "unable to find an engine",
    "unable to find a valid cudnn algorithm",
)


def is_oom(
    error: BaseException,
    oom_types: Iterable[type[BaseException]] = (),
    messages: Iterable[str] = (),
) -> bool:
    """An allocator failure: a framework's OOM type, MemoryError, or a message that says so."""
    if isinstance(error, (MemoryError, *oom_types)):
        return True
    text = str(error).lower()
    return isinstance(error, Exception) and any(
        marker in text for marker in (*OOM_MESSAGES, *messages)
    )


@dataclass
class Run:
    """What the loop resolved for this process; the adapter reads it and may refine the ranks
    (engines that number their processes themselves: Horovod, the MXNet kvstore, OneFlow)."""

    args: argparse.Namespace
    rank: int
    world_size: int
    local_rank: int
    node_rank: int
    threads: int  # CPU threads for this process (the adapter applies them)
    threads_source: str
    options: dict[str, Any] | None = None  # resolved after Adapter.setup

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def rank_env(self) -> dict[str, int]:
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "local_rank": self.local_rank,
            "node_rank": self.node_rank,
        }


class Adapter(ABC):
    """One framework's part of the benchmark; :func:`run_benchmark` calls it in this order:
    setup, check_options, build_model, header (versions, devices, header_options), barrier,
    then per step make_batch, step, sync, host_loss; weights_checksum, barrier, finish."""

    framework: ClassVar[str]
    datasets: ClassVar[tuple[str, ...]] = ("synthetic",)  # the inputs it has a pipeline for
    own_options: ClassVar[Mapping[str, Any]] = {}  # the framework's knobs and their defaults
    oom_types: ClassVar[tuple[type[BaseException], ...]] = ()  # its allocator-failure types
    oom_messages: ClassVar[tuple[str, ...]] = ()  # its allocator failures' own wordings

    def __init__(self, run: Run) -> None:
        self.run = run

    @property
    def args(self) -> argparse.Namespace:
        return self.run.args

    @property
    def options(self) -> dict[str, Any]:
        assert self.run.options is not None, "options are resolved after setup()"
        return self.run.options

    @abstractmethod
    def setup(self) -> bool:
        """Choose the device, apply ``run.threads``, refine the ranks; return whether it trains
        on a GPU. Runs before the options are resolved (their defaults depend on both)."""

    def check_options(self, options: dict[str, Any]) -> None:
        """The framework's checks of the resolved options (raise OptionError; may adjust)."""
        return None  # nothing by default

    @abstractmethod
    def build_model(self) -> int:
        """Start the collective, build the model, optimizer and input; return the parameters."""

    @abstractmethod
    def make_batch(self) -> Any:
        """The next step's batch (synthetic data: the same tensors every step)."""

    @abstractmethod
    def step(self, batch: Any) -> Any:
        """One training step; returns its loss without waiting for it."""

    def sync(self) -> None:
        """Wait until the device has done everything queued (nothing to wait for by default)."""
        return None  # nothing by default

    def device_architecture(self) -> tuple[tuple[int, int], list[str] | str, str] | None:
        """On a GPU: its compute capability, the architectures the framework build lists, and
        the build's name (``driver.bench.archs`` decides); None where the adapter cannot say."""
        return None

    def host_loss(self, loss: Any) -> float:
        """The step's loss as a host float, read after :meth:`sync`."""
        return float(loss)

    def is_oom(self, error: BaseException) -> bool:
        return is_oom(error, self.oom_types, self.oom_messages)

    @abstractmethod
    def device(self) -> str:
        """The device as the header's ``device`` option names it."""

    @abstractmethod
    def versions(self) -> dict[str, Any]:
        """Library versions for the header (python's is added)."""

    @abstractmethod
    def devices(self) -> list[str]:
        """Device names for the header."""

    def header_options(self) -> dict[str, Any]:
        """The framework's own header options (precision details, engine, backend, ...)."""
        return {}

    @abstractmethod
    def barrier(self) -> None:
        """A collective every rank must reach; called only when there are several ranks."""

    @abstractmethod
    def weights_checksum(self) -> float:
        """sum(|w|) over this rank's weights (equal on every rank of a data-parallel job)."""

    def finish(self) -> None:
        """Release what the run holds (loaders, process groups) after the last barrier."""
        return None  # nothing by default

    def peak_memory(self) -> dict[str, Any] | None:
        """This rank's peak device memory after the last step, ``{"bytes": n, "source": ...}``,
        for the end record; None where the framework cannot tell (the default)."""
        return None

    def device_timer(self) -> DeviceTimer | None:
        """A timer of the measured window on the device's own clock (CUDA events), or None
        where the device has none (CPUs)."""
        return None


class DeviceTimer(ABC):
    """Marks queued in the device's stream at the window's start and end; their distance is
    the window by the device's clock, independent of the host's timestamps."""

    source: ClassVar[str]

    @abstractmethod
    def mark_start(self) -> None: ...

    @abstractmethod
    def mark_end(self) -> None: ...

    @abstractmethod
    def seconds(self) -> float:
        """The window's duration; waits for the end mark."""


AdapterFactory = Callable[[Run], Adapter]


def loaded_after_threads(module: str, adapter: str) -> AdapterFactory:
    """A factory for frameworks that size their thread pools once, when they load (Paddle,
    MXNet): it exports OMP_NUM_THREADS, then imports ``module`` and makes its ``adapter``."""

    def factory(run: Run) -> Adapter:
        os.environ["OMP_NUM_THREADS"] = str(run.threads)
        adapter_class: type[Adapter] = getattr(importlib.import_module(module), adapter)
        return adapter_class(run)

    return factory


def run_benchmark(
    factory: AdapterFactory,
    argv: Sequence[str] | None = None,
    *,
    description: str,
    models: Sequence[str] | None = None,
) -> int:
    """Parse the benchmark arguments and train with the adapter ``factory(run)`` makes.

    ``factory`` may import the framework (an adapter class, or a function that sets the
    environment first); an allocator failure anywhere after parsing ends the process with the
    OOM record and EXIT_OOM.
    """
    args = parse_benchmark_args(argv, description, models)
    env = rank_environment()
    threads, threads_source = threads_per_process(int(args.options.get("num_threads", 0)))
    run = Run(args=args, threads=threads, threads_source=threads_source, **env)
    adapter: Adapter | None = None
    try:
        adapter = factory(run)
        return _train(adapter, run)
    except BaseException as error:  # re-raised below unless it is an allocator failure
        if isinstance(error, (SystemExit, KeyboardInterrupt)):
            raise
        if not (adapter.is_oom(error) if adapter is not None else is_oom(error)):
            raise
        oom_exit(error, run.rank, args.batch_size)


def check_architecture(adapter: Adapter) -> ArchDecision | None:
    """The build against the GPU before anything is built on it: refused (OptionError, the
    reason and the newer pin) when it has no kernels for the GPU; the decision otherwise."""
    facts = adapter.device_architecture()
    if facts is None:
        return None
    capability, listing, build = facts
    decision = decide_arch(capability, listing, adapter.framework, build)
    if decision.verdict == REFUSED:
        raise OptionError(decision.reason)
    if decision.verdict == PTX:
        print(f"warning: {decision.reason}", file=sys.stderr, flush=True)
    return decision


def _header_options(
    adapter: Adapter,
    run: Run,
    options: dict[str, Any],
    parameters: int,
    arch: ArchDecision | None,
) -> dict[str, Any]:
    """What the run header's ``options`` says of this run: its options, shape and steps, the
    device, threads and parameter count, the adapter's own, and a PTX-compiled GPU's reason."""
    args = run.args
    return {
        **options,
        "batch_size": args.batch_size,
        "global_batch_size": args.batch_size * run.world_size,
        "precision": args.precision,
        "dataset": args.dataset,
        "warmup_steps": args.warmup_steps,
        "total_steps": args.total_steps,
        "device": adapter.device(),
        "seed": args.seed,
        "xla": args.xla == "on",
        "num_threads": run.threads,
        "num_threads_source": run.threads_source,
        "parameters": parameters,
        **adapter.header_options(),
        **({"gpu_arch": arch.reason} if arch is not None and arch.verdict == PTX else {}),
    }


def _run_steps(
    adapter: Adapter, args: argparse.Namespace, logger: StepLogger, *, every_step: bool
) -> None:
    """Every step, logged: synced at each step with ``every_step``, else only at the window's
    two ends (after the warm-up and the last step); the device's own clock over the window
    where the adapter has one."""
    timer = adapter.device_timer()
    boundaries = {args.warmup_steps, args.total_steps}  # the window: after these two steps
    logger.begin()
    if timer is not None and args.warmup_steps == 0:
        timer.mark_start()
    for number in range(1, args.total_steps + 1):
        loss = adapter.step(adapter.make_batch())
        if timer is not None and number == args.total_steps:
            timer.mark_end()  # queued behind the last step's work
        if every_step or number in boundaries:
            adapter.sync()
            logger.step(number, args.batch_size, adapter.host_loss(loss))
        else:
            logger.step(number, args.batch_size, None, synced=False)
        if timer is not None and number == args.warmup_steps:
            timer.mark_start()  # after the warm-up's synced timestamp: the stream is idle
    logger.end(adapter.peak_memory())
    if timer is not None and args.total_steps > args.warmup_steps:
        logger.device_window(timer.seconds(), args.total_steps - args.warmup_steps, timer.source)


def _train(adapter: Adapter, run: Run) -> int:
    args = run.args
    if args.dataset not in adapter.datasets:
        raise OptionError(
            f"--dataset {args.dataset}: the {adapter.framework} scripts have no input pipeline "
            f"for it (they support: {', '.join(adapter.datasets)})"
        )
    on_gpu = adapter.setup()
    options = resolve_options(args, adapter.own_options, world_size=run.world_size, on_gpu=on_gpu)
    adapter.check_options(options)
    run.options = options
    arch = check_architecture(adapter) if on_gpu else None
    parameters = adapter.build_model()
    record = _header_options(adapter, run, options, parameters, arch)
    logger = StepLogger(
        framework=adapter.framework, model=args.model, sync=adapter.sync, rank_env=run.rank_env()
    )
    logger.header(
        versions=adapter.versions(),
        devices=adapter.devices(),
        options=record,
        hardware=fingerprint.take(),  # what this node is: every rank says it of its own node
    )

    if run.distributed:
        adapter.barrier()  # start the clocks of all ranks together
    if arch is not None and arch.verdict == PTX and args.warmup_steps == 0:
        # PTX is compiled at each kernel's first launch: one step before the window takes it
        adapter.step(adapter.make_batch())
        adapter.sync()
    _run_steps(adapter, args, logger, every_step=options["step_sync"] == "every")
    if options["weights_checksum"]:
        # After the measurement: equal sums on every rank show the gradients were reduced.
        print_weights_checksum(run.rank, adapter.weights_checksum())
    if run.distributed:
        adapter.barrier()  # no rank leaves while a peer still needs it for a collective
    adapter.finish()
    return 0
