"""Shared fixtures. Cluster fixtures (real sshd nodes, docker) live in tests/cluster_fixtures.py."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator

import pytest

pytest_plugins = (
    ["tests.cluster_fixtures"]
    if os.path.exists(os.path.join(os.path.dirname(__file__), "cluster_fixtures.py"))
    else []
)


def require_real(reason: str) -> None:
    """Skip a test that needs a real engine/daemon, but fail under CI (DLPERF_REQUIRE_REAL=1)."""
    if os.environ.get("DLPERF_REQUIRE_REAL") == "1":
        pytest.fail(f"required in CI but unavailable: {reason}")
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def _ssh_connections_end_with_their_test() -> Iterator[None]:
    """Close the SSH connections a test left open (runtimes built in a test are not closed by
    it): each keeps a paramiko thread waking every 0.1 s, and dozens of them by the end of the
    suite take CPU from the tests that time things."""
    yield
    paramiko = sys.modules.get("paramiko")
    if paramiko is None:
        return
    for thread in threading.enumerate():
        if isinstance(thread, paramiko.Transport) and thread.is_alive():
            thread.close()
