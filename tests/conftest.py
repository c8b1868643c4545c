"""Shared fixtures, and where each test runs. Cluster fixtures (real sshd nodes, docker) live in
tests/cluster_fixtures.py.

``make test`` runs the suite on two pytest-xdist workers (``--dist loadgroup``). Every test that
starts daemons (marked ``daemons`` here) runs in one of two groups, each on one worker, one test
after another: ``docker`` (the engine, its image builds, podman) and ``daemons`` (sshd, Slurm,
network namespaces). So no two tests share an engine, a cluster or a node pool at once, and each
session-scoped cluster or image is made once; the image builds (mostly downloads and unpacking)
overlap the clusters' waits. The rest (training in real frameworks, releases, audits, parsers)
spreads over both workers. The rehearsals and selftests hold the kit to what the workload itself
delivered (``dlperf selftest``'s truth), so the other worker's load lengthens their windows
without failing them. The few tests that time the host's own scheduling (wake-ups, a barrier's
release: marked ``timing``) run after the others, in one process, with nothing beside them.

``make test-fast`` leaves out the ``daemons`` and ``frameworks`` tests (a framework's
environment, an image build): the edit loop's tier. A test in that tier that reaches for a
framework's environment fails, naming the mark it lacks.
"""

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


# Fixtures (transitively) that start a daemon, and modules whose tests start their own.
DAEMON_FIXTURES = frozenset(
    {"docker_engine", "_ssh_node_pool", "slurm_cluster", "slurm_hosts", "simulated_hosts",
     "loopback_hosts", "can_make_hosts", "node_without_sftp"}
)  # fmt: skip
DAEMON_MODULES = frozenset(
    {"test_simhosts", "test_slurm_cluster", "test_rehearse_run", "test_cluster_podman"}
)  # fmt: skip
# Modules whose tests time the host's own scheduling (wake-ups, barriers): run after the rest.
TIMING_MODULES = frozenset({"test_calibration"})
# Modules whose tests train in a framework's environment (.venvs) or an upstream source's.
FRAMEWORK_MODULES = frozenset(
    {"test_tensorflow", "test_paddle", "test_mxnet", "test_oneflow", "test_tf32",
     "test_pypi_upstream", "test_datasets_bert", "test_parity", "test_llama_runs",
     "test_release_beside_published", "test_gpu_check"}
)  # fmt: skip
FAST_TIER = os.environ.get("DLPERF_TEST_TIER") == "fast"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
        fixtures = set(getattr(item, "fixturenames", ()))
        if module in DAEMON_MODULES or DAEMON_FIXTURES & fixtures:
            item.add_marker(pytest.mark.daemons)
            engine = "docker_engine" in fixtures or module == "test_cluster_podman"
            item.add_marker(pytest.mark.xdist_group("docker" if engine else "daemons"))
        if module in FRAMEWORK_MODULES:
            item.add_marker(pytest.mark.frameworks)
        if module in TIMING_MODULES:
            item.add_marker(pytest.mark.timing)


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


@pytest.fixture(autouse=FAST_TIER)
def _fast_tier_makes_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """In ``make test-fast``, a test that reaches for a framework's environment fails at once,
    naming the mark it lacks, instead of making or starting one."""
    from driver.frameworks import envs

    def refuse(*_args: object, **_kwargs: object) -> None:
        pytest.fail(
            "this test uses a framework's environment: add its module to FRAMEWORK_MODULES in "
            "tests/conftest.py (make test-fast leaves those out)"
        )

    monkeypatch.setattr(envs, "ensure_env", refuse)

