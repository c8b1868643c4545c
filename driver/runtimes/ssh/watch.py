"""Which event ends a repeat over SSH: the first non-zero exit, a dropped connection, a node
whose sshd stops answering keepalive requests (hung, or its network gone), or the timeout.

The watch sleeps until a launch channel has news, so that the driver's own CPU per repeat does
not grow with nodes x seconds.
"""

from __future__ import annotations

import selectors
import time

from driver.bench.protocol import EXIT_OOM
from driver.runtimes.base import Verdict
from driver.runtimes.ssh.launch import Launch

POLL_S = 0.05
# The watch sleeps until a launch channel has news (output, its end), or this long at most:
# how often a lost connection or a silent node is looked for.
WAKE_S = 0.5
HEARTBEAT_S = 2.0  # how often each node's sshd is asked for an answer during a repeat


def watch(launches: list[Launch], timeout_s: float, silence_limit_s: float) -> tuple[Verdict, str]:
    """Until every node's command has exited 0 and its collection has arrived whole (OK), or
    the first event that ends the repeat for every node; a lost node's ``lost`` says why."""
    with selectors.DefaultSelector() as news:
        return _watch_with(launches, timeout_s, silence_limit_s, news)


def _watch_with(
    launches: list[Launch],
    timeout_s: float,
    silence_limit_s: float,
    news: selectors.BaseSelector,
) -> tuple[Verdict, str]:
    deadline = time.monotonic() + timeout_s
    next_beat = 0.0
    for launch in launches:
        launch.remote.reset_silence()
    while True:
        if time.monotonic() >= next_beat:
            next_beat = time.monotonic() + HEARTBEAT_S
            for launch in launches:
                if launch.exit_code is None:
                    launch.remote.heartbeat()
        for launch in launches:
            if not launch.lost:
                launch.read_channel()
            if launch.exit_code is not None or launch.lost:
                continue
            channel = launch.channel
            if channel.exit_status_ready():
                status = channel.recv_exit_status()
                # -1: no exit status came. With the connection up that is a process
                # killed by a signal (sshd sends exit-signal, which paramiko ignores).
                if status == -1 and not launch.remote.alive():
                    launch.lost = "the SSH connection dropped during the repeat"
                else:
                    launch.exit_code = status
            elif not launch.remote.alive():
                launch.lost = "the SSH connection dropped during the repeat"
            elif launch.remote.silent_for() > silence_limit_s:
                launch.lost = (
                    f"sshd did not answer for {silence_limit_s:.0f} s (node hung or unreachable)"
                )
                launch.remote.close()
            if launch.lost:
                return Verdict.NODE_LOST, f"node {launch.remote.node.name}: {launch.lost}"
            if launch.exit_code not in (None, 0):
                return exit_verdict(launch)
        # Done when every node's command has exited 0 and its collection has arrived whole.
        if all(launch.exit_code == 0 and launch.ended for launch in launches):
            return Verdict.OK, ""
        if time.monotonic() > deadline:
            running = [x.remote.node.name for x in launches if x.exit_code is None]
            return (
                Verdict.TIMEOUT,
                f"ran past the timeout of {timeout_s:.0f} s (still running on "
                f"{', '.join(running)})",
            )
        wake_by = min(next_beat, deadline, time.monotonic() + WAKE_S)
        wait_for_news(launches, news, wake_by)


def wait_for_news(launches: list[Launch], news: selectors.BaseSelector, wake_by: float) -> None:
    """Sleep until a launch channel has something to read or has ended (its paramiko pipe
    turns readable), or until ``wake_by``. Polling every node every 50 ms instead cost the
    driver CPU in proportion to nodes x seconds (32 nodes: 0.15 s of CPU per 5 s repeat).
    A channel whose output has ended stays readable, so it leaves the selector; while such
    a node's exit status is still on its way, and for a launch without a channel, the
    watch polls."""
    poll = False
    for launch in launches:
        channel = launch.channel
        if channel is None:
            poll = True
            continue
        fd = channel.fileno()
        watched = fd in news.get_map()
        if launch.output_ended:
            if watched:
                news.unregister(fd)
            poll = poll or not launch.ended
        elif not watched:
            news.register(fd, selectors.EVENT_READ)
    timeout = max(0.0, wake_by - time.monotonic())
    if poll:
        timeout = min(timeout, POLL_S)
    if news.get_map():
        news.select(timeout)
    else:
        time.sleep(timeout)


def exit_verdict(launch: Launch) -> tuple[Verdict, str]:
    code = launch.exit_code
    where = f"node {launch.remote.node.name}"
    if code == EXIT_OOM:
        return Verdict.OOM, f"{where}: out of memory (exit {EXIT_OOM})"
    if code == -1:
        return Verdict.FAILED, f"{where}: killed by a signal"
    return Verdict.FAILED, f"{where}: exit {code}"
