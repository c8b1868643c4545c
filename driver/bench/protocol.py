"""The per-step log protocol every benchmark script speaks (stdlib only).

Benchmark scripts run inside framework environments (virtual environments, containers) that do
not have the driver's dependencies, so this module imports nothing outside the standard library.
Every record is one JSON object on one line of stdout, tagged with ``"dlperf"``:

- ``header``: once per rank, before training: versions, devices, the resolved options, and the
  node's hardware fingerprint (``fingerprint``: the facts; ``hardware``: their label).
- ``begin``:  the timestamp of the start of step 1 (taken after a device sync).
- ``step``:   one per step: ``step`` (1-based), ``t`` (monotonic seconds, taken after a device
  sync at the end of the step), ``samples`` (samples this rank processed in the step), ``loss``.
  With the ``step_sync: boundary`` option only the window's boundary steps are synchronised;
  the others carry ``"synced": false`` (their ``t`` is when the host queued them) and no loss.
- ``end``:    after the last step; ``peak_memory`` (optional): the rank's peak device memory in
  ``bytes`` and its ``source`` (e.g. ``torch.cuda.max_memory_allocated``), and where NVML can
  tell, ``nvml_bytes``: the process's device memory in use by NVML's count after the last step.
- ``device-window``: optional, after ``end``: the measured window as the device's own clock
  timed it (``seconds``, from events recorded in the device's stream at the window's two ends;
  ``source``, e.g. ``cuda-events``), an independent check of the host timestamps.
- ``oom``:    instead of the rest, when the allocator failed; the process then exits with
  :data:`EXIT_OOM`, which the driver's ``batch_size: max`` search reads as "does not fit".

Besides the records, a rank may print one ``dlperf-weights-checksum`` line after the run (the
tests compare it across ranks). This module is the only place that writes or recognises either.

Throughput is computed by the driver from ``t`` values (window end minus window start), never
from per-step rates, so a script must not print rates of its own in these records.
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TextIO

PROTOCOL_VERSION = 1
TAG = "dlperf"
EXIT_OOM = 86  # the driver's max-batch search reads this exit code as "batch does not fit"
# Launchers may prefix a line and JSON writers may space it differently: match loosely.
_OOM_RECORD = re.compile(rf'"{TAG}"\s*:\s*"oom"')


def rank_environment() -> dict[str, int]:
    """Rank, world size, local rank and node rank from the launcher's environment.

    torchrun, paddle.distributed.launch, oneflow.distributed.launch, horovodrun (OMPI/gloo) and
    the kit's own spawner use different variable names; the first one present wins.
    """

    def first(names: tuple[str, ...], default: int) -> int:
        for name in names:
            value = os.environ.get(name)
            if value not in (None, ""):
                return int(value)
        return default

    return {
        "rank": first(("RANK", "PADDLE_TRAINER_ID", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK"), 0),
        "world_size": first(
            ("WORLD_SIZE", "PADDLE_TRAINERS_NUM", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE"), 1
        ),
        "local_rank": first(
            ("LOCAL_RANK", "PADDLE_LOCAL_RANK", "HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
            0,
        ),
        "node_rank": first(("DLPERF_NODE_RANK", "GROUP_RANK", "NODE_RANK"), 0),
    }


class StepLogger:
    """Writes the protocol records of one rank.

    ``sync`` is the framework's device synchronisation (e.g. ``torch.cuda.synchronize``); it is
    called right before each timestamp so the time covers the work really done on the device.
    """

    def __init__(
        self,
        *,
        framework: str,
        model: str,
        sync: Callable[[], None] | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        rank_env: Mapping[str, int] | None = None,
    ) -> None:
        self.framework = framework
        self.model = model
        self.sync = sync or (lambda: None)
        self.stream = stream or sys.stdout
        self.clock = clock
        env = dict(rank_env) if rank_env is not None else rank_environment()
        self.rank = env["rank"]
        self.world_size = env["world_size"]
        self.local_rank = env["local_rank"]
        self.node_rank = env["node_rank"]
        self.steps_logged = 0

    def _emit(self, kind: str, **fields: Any) -> None:
        record = {TAG: kind, "v": PROTOCOL_VERSION, "rank": self.rank, **fields}
        write_line(json.dumps(record, sort_keys=True, default=str), self.stream)

    def header(
        self,
        *,
        versions: Mapping[str, Any],
        devices: list[str],
        options: Mapping[str, Any],
        hardware: Mapping[str, Any] | None = None,
    ) -> None:
        """``hardware``: the node's fingerprint, as ``driver.bench.fingerprint.take`` gives it
        (keys ``fingerprint``, the facts, and ``hardware``, their label); headers written
        without it (older logs, tests) are read as before."""
        base_versions = {"python": platform.python_version()}
        node: dict[str, Any] = {}
        if hardware is not None:
            node = {"fingerprint": dict(hardware["fingerprint"]), "hardware": hardware["hardware"]}
        self._emit(
            "header",
            **node,
            framework=self.framework,
            model=self.model,
            world_size=self.world_size,
            local_rank=self.local_rank,
            node_rank=self.node_rank,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            versions={**base_versions, **dict(versions)},
            devices=list(devices),
            options=dict(options),
        )

    def begin(self) -> float:
        self.sync()
        now = self.clock()
        self._emit("begin", t=now)
        return now

    def step(
        self, step: int, samples: int, loss: float | None = None, *, synced: bool = True
    ) -> float:
        """Record the end of ``step`` (1-based). ``loss`` must already be a host float.
        ``synced=False``: no device sync before the timestamp (the record says so)."""
        if synced:
            self.sync()
        now = self.clock()
        self.steps_logged += 1
        unsynced = {} if synced else {"synced": False}
        self._emit("step", step=step, t=now, samples=int(samples), loss=loss, **unsynced)
        return now

    def end(self, peak_memory: Mapping[str, Any] | None = None) -> None:
        """``peak_memory``: this rank's peak device memory (``bytes`` and its ``source``), where
        the adapter can tell."""
        extra = {"peak_memory": dict(peak_memory)} if peak_memory else {}
        self._emit("end", steps=self.steps_logged, **extra)

    def device_window(self, seconds: float, steps: int, source: str) -> None:
        """The measured window's duration by the device's own clock (after :meth:`end`)."""
        self._emit("device-window", seconds=seconds, steps=steps, source=source)


def oom_record(rank: int, batch_size: int | None, error: BaseException | None = None) -> str:
    """The ``{"dlperf": "oom"}`` line (``dlperf`` first: parsers look for ``"dlperf":``)."""
    record: dict[str, Any] = {TAG: "oom", "v": PROTOCOL_VERSION, "rank": rank}
    record["batch_size"] = batch_size
    if error is not None:
        lines = str(error).strip().splitlines()
        record["error"] = type(error).__name__
        record["message"] = lines[0][:500] if lines else ""
    return json.dumps(record)


def has_oom_record(text: str | bytes) -> bool:
    """Whether a log (or one line of it) holds a rank's out-of-memory record.

    Launchers that turn a rank's exit :data:`EXIT_OOM` into a plain failure (torchrun, paddle's
    and oneflow's launchers) lose the verdict; the record in the log keeps it.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    return _OOM_RECORD.search(text) is not None


def oom_exit(error: BaseException, rank: int, batch_size: int | None) -> NoReturn:
    """Print the OOM record and leave with :data:`EXIT_OOM` at once.

    ``os._exit``: peers may be stuck in a collective, and interpreter teardown (atexit hooks,
    collective library shutdown) could hang instead of exiting.
    """
    line = oom_record(rank, batch_size, error)
    write_line(line)
    message = json.loads(line)["message"]
    print(f"out of memory at batch size {batch_size}: {message}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(EXIT_OOM)


def print_weights_checksum(rank: int, value: float) -> None:
    """The line the tests compare across ranks: equal sums mean the gradients were reduced."""
    write_line(f"dlperf-weights-checksum rank={rank} sum={value:.6f}")


def write_line(text: str, stream: TextIO | None = None) -> None:
    """One line in one write: the kit runs Python unbuffered, where ``print`` writes the text and
    its newline apart, and a peer rank's line on the same pipe can land between the two."""
    stream = stream or sys.stdout
    stream.write(text + "\n")
    stream.flush()
