"""The megatron upstream source (PyTorch/upstream/megatron): Megatron-LM's pretrain_gpt.py on the
megatron-core 0.19.0 release, its rendered commands, its parser and its pairing with NVIDIA's
published figures.

The release cannot train on a CPU (trace.yaml: ``initialize.py:66`` asserts CUDA, and
``arguments.py:1414`` reads the device's architecture from CUDA for TP or CP above 1), so its
commands are rendered for 1n8g and 8n64g and checked word by word, and its log format is
measured from lines built as the pinned code prints them. Where a Python 3.12 environment with
the pinned wheel is present (``DLPERF_MEGATRON_PYTHON``, or ``.venvs/megatron``), every rendered
command is parsed by the release's own argparse.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from driver.core.report import tokens_per_second
from driver.frameworks.base import REPO_ROOT
from driver.model.measure import Window, measure_repeat
from driver.parsers._runheader import header_line
from driver.parsers.base import PARSERS, LogParseError
from driver.plugins import load_all
from driver.release.imported import figure_summaries
from driver.sources.upstream import SPECS, UpstreamSource
from tests.llm_sources import SourceCases, node_rank, source_python, value

load_all()

SPEC = SPECS["megatron"]
PUBLISHED = REPO_ROOT / "published" / "llama3" / "megatron.yaml"
H100 = "NVIDIA H100 80GB HBM3"
RELEASE_DIR = "/workspace/src/megatron-core-0.19.0"


SOURCE = SourceCases(SPEC)
cases, case_of, argv_of = SOURCE.cases, SOURCE.case_of, SOURCE.argv_of


# --- the commands ---------------------------------------------------------------------------

LAYOUTS = {  # NVIDIA's DGX H100 BF16 layouts (published/llama3/megatron.yaml): tp, pp, cp, vp, gbs
    ("1n8g", "8b"): ("1", "1", "2", "1", "128"),
    ("4n32g", "8b"): ("1", "1", "2", "1", "512"),
    ("8n64g", "70b"): ("4", "4", "2", "5", "128"),
    ("4n32g", "70b"): ("4", "4", "2", "5", "64"),
}


@pytest.mark.parametrize(("topology", "variant"), sorted(LAYOUTS))
def test_each_node_starts_pretrain_gpt_under_torchrun_with_the_published_layout(
    topology: str, variant: str
) -> None:
    case = case_of(topology, variant)
    nodes, procs = case.topology.nodes, case.topology.devices_per_node
    tp, pp, cp, vp, gbs = LAYOUTS[(topology, variant)]
    for node in (0, nodes - 1):
        argv = argv_of(case, node)
        assert argv[: argv.index("pretrain_gpt.py") + 1] == [
            "env", f"PYTHONPATH={RELEASE_DIR}",
            "CUDA_DEVICE_MAX_CONNECTIONS=1",  # validate_args asserts it for TP or CP > 1
            "torchrun", "--nnodes", str(nodes), "--node_rank", str(node),
            "--nproc_per_node", str(procs), "--master_addr", "10.0.0.11",
            "--master_port", "29500", "--tee", "3", "pretrain_gpt.py",
        ]  # fmt: skip
        assert value(argv, "--tensor-model-parallel-size") == tp
        assert value(argv, "--pipeline-model-parallel-size") == pp
        assert value(argv, "--context-parallel-size") == cp
        assert value(argv, "--num-virtual-stages-per-pipeline-rank") == vp
        # the global batch counts data-parallel replicas, not devices
        assert value(argv, "--global-batch-size") == gbs
        assert value(argv, "--micro-batch-size") == "1"
        assert value(argv, "--seq-length") == "8192" == value(argv, "--max-position-embeddings")
        assert value(argv, "--train-iters") == "50"  # 10 warm-up + 40 measured
        assert value(argv, "--log-interval") == "1" and value(argv, "--eval-iters") == "0"
        assert value(argv, "--vocab-size") == "128256" and "--bf16" in argv
        layers = {"8b": "32", "70b": "80"}[variant]
        assert value(argv, "--num-layers") == layers
        assert "--mock-data" in argv and "--data-path" not in argv and "--save" not in argv


def test_real_data_reads_the_kit_s_megatron_index() -> None:
    case = replace(case_of("1n8g", "8b"), dataset="real", data_dir="/data/tokens")
    argv = argv_of(case, 0)
    assert value(argv, "--data-path") == "/data/tokens/megatron_text_document"
    assert value(argv, "--split") == "100,0,0" and "--mock-data" not in argv


def test_the_node_command_announces_the_layout_and_runs_the_argv_unchanged() -> None:
    case = case_of("8n64g", "70b")
    command = UpstreamSource(SPEC).command(case, node_rank(case, 7), 64)
    assert command[:2] == ["sh", "-c"] and f"cd {RELEASE_DIR}" in command[2]
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in command[2]
    header = json.loads(command[4].removeprefix("DLPERF-UPSTREAM "))
    assert header["logging"] == "last-rank" and header["step_offset"] == 0
    layout = {k: header[k] for k in ("tensor_parallel", "pipeline_parallel", "context_parallel")}
    assert layout == {"tensor_parallel": 4, "pipeline_parallel": 4, "context_parallel": 2}
    assert command[5:] == argv_of(case, 7)
    assert shlex.split(shlex.join(command)) == command


def test_a_layout_the_devices_cannot_hold_is_refused_before_it_starts() -> None:
    upstream = UpstreamSource(SPEC)
    case = case_of("1n8g", "8b")
    with pytest.raises(ValueError, match=r"context_parallel 3 .* do not divide the world size 8"):
        upstream.launch_for(replace(case, options={**case.options, "context_parallel": 3}))
    with pytest.raises(ValueError, match="fp32"):
        upstream.launch_for(replace(case, precision="fp32"))
    with pytest.raises(ValueError, match="without data_dir"):
        upstream.launch_for(replace(case, dataset="real"))


# --- the parser -----------------------------------------------------------------------------

T0 = datetime(2026, 12, 7, 10, 0, 0)


def stamp(seconds: float, micro: bool = True) -> str:
    moment = T0 + timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f" if micro else "%Y-%m-%d %H:%M:%S")


def iteration_line(step: int, total: int, seconds: float, micro: bool = True) -> str:
    """As training_log prints it; its interval mean (ms) made up, never the window's rate."""
    return (
        f" [{stamp(seconds, micro)}] iteration {step:8d}/{total:8d} | consumed samples: "
        f"{step * 128:12d} | elapsed time per iteration (ms): 99999.9 | learning rate: "
        "3.000000E-04 | global batch size:   128 | lm loss: 1.112345E+01 | loss scale: 1.0 | "
        "grad norm: 12.345 | number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def megatron_logs(
    topology: str, variant: str, times: list[float], *, micro: bool = True
) -> dict[str, str]:
    """Node logs as torchrun --tee 3 shows them: every local rank prefixed, rank 0's setup and
    end lines on node 0, the iteration lines from the last global rank only."""
    case = case_of(topology, variant)
    nodes, procs = case.topology.nodes, case.topology.devices_per_node
    out = {}
    for node in range(nodes):
        batch = int(case.batch_size)
        header = header_line(UpstreamSource(SPEC).header(case, node_rank(case, node), batch))
        lines = [header, "DLPERF-HOST " + json.dumps({"devices": [H100], "hostname": f"n{node}"})]
        for local in range(procs):  # every rank warns at import
            lines.append(f"[default{local}]:UserWarning: Apex is not installed.")
        if node == 0:
            lines.append("[default0]:> Megatron-Core version .......... 0.19.0")
            lines.append(f"[default0]:[before the start of training step] datetime: {stamp(0)} ")
        if node == nodes - 1:
            for step, seconds in enumerate(times, start=1):
                lines.append(
                    f"[default{procs - 1}]:" + iteration_line(step, len(times), seconds, micro)
                )
        if node == 0:
            done = f"[after training is done] datetime: {stamp(times[-1] + 1)} "
            lines.append("[default0]:" + done)
        out[f"node{node}.log"] = "\n".join(lines) + "\n"
    return out


