"""Running one process of a side: to its end, past its timeout, or until a line it prints.

The kit's driver runs on a pseudo-terminal (its rich progress bar), and a watched process has
its CPU time sampled while it runs (``cpu.py``).
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from driver.bench.supervisor import start, stop
from driver.studies.parity.cpu import CpuWatch
from driver.studies.parity.records import ParityError


@dataclass(frozen=True)
class SideCommand:
    argv: list[str]
    env: dict[str, str]
    workdir: str
    terminal: bool = False  # stdout and stderr on a pseudo-terminal (the kit's driver)
    stop_after: str | None = None  # stop the process once a line of its output holds this
    watch: bool = False  # sample its own threads' and its children's CPU once a second


class Finished(NamedTuple):
    code: int
    out: str
    err: str
    # (monotonic time, the process's main thread CPU s, its other threads' CPU s, its
    # descendants' CPU s), once a second while it ran (only for a watched command)
    cpu: tuple[tuple[float, float, float, float], ...] = ()


Runner = Callable[[SideCommand, float], Any]  # returns Finished, or (code, out, err)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def run_process(command: SideCommand, timeout_s: float) -> Finished:
    """Run to the end (killed with this process, past ``timeout_s``, or once a line holds
    ``command.stop_after``): exit code, output, errors (one stream on a terminal)."""
    terminal = pty.openpty() if command.terminal else None
    merged = terminal is not None or command.stop_after is not None
    output = terminal[1] if terminal else subprocess.PIPE
    process = start(
        command.argv,
        new_group=True,
        cwd=command.workdir,
        env=command.env,
        stdout=output,
        stderr=output if terminal else (subprocess.STDOUT if merged else subprocess.PIPE),
        stdin=subprocess.DEVNULL,
    )
    if terminal:
        os.close(terminal[1])
    watch = CpuWatch(process.pid) if command.watch else None
    deadline = time.monotonic() + timeout_s
    try:
        if merged:
            source = terminal[0] if terminal else process.stdout.fileno()  # type: ignore[union-attr]
            out = _read_until(source, process, deadline, command.stop_after)
            err = ""
        else:
            try:
                raw_out, raw_err = process.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                stop([process], groups=True)
                raw_out, raw_err = process.communicate()
                raise _past_timeout(command, timeout_s, raw_err or raw_out) from None
            out, err = raw_out.decode(errors="replace"), raw_err.decode(errors="replace")
    finally:  # also on KeyboardInterrupt
        if process.poll() is None:
            stop([process], groups=True)
        if terminal:
            os.close(terminal[0])
        cpu = watch.stop() if watch else ()
    if out is None:
        raise _past_timeout(command, timeout_s, "")
    return Finished(process.wait(), out, err, cpu)


def _past_timeout(command: SideCommand, timeout_s: float, text: Any) -> ParityError:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return ParityError(
        f"{' '.join(command.argv[:4])} ran past {timeout_s:.0f} s; last output:\n" + tail(text)
    )


def _read_until(
    fd: int, process: subprocess.Popen, deadline: float, marker: str | None
) -> str | None:
    """Everything ``fd`` gives until EOF (None past ``deadline``); with ``marker``, the
    process is stopped as soon as a complete line holds it."""
    chunks: list[bytes] = []
    pending = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            stop([process], groups=True)
            return None
        ready, _, _ = select.select([fd], [], [], min(left, 5.0))
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the terminal's other end is closed
            data = b""
        if not data:
            break
        chunks.append(data)
        if marker is not None:
            pending += data
            lines = pending.split(b"\n")
            pending = lines.pop()
            if any(marker.encode() in line for line in lines):
                stop([process], groups=True)
                break
    return _ANSI.sub("", b"".join(chunks).decode(errors="replace"))


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def finished(result: Any) -> Finished:
    return result if isinstance(result, Finished) else Finished(*result)
