"""JAX (Flax + Optax): real training steps at tiny shapes through the driver, 1 and 2
processes, and the bad input refused before anything runs.

The 2-process case joins its processes with ``jax.distributed.initialize`` (the coordinator at
the kit's MASTER_ADDR:MASTER_PORT) and averages gradients over gloo. Llama's sharded runs (1n2g
and two sshd nodes) are in tests/test_llama_runs.py, beside PyTorch's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from driver.core.matrix import MatrixError, apply_overrides, load_matrix, overrides_from
from driver.frameworks.base import FRAMEWORKS, REPO_ROOT
from driver.plugins import load_all
from driver.workloads.base import WorkloadOptionError
from driver.workloads.llama import LLAMA_SIZES
from JAX.benchmark.cluster import join_arguments
from JAX.benchmark.mesh import MeshPlan, plan_mesh, shard_dimension
from tests.real_frameworks import framework_env, run_case, run_python, run_script

SCRIPT = "JAX/benchmark/train.py"
TINY_RESNET = ["--option", "image_size=32", "--option", "num_classes=10"]


@pytest.fixture(scope="module")
def jax_python() -> str:
    return framework_env("jax")


def headers(logs: str) -> list[dict]:
    lines = [line[line.index("{") :] for line in logs.splitlines() if '"dlperf": "header"' in line]
    return [json.loads(line) for line in lines]


# --------------------------------------------------------------------------------------------
# The mesh plan (no JAX needed)


def test_the_mesh_follows_the_parallelism() -> None:
    assert plan_mesh("resnet50", "auto", 0, 1, 1) == MeshPlan("none", 1, 1)
    assert plan_mesh("bert", "auto", 0, 4, 2) == MeshPlan("ddp", 4, 1)
    assert plan_mesh("llama", "auto", 0, 4, 2) == MeshPlan("fsdp", 1, 4)
    assert plan_mesh("llama", "hsdp", 0, 4, 2) == MeshPlan("hsdp", 2, 2)  # a node's devices
    assert plan_mesh("llama", "fsdp", 2, 8, 8) == MeshPlan("fsdp", 4, 2)


def test_a_parameter_is_split_along_its_largest_divisible_dimension() -> None:
    assert shard_dimension((64, 192), 2) == 1
    assert shard_dimension((512, 64), 4) == 0
    assert shard_dimension((64,), 1) is None  # no fsdp axis: replicated
    assert shard_dimension((3, 5), 2) is None  # indivisible: replicated
    assert shard_dimension((), 2) is None  # a scalar (the optimizer's step count)


# A Slurm step of 2 nodes, one task each, as srun sets it for the task on the second node.
SLURM_TASK_1_OF_2 = {
    "SLURM_JOB_ID": "4711", "SLURM_STEP_NODELIST": "gpu[007-008]", "SLURM_NTASKS": "2",
    "SLURM_PROCID": "1", "SLURM_LOCALID": "0",
}  # fmt: skip
KIT_COORDINATOR = {"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29511"}


@pytest.mark.parametrize(
    ("rank", "world", "local", "gpu", "environ", "expected"),
    [
        # One Slurm task per process: JAX's own Slurm detection, whatever the kit exported.
        (1, 2, 0, False, {**SLURM_TASK_1_OF_2, **KIT_COORDINATOR},
         {"cluster_detection_method": "slurm"}),
        # Slurm bound one GPU to the task (CUDA_VISIBLE_DEVICES=3): device 0, not SLURM_LOCALID.
        (1, 2, 0, True, {**SLURM_TASK_1_OF_2, "SLURM_LOCALID": "3", "CUDA_VISIBLE_DEVICES": "3"},
         {"cluster_detection_method": "slurm", "local_device_ids": [0]}),
        # Node mode, two processes per node task: the kit's coordinator, the step's variables
        # (2 tasks, this one's SLURM_PROCID 1) kept out by turning detection off.
        (3, 4, 1, True, {**SLURM_TASK_1_OF_2, **KIT_COORDINATOR},
         {"coordinator_address": "10.0.0.7:29511", "num_processes": 4, "process_id": 3,
          "cluster_detection_method": "deactivate", "local_device_ids": [1]}),
        (1, 2, 1, False, {"MASTER_ADDR": "127.0.0.1"},
         {"coordinator_address": "127.0.0.1:29500", "num_processes": 2, "process_id": 1,
          "cluster_detection_method": "deactivate"}),
        # Neither: JAX's detection alone.
        (1, 2, 1, False, {}, {}),
    ],
)  # fmt: skip
def test_processes_meet_through_slurm_where_each_is_a_task_else_at_the_kit_s_coordinator(
    rank: int, world: int, local: int, gpu: bool, environ: dict, expected: dict
) -> None:
    assert join_arguments(rank, world, local, gpu, environ) == expected


def test_jax_s_slurm_detection_reads_the_ranks_the_kit_checked(jax_python: str) -> None:
    """JAX's own reading of the Slurm task above: the coordinator on the step's first node at
    the job's port, the same process id and count as the kit's (so the check in the adapter
    holds)."""
    code = (
        "import os, json\n"
        f"os.environ.update({SLURM_TASK_1_OF_2!r})\n"
        "from jax._src.clusters import ClusterEnv\n"
        "print(json.dumps(ClusterEnv.auto_detect_unset_distributed_params("
        "None, None, None, None, 'slurm', 10)))\n"
    )
    done = run_python(jax_python, code)
    assert done.returncode == 0, done.stderr
    port = 4711 % 4096 + 61440
    assert json.loads(done.stdout.splitlines()[-1]) == [f"gpu007:{port}", 2, 1, [0]]


@pytest.mark.parametrize(
    ("model", "parallelism", "fsdp_size", "ranks", "words"),
    [
        ("llama", "fsdp", 3, 4, "does not divide the case's 4 devices"),
        ("bert", "ddp", 2, 2, "shards parameters"),
        ("llama", "fsdp", -1, 2, "integer >= 0"),
    ],
)
def test_a_mesh_that_cannot_be_is_refused_naming_fsdp_size(
    model: str, parallelism: str, fsdp_size: int, ranks: int, words: str
) -> None:
    with pytest.raises(WorkloadOptionError, match=words) as caught:
        plan_mesh(model, parallelism, fsdp_size, ranks, ranks)
    assert caught.value.field == "fsdp_size"


@pytest.mark.parametrize("profile", ["dlperf", "cpu-smoke"])
def test_every_jax_case_has_a_pytorch_twin_for_the_framework_factor(profile: str) -> None:
    """`dlperf factor --factor framework` pairs cases equal in all but the framework: each JAX
    case of the matrix is one of PyTorch's (model, topology, batch, precision, variant)."""
    load_all()

    def ids(framework: str) -> set[str]:
        cases = load_matrix(FRAMEWORKS.get(framework).matrix_file, profile).cases
        return {case.id.replace(f"/{framework}/", "/") for case in cases}

    jax_cases = ids("jax")
    assert jax_cases and jax_cases <= ids("pytorch")