def step_times(seconds: float, warmup: int = 20, measured: int = 40) -> list[float]:
    """Warm-up iterations twice as long, then ``seconds`` each, a 0.5 s stall at iteration 30."""
    times, now = [], 5.0
    for step in range(1, warmup + measured + 1):
        now += 2 * seconds if step <= warmup else seconds
        now += 0.5 if step == 30 else 0.0
        times.append(round(now, 6))
    return times


@pytest.mark.parametrize(("topology", "variant", "replicas"), [("1n8g", "8b", 4),
                                                              ("8n64g", "70b", 2)])  # fmt: skip
def test_the_window_is_read_from_the_last_rank_s_timestamps_counting_replicas(
    topology: str, variant: str, replicas: int
) -> None:
    batch = int(case_of(topology, variant).batch_size)
    parsed = PARSERS.get("megatron")().parse(megatron_logs(topology, variant, step_times(12.27)))
    world = case_of(topology, variant).topology.world_size
    assert sorted(parsed.ranks) == [world - 1]  # the last rank's lines; no other rank prints
    measured = measure_repeat(parsed, Window(20, 40))
    # 40 iterations of GBS (batch x replicas: 128 both) in 40 x 12.27 s + the stall; the
    # printed interval mean (99,999.9 ms) plays no part
    assert batch * replicas == 128
    assert measured.throughput == pytest.approx(40 * 128 / (40 * 12.27 + 0.5), rel=1e-9)
    assert measured.samples == 40 * 128
    assert "clock_resolution_s" not in parsed.meta


