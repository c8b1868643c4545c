"""A barrier over TCP for the calibration workload, which has no framework to lend it one.

stdlib only: it runs wherever the workload runs (any node, any runtime). Rank 0 listens at the
rendezvous every runtime exports (``MASTER_ADDR``:``MASTER_PORT``); every other rank connects
once and keeps its connection for every barrier. A barrier: each peer sends one byte, rank 0
waits for all of them, then answers each. A peer that dies closes its connection, so the
others fail with a message instead of waiting forever.

Why the calibration needs one: without it, its ranks start seconds apart (32 Python processes
start one after another on a small host) and the first ones exit while the last still run, so
each rank's window ends while its peers' start-up or exit takes the CPU, and the slowest rank's
window (the job's duration) is late by that much. A real data-parallel job has no such phase
shift: its collectives keep the ranks together, and the benchmark loop's barriers start their
clocks together and keep every rank alive until the last has logged its last step.
"""

from __future__ import annotations

import socket
import time

CONNECT_RETRY_S = 0.05


class BarrierError(RuntimeError):
    """A peer left, or never came, within the timeout."""


def _receive_byte(connection: socket.socket, peer: str) -> None:
    if not connection.recv(1):
        raise BarrierError(f"calibration barrier: {peer} closed its connection (it exited)")


def _receive_rank(connection: socket.socket) -> int | None:
    """A peer's hello: its rank as 8 bytes; None if the connection ends first."""
    hello = b""
    while len(hello) < 8:
        chunk = connection.recv(8 - len(hello))
        if not chunk:
            return None
        hello += chunk
    return int.from_bytes(hello, "big")


class TcpBarrier:
    """``wait()`` returns once every rank of the job has called it."""

    def __init__(
        self, rank: int, world_size: int, address: str, port: int, timeout_s: float = 600.0
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.peers: dict[int, socket.socket] = {}  # rank 0: one connection per other rank
        self.master: socket.socket | None = None  # other ranks: the connection to rank 0
        if rank == 0:
            self._accept_peers(address, port)
        else:
            self._connect(address, port)

    def _accept_peers(self, address: str, port: int) -> None:
        family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]  # IPv6 too
        with socket.create_server(
            (address, port), family=family, backlog=self.world_size
        ) as server:
            server.settimeout(self.timeout_s)
            while len(self.peers) < self.world_size - 1:
                try:
                    connection, _ = server.accept()
                except TimeoutError:
                    missing = sorted(set(range(1, self.world_size)) - set(self.peers))
                    raise BarrierError(
                        f"calibration barrier: ranks {missing} did not connect to "
                        f"{address}:{port} within {self.timeout_s:.0f} s"
                    ) from None
                connection.settimeout(self.timeout_s)
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                rank = _receive_rank(connection)
                if rank is None or not 0 < rank < self.world_size or rank in self.peers:
                    connection.close()  # not one of our ranks (a port scan): wait for them
                    continue
                self.peers[rank] = connection

    def _connect(self, address: str, port: int) -> None:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                self.master = socket.create_connection((address, port), timeout=self.timeout_s)
                break
            except OSError as error:  # rank 0 is not listening yet
                if time.monotonic() > deadline:
                    raise BarrierError(
                        f"calibration barrier: rank {self.rank} could not reach rank 0 at "
                        f"{address}:{port} within {self.timeout_s:.0f} s ({error})"
                    ) from None
                time.sleep(CONNECT_RETRY_S)
        self.master.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.master.sendall(self.rank.to_bytes(8, "big"))

    def wait(self) -> None:
        try:
            if self.master is not None:
                self.master.sendall(b"b")
                _receive_byte(self.master, "rank 0")
                return
            for rank, connection in self.peers.items():
                _receive_byte(connection, f"rank {rank}")
            for connection in self.peers.values():
                connection.sendall(b"g")
        except TimeoutError:
            raise BarrierError(
                f"calibration barrier: rank {self.rank} waited {self.timeout_s:.0f} s for a peer"
            ) from None

    def close(self) -> None:
        for connection in [*self.peers.values(), *([self.master] if self.master else [])]:
            connection.close()
        self.peers, self.master = {}, None
