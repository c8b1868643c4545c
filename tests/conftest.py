"""Shared fixtures. Cluster fixtures (real sshd nodes, docker) live in tests/cluster_fixtures.py."""

from __future__ import annotations

import os

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