def test_whole_second_stamps_of_older_megatron_are_read_only_over_a_long_enough_window() -> None:
    """Megatron-Core <= 0.15 printed whole seconds: each boundary loses < 1 s, so the kit takes
    such a log only where the window spans at least 100 s (under 1% of error), and says so."""
    slow = megatron_logs("1n8g", "8b", step_times(12.27), micro=False)
    parsed = PARSERS.get("megatron")().parse(slow)
    assert parsed.meta["clock_resolution_s"] == 1.0
    measured = measure_repeat(parsed, Window(20, 40))
    exact = 40 * 128 / (40 * 12.27 + 0.5)
    assert measured.throughput == pytest.approx(exact, rel=1e-2)
    fast = megatron_logs("1n8g", "8b", step_times(1.5), micro=False)  # steps 10 to 50: 75 s
    with pytest.raises(LogParseError, match="whole seconds .* spans 75 s"):
        PARSERS.get("megatron")().parse(fast)


def test_lines_without_a_timestamp_or_from_the_wrong_node_are_refused() -> None:
    logs = megatron_logs("1n8g", "8b", step_times(12.27))
    # Megatron-LM before it stamped the line printed " iteration N/M | consumed samples: ..."
    unstamped = {k: re.sub(r" \[[\d: .-]+\] iteration", " iteration", v) for k, v in logs.items()}
    with pytest.raises(LogParseError, match="without a timestamp"):
        PARSERS.get("megatron")().parse(unstamped)
    times = step_times(12.27)
    times[30] = times[20]
    with pytest.raises(LogParseError, match="time goes back"):
        PARSERS.get("megatron")().parse(megatron_logs("1n8g", "8b", times))
    with pytest.raises(LogParseError):  # cut short before the window's end
        measure_repeat(
            PARSERS.get("megatron")().parse(megatron_logs("1n8g", "8b", step_times(12.27)[:50])),
            Window(20, 40),
        )


# --- pairing with the published figures ------------------------------------------------------


def test_the_cases_carry_the_ids_of_nvidia_s_published_bf16_figures() -> None:
    published = {s.case.id: s for s in figure_summaries(PUBLISHED)}
    ours = {case.id: case for case in cases()}
    paired = sorted(set(published) & set(ours))
    assert paired == sorted(
        [
            "llama/pytorch/1n8g/bs32/amp/synthetic/8b/src-megatron",
            "llama/pytorch/2n16g/bs32/amp/synthetic/8b/src-megatron",
            "llama/pytorch/4n32g/bs32/amp/synthetic/8b/src-megatron",
            "llama/pytorch/8n64g/bs64/amp/synthetic/70b/src-megatron",
        ]
    )
    for case_id in paired:
        assert published[case_id].case.options["llama_size"] == ours[case_id].options["llama_size"]
    # as the README prints them: 85,459 tokens/s over 8 GPUs, 71,526 over 64 (BF16)
    eight = published["llama/pytorch/1n8g/bs32/amp/synthetic/8b/src-megatron"]
    seventy = published["llama/pytorch/8n64g/bs64/amp/synthetic/70b/src-megatron"]
    assert tokens_per_second(eight, per_device=True) * 8 == pytest.approx(85459)
    assert tokens_per_second(seventy, per_device=True) * 64 == pytest.approx(71526)
    # FP8 is marked in the variant: no bf16 case of the matrix takes it
    fp8 = {s.case.variant for s in published.values() if s.case.variant.endswith("-fp8")}
    assert fp8 == {"8b-fp8", "70b-fp8"} and not fp8 & {c.variant for c in cases()}


# --- the release's own argparse, where its environment is here --------------------------------

PARSE_PROGRAM = """
import argparse, json, sys
from megatron.training.arguments import add_megatron_arguments
parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
for argv in json.load(sys.stdin):
    args = parser.parse_args(argv)
    print(json.dumps([args.tensor_model_parallel_size, args.pipeline_model_parallel_size,
                      args.context_parallel_size, args.global_batch_size, args.num_layers]))
"""


def megatron_python() -> Path | None:
    return source_python("DLPERF_MEGATRON_PYTHON", "megatron")


