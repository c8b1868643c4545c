"""One SSH connection per node (Fabric), with the few operations the runtimes need.

Every command string sent to a node is built here or by the callers with :func:`shell` /
:func:`shlex.quote`: no value from an inventory, a case or an environment reaches a remote
shell unquoted. A dropped connection is a :class:`NodeUnreachable`, never a hang: the TCP
socket gets a user timeout and SSH keepalives, so a node that dies silently is noticed within
``DEAD_AFTER_S`` seconds even while a long command is running on it.
"""

from __future__ import annotations

import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from driver.cluster.inventory import Node

if TYPE_CHECKING:
    import fabric
    import paramiko

KEEPALIVE_S = 5
# A node's heartbeat thread ends after this long without a heartbeat asked of it (between
# sessions); during a repeat it lives on, so no thread is started per heartbeat.
BEATER_IDLE_S = 60.0
# Threads shared by every fan-out (one task per node): started once, reused by every phase.
MAX_FANOUT_THREADS = 256
DEAD_AFTER_S = 30  # unacknowledged data older than this closes the connection (TCP_USER_TIMEOUT)
# Trusted host keys, as OpenSSH reads them: the user's file and the system-wide one.
USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"

T = TypeVar("T")
_KNOWN_HOSTS_WRITE = threading.Lock()  # nodes connect in parallel; one append at a time


class NodeUnreachable(RuntimeError):
    def __init__(self, node: str, detail: str) -> None:
        super().__init__(f"node {node}: SSH unreachable: {detail}")
        self.node, self.detail = node, detail


class UnknownHostKey(NodeUnreachable):
    """The node's host key is in no trusted known_hosts file (OpenSSH refuses it too)."""


