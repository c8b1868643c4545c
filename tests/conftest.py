"""Shared fixtures, and where each test runs. Cluster fixtures (real sshd nodes, docker) live in
tests/cluster_fixtures.py.

``make test`` runs the suite on two pytest-xdist workers. Every module with a test that starts
daemons (docker and its image builds, podman, sshd, Slurm, network namespaces: DAEMON_MODULES)
runs on one worker, as one unit, one test after another: no two tests share an engine, a cluster,
a subnet or a node pool at once, and each session-scoped cluster or image is made once. The rest
(training in real frameworks, releases, audits, parsers) spreads over both workers, module by
module, so that their CPU work overlaps the daemons' waits (image downloads, cluster starts).
The rehearsals and selftests hold the kit to what the workload itself delivered (``dlperf
selftest``'s truth), so the other worker's load lengthens their windows without failing them.
The few tests that time the host's own scheduling (wake-ups, a barrier's release: marked
``timing``) run after the others, in one process, with nothing beside them.

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


# Fixtures (transitively) that start a daemon.
DAEMON_FIXTURES = frozenset(
    {"docker_engine", "_ssh_node_pool", "slurm_cluster", "slurm_hosts", "simulated_hosts",
     "loopback_hosts", "can_make_hosts", "node_without_sftp"}
)  # fmt: skip
# Modules whose tests start their daemons themselves (no fixture tells).
SELF_STARTING_MODULES = frozenset({"test_simhosts", "test_slurm_cluster", "test_rehearse_run"})
# Every module with a daemon test: under xdist, each such module runs in the one ``daemons``
# unit of work (DaemonsTogether). Collection fails, naming this list, for a module missing here.
DAEMON_MODULES = SELF_STARTING_MODULES | {
    "test_cluster_docker", "test_cluster_podman", "test_cluster_process", "test_cluster_push",
    "test_images", "test_inventory", "test_llama_runs", "test_local_copy", "test_nodescan",
    "test_preflight", "test_rehearsal", "test_release_slow_node", "test_slow_node",
    "test_slurm_oci", "test_slurm_runtime", "test_slurm_upstream_runs",
}  # fmt: skip
# Modules whose tests time the host's own scheduling (wake-ups, barriers): run after the rest.
TIMING_MODULES = frozenset({"test_calibration"})
# Modules whose tests train in a framework's environment (.venvs) or an upstream source's.
FRAMEWORK_MODULES = frozenset(
    {"test_tensorflow", "test_paddle", "test_mxnet", "test_oneflow", "test_tf32",
     "test_pypi_upstream", "test_datasets_bert", "test_parity", "test_llama_runs",
     "test_release_beside_published", "test_gpu_check"}
)  # fmt: skip
FAST_TIER = os.environ.get("DLPERF_TEST_TIER") == "fast"


def module_of(nodeid: str) -> str:
    return nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unlisted = set()
    for item in items:
        module = module_of(item.nodeid)
        uses = DAEMON_FIXTURES & set(getattr(item, "fixturenames", ()))
        if uses or module in SELF_STARTING_MODULES:
            item.add_marker(pytest.mark.daemons)
            if module not in DAEMON_MODULES:
                unlisted.add(f"{item.nodeid.split('::')[0]} ({', '.join(sorted(uses))})")
        if module in FRAMEWORK_MODULES:
            item.add_marker(pytest.mark.frameworks)
        if module in TIMING_MODULES:
            item.add_marker(pytest.mark.timing)
    if unlisted:
        raise pytest.UsageError(
            f"{', '.join(sorted(unlisted))}: starts daemons through these fixtures; add the "
            "module to DAEMON_MODULES in tests/conftest.py, so that under xdist it runs in the "
            "daemons unit, never beside another cluster"
        )


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent where it is not loaded
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Modules in DAEMON_MODULES make one unit of work, run by one worker in order; every other
    module is a unit of its own (its module-scoped fixtures made once), spread over the workers
    as they free up. pytest-xdist's own ``--dist loadgroup`` would do it by marks, but it names
    the group in ``item._nodeid``, which pytest 9 no longer reads."""
    from xdist.scheduler import LoadScopeScheduling

    class DaemonsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "daemons" if module_of(nodeid) in DAEMON_MODULES else nodeid.split("::")[0]

    return DaemonsTogether(config, log)


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