@pytest.mark.skipif(
    megatron_python() is None,
    reason="no Python 3.12 environment with megatron-core 0.19.0 (DLPERF_MEGATRON_PYTHON or "
    ".venvs/megatron; docs/upstream.md says how to make it); flags.yaml is the record",
)
def test_every_rendered_command_parses_with_the_release_s_own_argparse() -> None:
    rendered, expected = [], []
    for case in cases():
        for dataset in ("synthetic", "real"):
            one = replace(case, dataset=dataset, data_dir="/data/tokens")
            argv = argv_of(one, 0)
            rendered.append(argv[argv.index("pretrain_gpt.py") + 1 :])
            degrees = [one.options.get(k, 1) for k in ("tensor_parallel", "pipeline_parallel",
                                                       "context_parallel")]  # fmt: skip
            gbs = int(value(argv, "--global-batch-size"))
            expected.append([*degrees, gbs, int(value(argv, "--num-layers"))])
    run = subprocess.run(
        [str(megatron_python()), "-c", PARSE_PROGRAM],
        input=json.dumps(rendered), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert [json.loads(line) for line in run.stdout.splitlines()] == expected


# --- the plan of its cases ------------------------------------------------------------------


def test_the_plan_counts_a_step_s_samples_over_replicas() -> None:
    """A step trains batch x replicas sequences: NVIDIA's own figures give back their own step
    times (12.27 s and 14.66 s as printed; the plan takes the median of a size's figures, 12.32
    s and 14.67 s over its scales); counted over devices, the 70B's was 32 x longer."""
    from driver.core.estimate import estimate_case
    from driver.core.knowledge import load_knowledge

    knowledge = load_knowledge(REPO_ROOT)
    eight = estimate_case(case_of("1n8g", "8b"), "H100", knowledge)
    seventy = estimate_case(case_of("8n64g", "70b"), "H100", knowledge)
    assert "published/llama3/megatron.yaml" in eight.basis
    assert eight.step_s == pytest.approx(128 * 8192 / 85459, rel=1e-2)  # 12.27 s
    assert seventy.step_s == pytest.approx(128 * 8192 / 71526, rel=1e-2)  # 14.66 s


def test_an_imported_megatron_log_counts_the_last_rank_s_iterations_over_replicas(
    tmp_path: Path,
) -> None:
    """Logs of a 8n64g 70B run the kit did not launch (no run header), with its layout in
    --facts: 40 iterations of GBS 128 at 14.66 s each import at 128 / 14.66 samples/s."""
    from driver.core.importlogs import import_run
    from driver.sources.logfacts import load_facts

    times = [round(5.0 + step * 14.66, 6) for step in range(1, 61)]
    paths = []
    for name, text in megatron_logs("8n64g", "70b", times).items():
        path = tmp_path / name
        path.write_text("\n".join(text.splitlines()[1:]) + "\n")  # the kit's header dropped
        paths.append(path)
    facts = tmp_path / "facts.yaml"
    facts.write_text("model: llama\ntopology: 8n64g\nbatch: 64\nprecision: amp\n"
                     "warmup_steps: 20\nmeasured_steps: 40\ntensor_parallel: 4\n"
                     "pipeline_parallel: 4\ncontext_parallel: 2\n")  # fmt: skip
    record = import_run(tmp_path / "s", "megatron", load_facts(facts, {}), paths)
    assert record.verdict == "ok", record.detail
    assert record.measurement.throughput == pytest.approx(128 / 14.66, rel=1e-9)


def test_only_the_last_rank_s_lines_count_and_unprefixed_lines_are_refused() -> None:
    """logging last-rank: another rank's copy of an iteration line is not the run's (skipped);
    without torchrun's rank prefix the last rank's lines cannot be told apart (refused)."""
    times = step_times(12.27)
    logs = megatron_logs("1n8g", "8b", times)
    stray = "[default0]:" + iteration_line(25, 60, 1.0)  # rank 0 at another time entirely
    end = "[default0]:[after"
    assert end in logs["node0.log"]
    logs["node0.log"] = logs["node0.log"].replace(end, stray + "\n" + end)
    measured = measure_repeat(PARSERS.get("megatron")().parse(logs), Window(20, 40))
    assert measured.throughput == pytest.approx(40 * 128 / (40 * 12.27 + 0.5), rel=1e-9)
    bare = {k: v.replace("[default7]:", "") for k, v in megatron_logs("1n8g", "8b", times).items()}
    with pytest.raises(LogParseError, match="without a rank prefix"):
        PARSERS.get("megatron")().parse(bare)
