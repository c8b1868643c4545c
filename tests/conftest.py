"""Shared fixtures, and where each test runs. Cluster fixtures (real sshd nodes, docker) live in
tests/cluster_fixtures.py.

``make test`` runs the suite on two pytest-xdist workers. The modules with a test that starts
daemons form two units of work, each run by one worker, one test after another: ``docker`` (the
engine, its image builds, podman, Slurm's OCI containers) and ``daemons`` (sshd nodes, Slurm
clusters, simulated hosts). No two tests share an engine, a cluster or a node pool at once, each
session-scoped image or node pool is made once per unit, and the two units' clusters never meet
(their own namespaces, links and claimed subnets). The rest (training in real frameworks,
releases, audits, parsers) spreads over both workers module by module, so that their CPU work
overlaps the daemons' waits (image downloads, cluster starts).
The rehearsals and selftests hold the kit to what the workload itself delivered (``dlperf
selftest``'s truth), so the other worker's load lengthens their windows without failing them.
The few tests that time the host's own scheduling (wake-ups, a barrier's release: marked
``timing``) run after the others, in one process, with nothing beside them.

``make test-fast`` leaves out the ``daemons`` and ``frameworks`` tests (a framework's
environment, an image build), the ``slow`` corpora and the ``timing`` tests: the edit loop's
tier. A test in that tier that reaches for a framework's environment fails, naming the mark it
lacks (a module's tests are marked here, a lone test by its own decorator).
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
     "loopback_hosts", "can_make_hosts", "node_without_sftp", "pyxis_cluster"}
)  # fmt: skip
# Modules whose tests start their daemons (or podman's build containers) themselves: no fixture
# tells.
SELF_STARTING_MODULES = frozenset(
    {"test_simhosts", "test_slurm_cluster", "test_rehearse_run", "test_podman_images"}
)
# Every module with a daemon test belongs to one of two units of work; under xdist each unit runs
# on one worker, one test after another (DaemonsTogether), the two side by side. Collection
# fails, naming these lists, for a module missing here.
# - docker: the engine and its image builds (and what needs an image: podman, Slurm's OCI
#   containers, pyxis's enroot imports, the upstream sources' images under Slurm);
DOCKER_MODULES = frozenset(
    {"test_cluster_docker", "test_cluster_podman", "test_cluster_push", "test_images",
     "test_local_container", "test_local_copy", "test_podman_images", "test_slurm_oci",
     "test_slurm_pyxis", "test_slurm_upstream_runs"}
)  # fmt: skip
# - daemons: sshd nodes, Slurm clusters and simulated hosts without docker. Clusters of the two
#   units coexist: each its own namespaces, link and subnet (claimed: namespaces.free_subnet).
DAEMON_MODULES = SELF_STARTING_MODULES | {
    "test_cluster_process", "test_inventory", "test_llama_runs", "test_nodescan",
    "test_preflight", "test_rehearsal", "test_release_slow_node", "test_slow_node",
    "test_slurm_runtime",
}  # fmt: skip
# Modules whose tests time the host's own scheduling (wake-ups, barriers): run after the rest.
TIMING_MODULES = frozenset({"test_calibration", "test_slow_node"})
# Modules whose tests train in a framework's environment (.venvs) or an upstream source's.
# PyTorch's included (the kit's .venv holds torch too: the models and the benchmark script's
# real steps), and the data writers that run in TensorFlow's, OneFlow's and Paddle's.
FRAMEWORK_MODULES = frozenset(
    {"test_tensorflow", "test_paddle", "test_mxnet", "test_oneflow", "test_tf32",
     "test_pypi_upstream", "test_datasets", "test_datasets_bert", "test_datasets_tokens",
     "test_parity", "test_llama_runs", "test_release_beside_published", "test_gpu_check",
     "test_pytorch_benchmark", "test_pytorch_models", "test_pytorch_data", "test_mfu",
     "test_release_probe", "test_llama_model", "test_jax"}
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
            unit = DOCKER_MODULES if "docker_engine" in uses else DOCKER_MODULES | DAEMON_MODULES
            if module not in unit:
                listing = "DOCKER_MODULES" if "docker_engine" in uses else "DAEMON_MODULES"
                unlisted.add(f"{item.nodeid.split('::')[0]} ({', '.join(sorted(uses))}: "
                             f"{listing})")  # fmt: skip
        if module in FRAMEWORK_MODULES:
            item.add_marker(pytest.mark.frameworks)
        if module in TIMING_MODULES:
            item.add_marker(pytest.mark.timing)
    if unlisted:
        raise pytest.UsageError(
            f"{', '.join(sorted(unlisted))}: starts daemons through these fixtures; add the "
            "module to the list named in tests/conftest.py, so that under xdist it runs in that "
            "unit of work, never beside a test that shares its engine or cluster"
        )


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent where it is not loaded
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """The modules of DOCKER_MODULES make one unit of work, those of DAEMON_MODULES another, each
    run by one worker in order; every other module is a unit of its own (its module-scoped
    fixtures made once), spread over the workers as they free up. pytest-xdist's own ``--dist
    loadgroup`` would do it by marks, but it names the group in ``item._nodeid``, which pytest 9
    no longer reads."""
    from xdist.scheduler import LoadScopeScheduling

    class DaemonsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = module_of(nodeid)
            if module in DOCKER_MODULES:
                return "docker"
            return "daemons" if module in DAEMON_MODULES else nodeid.split("::")[0]

    return DaemonsTogether(config, log)


def require_real(reason: str) -> None:
    """Skip a test that needs a real engine/daemon, but fail under CI (DLPERF_REQUIRE_REAL=1)."""
    if os.environ.get("DLPERF_REQUIRE_REAL") == "1":
        pytest.fail(f"required in CI but unavailable: {reason}")
    pytest.skip(reason)


def require_github_build(reason: str) -> None:
    """Skip a test of enroot or pyxis where they are not built. They come only from GitHub
    (on no package registry, and their code is not copied into the kit), which CI's machines do
    not reach: ``.ci/build-enroot-pyxis.sh`` builds them where their release tarballs can be
    had and says so where not. A skip even under DLPERF_REQUIRE_REAL; a failure under
    DLPERF_REQUIRE_PYXIS=1 (a machine given the tarballs, on which they must run)."""
    if os.environ.get("DLPERF_REQUIRE_PYXIS") == "1":
        pytest.fail(f"required here (DLPERF_REQUIRE_PYXIS=1) but unavailable: {reason}")
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