def _host_key_policy(node: Node) -> paramiko.MissingHostKeyPolicy:
    """Unknown hosts: refused (``reject``, the default), or trusted on first use and recorded
    in the inventory's known_hosts file (``accept-new``, OpenSSH's StrictHostKeyChecking=
    accept-new). A known host whose key changed is refused either way (paramiko raises
    BadHostKeyException before asking the policy)."""
    import paramiko

    ssh = node.ssh
    own = ssh.known_hosts or USER_KNOWN_HOSTS
    searched = list(dict.fromkeys([USER_KNOWN_HOSTS, SYSTEM_KNOWN_HOSTS, own]))

    class Reject(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            raise UnknownHostKey(
                node.name,
                f"the host key of {hostname} ({key.get_name()}) is in no known_hosts file "
                f"({', '.join(searched)}); after checking its fingerprint, add it "
                f"(ssh-keyscan -p {ssh.port} {node.address} >> {own})"
                ", or set ssh.host_key_policy: accept-new in the inventory to record new hosts",
            )

    class AcceptNew(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            target = Path(ssh.known_hosts or USER_KNOWN_HOSTS).expanduser()
            line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
            with _KNOWN_HOSTS_WRITE:
                target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                with target.open("a") as known:
                    known.write(line)
            client.get_host_keys().add(hostname, key.get_name(), key)

    return AcceptNew() if ssh.host_key_policy == "accept-new" else Reject()


def _load_known_hosts(client: paramiko.SSHClient, node: Node) -> None:
    """Trust what OpenSSH would: the user's, the system's and the inventory's known_hosts.
    Loaded read-only: paramiko never rewrites them (accept-new only appends)."""
    client.load_system_host_keys()  # ~/.ssh/known_hosts, silently absent
    for path in (SYSTEM_KNOWN_HOSTS, node.ssh.known_hosts):
        if path and Path(path).expanduser().is_file():
            client.load_system_host_keys(str(Path(path).expanduser()))


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    def why(self) -> str:
        text = (self.stderr or self.stdout).strip().splitlines()
        return text[-1] if text else f"exit {self.code}"


def shell(argv: Sequence[str]) -> str:
    """argv as one POSIX shell word list, every element quoted."""
    return shlex.join(str(a) for a in argv)


def env_prefix(env: dict[str, str]) -> list[str]:
    """``env K=V ...`` argv (quoted later by :func:`shell`); keys are validated names."""
    return ["env", *(f"{k}={v}" for k, v in sorted(env.items()))] if env else []


class Remote:
    """A node reached over SSH with Fabric. Thread-safe for independent commands."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._connection: fabric.Connection | None = None
        self._lock = threading.Lock()
        self._last_answer = time.monotonic()
        self._beat_lock = threading.Lock()
        self._beat_wanted: threading.Event | None = None  # the running heartbeat thread's
        self._beat_transport: Any = None  # the transport that thread asks
        self._beater: threading.Thread | None = None
        self.connections_opened = 0  # how often this node was connected (one per session)

    # -- connection -----------------------------------------------------------------------
    def connection(self) -> fabric.Connection:
        with self._lock:
            if self._connection is not None and self._connection.is_connected:
                transport = self._connection.client.get_transport()
                if transport is not None and transport.is_active():
                    return self._connection
                self._close_locked()
            self._connection = self._connect()
            self.connections_opened += 1
            return self._connection

    def _connect(self) -> fabric.Connection:
        import fabric
        import paramiko

        ssh = self.node.ssh
        connect_kwargs: dict[str, Any] = {
            "banner_timeout": ssh.connect_timeout,
            "auth_timeout": ssh.connect_timeout,
        }
        if ssh.key:
            # Only the inventory's key: no agent or default keys that could log in as someone
            # else, and no passphrase prompt hanging a worker thread.
            connect_kwargs.update(key_filename=[ssh.key], look_for_keys=False, allow_agent=False)
        connection = fabric.Connection(
            host=self.node.address,
            user=ssh.user,
            port=ssh.port,
            connect_timeout=ssh.connect_timeout,
            connect_kwargs=connect_kwargs,
        )
        # Fabric's default is paramiko's AutoAddPolicy (any host key accepted, unrecorded).
        _load_known_hosts(connection.client, self.node)
        connection.client.set_missing_host_key_policy(_host_key_policy(self.node))
        try:
            connection.open()
        except UnknownHostKey:
            raise
        except paramiko.BadHostKeyException as error:
            raise NodeUnreachable(
                self.node.name,
                f"the host key of {error.hostname} changed (a reinstalled node, or someone in "
                "between); if the change is expected remove the old key with "
                f"ssh-keygen -R '[{self.node.address}]:{ssh.port}' and connect again",
            ) from None
        except Exception as error:  # noqa: BLE001 - every way of not connecting is one verdict
            raise NodeUnreachable(self.node.name, _describe(error)) from None
        transport = connection.client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE_S)
            sock = transport.sock
            if isinstance(sock, socket.socket):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                if hasattr(socket, "TCP_USER_TIMEOUT"):
                    sock.setsockopt(
                        socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, DEAD_AFTER_S * 1000
                    )
        return connection

    def alive(self) -> bool:
        connection = self._connection
        if connection is None:
            return False
        transport = connection.client.get_transport()
        return transport is not None and transport.is_active()

    def heartbeat(self) -> None:
        """Ask sshd for an answer (a keepalive request) without waiting for it here.

        TCP keepalives only catch a node whose network is gone; a node that hangs (its sshd
        no longer scheduled) still ACKs packets. An unanswered request is what shows it.
        One thread per connection sends the requests, one at a time, and lives as long as
        heartbeats are asked for: starting a thread per heartbeat cost the watch loop tens of
        milliseconds per node on a busy head (``Thread.start`` waits for the thread to run).
        """
        connection = self._connection
        transport = connection.client.get_transport() if connection is not None else None
        if transport is None or not transport.is_active():
            return
        with self._beat_lock:
            beater = self._beater
            if (
                beater is not None
                and beater.is_alive()
                and self._beat_transport is transport
                and self._beat_wanted is not None
            ):
                self._beat_wanted.set()  # already asking (or waiting for an answer): one more
                return
            wanted = threading.Event()
            wanted.set()
            self._beat_wanted, self._beat_transport = wanted, transport
            self._beater = threading.Thread(
                target=self._beat, args=(transport, wanted), daemon=True,
                name=f"heartbeat-{self.node.name}",
            )  # fmt: skip
            self._beater.start()

    def _beat(self, transport: paramiko.Transport, wanted: threading.Event) -> None:
        while wanted.wait(BEATER_IDLE_S):
            wanted.clear()
            if not transport.is_active():
                return  # a dropped connection shows as not alive(); a new one gets a new thread
            try:
                # Blocks while sshd does not answer (a hung node): silent_for() grows.
                transport.global_request("keepalive@openssh.com", wait=True)
            except Exception:  # noqa: BLE001 - a dead transport shows as not alive()
                return
            if transport.is_active():
                self._last_answer = time.monotonic()

    def silent_for(self) -> float:
        """Seconds since sshd last answered a heartbeat (or since :meth:`reset_silence`)."""
        return time.monotonic() - self._last_answer

    def reset_silence(self) -> None:
        self._last_answer = time.monotonic()

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            except Exception:  # noqa: BLE001 - closing a dead connection may fail any way
                pass
            self._connection = None

    # -- commands -------------------------------------------------------------------------
    def docker(self, *args: str) -> list[str]:
        """argv of the node's docker client (its DOCKER_HOST, when the inventory sets one)."""
        prefix = ["env", f"DOCKER_HOST={self.node.docker_host}"] if self.node.docker_host else []
        return [*prefix, "docker", *args]

    def run(self, command: str, timeout: float | None = 60) -> Result:
        """Run a shell command string (already quoted); raises NodeUnreachable, never hangs.

        One SSH channel on the node's connection, read in the calling thread: no helper
        threads per command (Fabric's ``run`` starts two or three, and polls), which at 32
        nodes was a large part of the head's own cost.
        """
        code, stdout, stderr = self.run_bytes(command, timeout)
        return Result(code, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace"))

    def run_bytes(
        self, command: str, timeout: float | None = 60, *, stdin: bytes = b""
    ) -> tuple[int, bytes, bytes]:
        """:meth:`run` with the output as the node wrote it, byte for byte (a log fetched
        with the command that also cleans up after it: one round trip instead of an SFTP
        transfer and a command); ``stdin`` is sent to the command, then its end."""
        deadline = None if timeout is None else time.monotonic() + timeout
        connection = self.connection()
        try:
            transport = connection.client.get_transport()
            channel = transport.open_session(timeout=timeout)
        except Exception as error:  # noqa: BLE001 - a broken transport surfaces many ways
            self.close()
            raise NodeUnreachable(self.node.name, _describe(error)) from None
        try:
            channel.exec_command(command)
            if stdin:
                channel.settimeout(_remaining(deadline))
                channel.sendall(stdin)
            channel.shutdown_write()  # a command reading stdin sees its end
            stdout, stderr = _read_streams(channel, deadline)
            if not channel.status_event.wait(_remaining(deadline)):
                raise TimeoutError
            code = channel.recv_exit_status()
        except TimeoutError:
            return 124, b"", f"timed out after {timeout} s: {command[:200]}".encode()
        except Exception as error:  # noqa: BLE001 - a broken transport surfaces many ways
            self.close()
            raise NodeUnreachable(self.node.name, _describe(error)) from None
        finally:
            channel.close()
        if code == -1 or not self.alive():  # the channel closed without a status
            self.close()
            raise NodeUnreachable(self.node.name, "the connection closed during a command")
        return code, stdout, stderr

    def run_argv(self, argv: Sequence[str], timeout: float | None = 60) -> Result:
        return self.run(shell(argv), timeout=timeout)

    def start(self, command: str) -> paramiko.Channel:
        """Start a command without waiting: the caller polls the channel for its exit."""
        connection = self.connection()
        try:
            channel = connection.client.get_transport().open_session()
            channel.exec_command(command)
        except Exception as error:  # noqa: BLE001
            self.close()
            raise NodeUnreachable(self.node.name, _describe(error)) from None
        return channel


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _read_streams(channel: paramiko.Channel, deadline: float | None) -> tuple[bytes, bytes]:
    """stdout and stderr to their end (EOF, or the channel closing), read together so that
    neither fills the channel's window while the other is awaited; TimeoutError past the
    deadline. The channel's ``fileno`` is a pipe paramiko signals on data of either stream
    and on its end: the calling thread sleeps in ``select`` until then, no polling."""
    stdout, stderr = bytearray(), bytearray()

    def drain() -> None:
        while channel.recv_ready():
            stdout.extend(channel.recv(65536))
        while channel.recv_stderr_ready():
            stderr.extend(channel.recv_stderr(65536))

    while True:
        drain()
        if channel.eof_received or channel.closed:
            drain()  # the transport queued every byte before the end: all of it is here
            return bytes(stdout), bytes(stderr)
        remaining = _remaining(deadline)
        if remaining == 0.0:
            raise TimeoutError
        select.select([channel], [], [], remaining)


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}" if type(error).__name__ not in text else text


_shared_pool: ThreadPoolExecutor | None = None
_shared_pool_lock = threading.Lock()
_in_shared_pool = threading.local()


def _mark_shared_worker() -> None:
    _in_shared_pool.active = True


def _fanout_pool() -> ThreadPoolExecutor:
    """The threads every fan-out shares: started on first use, idle between phases."""
    global _shared_pool
    with _shared_pool_lock:
        if _shared_pool is None:
            _shared_pool = ThreadPoolExecutor(
                max_workers=MAX_FANOUT_THREADS,
                thread_name_prefix="dlperf-node",
                initializer=_mark_shared_worker,
            )
        return _shared_pool


def parallel(
    items: Iterable[T], work: Callable[[T], Any], *, workers: int | None = None
) -> list[tuple[T, Any, BaseException | None]]:
    """Run ``work`` on every item at once; (item, result, error) in the items' order.

    Without ``workers`` the shared pool runs them (up to ``MAX_FANOUT_THREADS`` at once, its
    threads reused across calls); ``workers`` bounds the concurrency with a pool of that size
    (e.g. image pushes), and a fan-out from inside a fan-out gets its own pool, so that the
    shared one can never wait on itself.
    """
    items = list(items)
    if not items:
        return []
    private = workers is not None or getattr(_in_shared_pool, "active", False)
    pool = (
        ThreadPoolExecutor(max_workers=min(workers or len(items), len(items)))
        if private
        else _fanout_pool()
    )
    futures = []
    try:
        futures = [pool.submit(work, item) for item in items]
        out = []
        for item, future in zip(items, futures, strict=True):
            try:
                out.append((item, future.result(), None))
            except Exception as error:  # noqa: BLE001 - the caller decides per node
                out.append((item, None, error))
    finally:
        # Even on Ctrl-C: the caller's cleanup must not race this fan-out's node commands.
        if private:
            pool.shutdown(wait=True)
        else:
            wait(futures)
    return out