def test_a_process_s_threads_are_a_slice_of_the_cpus_it_may_use() -> None:
    """XLA sizes its CPU thread pools to the process's CPU affinity: a process of 1 thread on a
    host of several CPUs gets one of its own, by local rank (run in a child: it pins itself)."""
    code = (
        "import os; from JAX.benchmark.train import pin_threads; "
        "allowed = sorted(os.sched_getaffinity(0)); "
        "print(allowed, pin_threads(1, 1), sorted(os.sched_getaffinity(0)), "
        "pin_threads(len(allowed), 0))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    allowed, chosen, after, unpinned = done.stdout.strip().split("] ", 3)
    cpus = [int(c) for c in allowed.strip("[").split(",")]
    if len(cpus) < 2:
        pytest.skip("one CPU: nothing to split")
    assert chosen == f"[{cpus[1]}" and after == f"[{cpus[1]}"
    assert unpinned == "None"  # as many threads as CPUs: nothing to pin


def test_the_driver_refuses_bad_jax_input_before_anything_runs() -> None:
    load_all()
    cases = load_matrix(FRAMEWORKS.get("jax").matrix_file, "cpu-smoke").cases
    llama = [c for c in cases if c.model == "llama" and c.topology.world_size == 2]
    with pytest.raises(MatrixError, match=r"--option fsdp_size: a mesh axis of 3 does not divide"):
        apply_overrides(llama, overrides_from({"options": {"fsdp_size": 3}}))
    with pytest.raises(MatrixError, match=r"--option channels_last: jax has no option"):
        apply_overrides(cases, overrides_from({"options": {"channels_last": True}}))
    assert {c.model for c in cases} == {"resnet50", "bert", "llama"}


# --------------------------------------------------------------------------------------------
# Real training


