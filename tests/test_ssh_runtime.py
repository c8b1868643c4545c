"""The SSH runtimes' watch state machine, on fake nodes: which event ends a repeat, and how.

The real-sshd tests (test_cluster_process.py, test_cluster_docker.py) run these paths end to
end; here each transition is driven exactly: a node's exit, a dropped connection, a silent
sshd, the timeout.
"""

from __future__ import annotations

import os
import select
import threading
import time
from dataclasses import dataclass, field

import pytest

from driver.bench.protocol import EXIT_OOM
from driver.cluster.remote import parallel
from driver.runtimes.base import Verdict
from driver.runtimes.plan import NodeCommand
from driver.runtimes.ssh import watch as watch_module
from driver.runtimes.ssh.launch import Launch
from driver.runtimes.ssh.runtime import SshRuntime


@dataclass
class FakeChannel:
    status: int | None = None  # None: still running
    pending: bytes = b""  # stdout not read yet
    eof_received: bool | None = None  # None: the end comes with the exit status
    closed: bool = False

    def exit_status_ready(self) -> bool:
        return self.status is not None

    def recv_exit_status(self) -> int:
        assert self.status is not None
        return self.status

    def recv_ready(self) -> bool:
        return bool(self.pending)

    def recv(self, size: int) -> bytes:
        chunk, self.pending = self.pending[:size], self.pending[size:]
        return chunk

    def recv_stderr_ready(self) -> bool:
        return False

    def fileno(self) -> int:
        """A pipe readable while the channel has news (output not read, its end), as
        paramiko's: the watch sleeps on it."""
        if "_news" not in self.__dict__:
            self.__dict__["_news"] = os.pipe()
            self._signal()
        return self.__dict__["_news"][0]

    def _signal(self) -> None:
        news = self.__dict__.get("_news")
        if news is None:
            return
        readable = bool(select.select([news[0]], [], [], 0)[0])
        wanted = bool(self.pending) or self.eof_received or self.closed
        if wanted and not readable:
            os.write(news[1], b"x")
        elif readable and not wanted:
            os.read(news[0], 1)

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        self._signal()

    def __getattribute__(self, name: str):  # noqa: ANN204 - eof follows the exit by default
        if name == "eof_received" and object.__getattribute__(self, name) is None:
            return object.__getattribute__(self, "status") is not None
        return object.__getattribute__(self, name)


@dataclass
class FakeNode:
    name: str


@dataclass
class FakeRemote:
    node: FakeNode
    up: bool = True
    silence_s: float = 0.0
    beats: int = 0
    closed: bool = field(default=False)

    def alive(self) -> bool:
        return self.up

    def heartbeat(self) -> None:
        self.beats += 1

    def silent_for(self) -> float:
        return self.silence_s

    def reset_silence(self) -> None:
        self.silence_s = 0.0

    def close(self) -> None:
        self.closed = True


def launches(*statuses: int | None) -> list[Launch]:
    out = []
    for index, status in enumerate(statuses):
        remote = FakeRemote(FakeNode(f"node{index}"))
        launch = Launch(index, remote, NodeCommand(f"node{index}", ["true"]), f"run{index}", "/x")
        launch.channel = FakeChannel(status)
        out.append(launch)
    return out


def watch(items: list[Launch], timeout_s: float = 5.0) -> tuple[Verdict, str]:
    runtime = SshRuntime.__new__(SshRuntime)  # no inventory needed for the state machine
    runtime._dirty = set()
    return runtime._watch(items, timeout_s)


def test_every_node_exiting_zero_is_ok() -> None:
    assert watch(launches(0, 0)) == (Verdict.OK, "")


def test_the_first_failing_node_names_the_verdict() -> None:
    verdict, detail = watch(launches(0, 3))
    assert verdict == Verdict.FAILED and detail == "node node1: exit 3"


def test_exit_86_is_out_of_memory() -> None:
    verdict, detail = watch(launches(EXIT_OOM, None))
    assert verdict == Verdict.OOM and "out of memory" in detail and "node0" in detail


def test_a_dropped_connection_is_a_lost_node() -> None:
    items = launches(None, None)
    items[1].remote.up = False
    runtime = SshRuntime.__new__(SshRuntime)
    runtime._dirty = set()
    verdict, detail = runtime._watch(items, 5.0)
    assert verdict == Verdict.NODE_LOST and "node1" in detail and "dropped" in detail
    assert runtime._dirty == {"node1"}  # its leftovers are swept before its next use


def test_a_node_whose_sshd_stays_silent_is_lost_and_its_connection_closed() -> None:
    items = launches(None, None)
    items[0].remote.reset_silence = lambda: None  # type: ignore[method-assign]
    items[0].remote.silence_s = SshRuntime.silence_limit_s + 1
    verdict, detail = watch(items)
    assert verdict == Verdict.NODE_LOST and "did not answer" in detail
    assert items[0].remote.closed


def test_a_repeat_that_runs_past_its_timeout_names_the_nodes_still_running() -> None:
    verdict, detail = watch(launches(0, None), timeout_s=0.1)
    assert verdict == Verdict.TIMEOUT and "still running on node1" in detail


def test_a_signal_with_the_connection_up_is_a_failure_not_a_lost_node() -> None:
    # -1: no exit status came (sshd sent exit-signal, which paramiko ignores).
    verdict, detail = watch(launches(-1, None))
    assert verdict == Verdict.FAILED and "killed by a signal" in detail


@pytest.mark.parametrize("status", [1, 2, 137])
def test_any_other_exit_is_a_failure(status: int) -> None:
    assert watch(launches(status))[0] == Verdict.FAILED


def test_parallel_runs_every_item_at_once_beyond_the_old_cap_of_32() -> None:
    # Every item waits for all the others: only a fan-out running all 40 at once gets through.
    count = 40
    everyone = threading.Barrier(count, timeout=30)
    results = parallel(range(count), lambda item: (everyone.wait(), item * 2)[1])
    assert [(item, result, error) for item, result, error in results] == [
        (item, item * 2, None) for item in range(count)
    ]


def test_parallel_inside_parallel_never_waits_on_itself() -> None:
    results = parallel(range(3), lambda outer: [r for _, r, _ in parallel(range(3), str)])
    assert [result for _, result, _ in results] == [["0", "1", "2"]] * 3


def test_parallel_returns_each_error_beside_its_item() -> None:
    def work(item: int) -> int:
        if item == 1:
            raise ValueError("node1 said no")
        return item

    results = parallel([0, 1, 2], work)
    assert [(item, result) for item, result, _ in results] == [(0, 0), (1, None), (2, 2)]
    assert str(results[1][2]) == "node1 said no" and results[0][2] is None


def block_output(run_id: str, block: bytes) -> bytes:
    return (
        b"motd from a noisy .bashrc\n" + f"dlperf-collected {run_id}\n".encode() + block
        + f"\ndlperf-collected-end {run_id}\n".encode()
    )  # fmt: skip


def test_a_node_that_exited_is_done_only_once_its_collection_has_arrived() -> None:
    """The exit status can come before the last bytes of the log sent after the process:
    the repeat is not over (and the channel not closed) until the channel's end."""
    items = launches(0, 0)
    late = items[1].channel
    late.eof_received = False
    whole = block_output("run1", b"head\nlog")
    late.pending, rest = whole[:40], whole[40:]

    def end_later() -> None:
        late.pending += rest
        late.eof_received = True

    timer = threading.Timer(0.3, end_later)
    started = time.monotonic()
    timer.start()
    try:
        assert watch(items) == (Verdict.OK, "")
    finally:
        timer.cancel()
    assert time.monotonic() - started >= 0.3  # it waited for the end, not just the exit
    assert items[1].output_ended and items[1].collected_block() == b"head\nlog"


def test_the_watch_sleeps_until_a_channel_has_news_and_wakes_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two nodes quiet for 1.2 s, then both exit: the watch wakes a few times (its WAKE_S
    checks of the connections), not every POLL_S, and sees the end at once, not at the next
    check."""
    items = launches(None, None)
    wakes: list[float] = []
    original = watch_module.wait_for_news

    def counted(*args, **kwargs) -> None:  # noqa: ANN002, ANN003
        original(*args, **kwargs)
        wakes.append(time.monotonic())

    monkeypatch.setattr(watch_module, "wait_for_news", counted)
    ended: list[float] = []

    def end_both() -> None:
        ended.append(time.monotonic())
        for launch in items:
            launch.channel.status = 0  # its end (EOF with the exit) makes its pipe readable

    timer = threading.Timer(1.2, end_both)
    timer.start()
    try:
        assert watch(items) == (Verdict.OK, "")
    finally:
        timer.cancel()
    done = time.monotonic()
    assert len(wakes) <= 1.2 / 0.5 + 3, wakes  # polling every 50 ms: ~24 wakes
    assert done - ended[0] < 0.1, f"the end was seen {done - ended[0]:.2f} s late"


@pytest.mark.parametrize(
    "log",
    [
        b"",
        b"no newline at the end",
        b"line\n\n",
        b"dlperf-collected-end run0\na log that quotes the markers\ndlperf-collected run0\n",
        bytes(range(256)),
    ],
)
def test_the_collection_block_comes_back_byte_for_byte(log: bytes) -> None:
    launch = launches(0)[0]
    launch.output.extend(block_output("run0", b"facts\n" + log))
    launch.output_ended = True
    assert launch.collected_block() == b"facts\n" + log


def test_a_collection_cut_short_is_not_taken() -> None:
    """Without the end marker (the command stopped while sending), the block is not used:
    the node's collection runs again as a command of its own."""
    launch = launches(0)[0]
    whole = block_output("run0", b"facts\nlog")
    launch.output.extend(whole[: whole.rindex(b"dlperf-collected-end")])
    launch.output_ended = True
    assert launch.collected_block() is None
    other = launches(0)[0]
    other.output.extend(block_output("another-run", b"facts\nlog"))
    other.output_ended = True
    assert other.collected_block() is None  # another run's block is not this one's