def test_the_full_size_models_have_pytorch_s_parameter_counts(jax_python: str) -> None:
    """BERT-base, Llama 3 8B and 1B (tied) built at the kit's shapes, traced without memory
    (jax.eval_shape): the counts of PyTorch's models and of driver.workloads.llama."""
    code = """
import jax, jax.numpy as jnp, numpy as np
from driver.bench.contract import SHAPE_OPTIONS
from JAX.benchmark.models import build_model, init_variables, synthetic_batch
for name, extra in (("bert", {}), ("llama", {"llama_size": "llama3-8b"}),
                    ("llama", {"llama_size": "llama3-1b"})):
    options = {**SHAPE_OPTIONS, **extra, "seq_len": 16}
    module = build_model(name, options, jnp.bfloat16)
    sample = synthetic_batch(name, options, 1, 0)
    shapes = jax.eval_shape(lambda: init_variables(name, module, sample, jax.random.PRNGKey(0)))
    print(sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(shapes["params"])))
"""
    done = run_python(jax_python, code)
    assert done.returncode == 0, done.stderr[-2000:]
    bert, llama_8b, llama_1b = (int(line) for line in done.stdout.split())
    assert bert == 110_106_428  # BERT-base with its 512-row position table, as PyTorch's
    assert llama_8b == LLAMA_SIZES["llama3-8b"].parameters() == 8_030_261_248
    assert llama_1b == LLAMA_SIZES["llama3-1b"].parameters() == 1_235_814_400


# ResNet-50's first compile on a 2-core CPU is most of a minute: over the JAX tests' share of
# the suite's time, so with the slow tests (as JAX's ResNet-50 parity and container runs).
@pytest.mark.skipif(
    not os.environ.get("DLPERF_SLOW_TESTS"),
    reason="about 50 s on a 2-core CPU (ResNet-50's compile); set DLPERF_SLOW_TESTS=1",
)
def test_single_process_resnet50_amp_computes_in_bfloat16(tmp_path: Path, jax_python: str) -> None:
    run = run_case(
        tmp_path, "jax", "resnet50", "1n1g", precision="amp", batch_size=2,
        options={"image_size": 32}, measured_steps=2,
    )  # fmt: skip
    header = run.records[0].header
    options = header["options"]
    assert options["amp_dtype"] == "bfloat16" and options["amp_effective"]
    assert options["parallelism"] == "none" and options["mesh"] == {"data": 1, "fsdp": 1}
    # torchvision's ResNet-50 at 10 classes has the same count: the same network.
    assert options["parameters"] == 23_528_522
    assert header["versions"]["jax"] == "0.10.2" and header["versions"]["flax"] == "0.12.8"
    [end] = [line for line in run.logs().splitlines() if '"dlperf": "end"' in line]
    peak = json.loads(end[end.index("{") :])["peak_memory"]
    assert peak["source"] == "getrusage ru_maxrss" and peak["bytes"] > 100e6  # jaxlib alone


def test_two_processes_average_their_gradients_over_gloo(tmp_path: Path, jax_python: str) -> None:
    options = {"grad_clip": 0, "weights_checksum": True}
    run = run_case(tmp_path, "jax", "bert", "1n2g", options=options, measured_steps=2)
    run.assert_ranks_in_sync(2)  # different data per rank, same weights: gradients reduced
    found = headers(run.logs())
    assert sorted(h["rank"] for h in found) == [0, 1]
    for header in found:
        options = header["options"]
        assert options["distributed_backend"] == "gloo" and options["parallelism"] == "ddp"
        assert options["coordinator"] == "kit"  # the spawner's MASTER_ADDR
        assert options["mesh"] == {"data": 2, "fsdp": 1}
        assert options["num_threads"] == 1  # 2 cores split between 2 processes
        assert len(options["cpu_affinity"]) == 1  # ... each pinned to its own
    assert len({h["options"]["cpu_affinity"][0] for h in found}) == 2
    assert run.records[0].measurement.ranks == run.records[0].measurement.world_size == 2


# --------------------------------------------------------------------------------------------
# Bad input the script refuses itself (exit 2, one line naming the flag)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--precision", "amp", "--amp-dtype", "fp16"], "--amp-dtype fp16"),
        (["--xla", "on"], "--xla on"),
        (["--device", "gpu"], "--device gpu, but this JAX build has only the cpu backend"),
    ],
)
def test_the_script_refuses_what_it_cannot_train(
    jax_python: str, extra: list[str], words: str
) -> None:
    args = ["--model", "resnet50", "--batch-size", "2", "--total-steps", "1", *TINY_RESNET]
    done = run_script(jax_python, SCRIPT, [*args, *extra])
    assert done.returncode == 2, done.stderr[-2000:]
    assert words in done.stderr


def test_out_of_memory_prints_the_record_and_exits_86(jax_python: str) -> None:
    code = """
import JAX.benchmark.models as models
import JAX.benchmark.train as bench

def exhausted(*_args):
    raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4.0GiB")

models.build_model = exhausted
import JAX.benchmark.adapter as adapter
adapter.build_model = exhausted  # fails inside the adapter, as a real allocation would
bench.main(["--model", "resnet50", "--batch-size", "4096", "--total-steps", "2"])
"""
    done = run_python(jax_python, code)
    assert done.returncode == 86, done.stderr[-2000:]
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["dlperf"] == "oom" and record["batch_size"] == 4096
