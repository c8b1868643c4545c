"""The torchtitan upstream source (PyTorch/upstream/torchtitan): its rendered commands, its
parser and its pairing with torchtitan's published figures.

The pinned release cannot train on a CPU unedited (trace.yaml: ``trainer.py:301`` calls
``torch.cuda.set_device`` whatever the machine), so its commands are rendered here for 1n8g and
4n32g and checked word by word, its log format is measured from lines built as the release
prints them, and a measured case is set beside the published figure of the same case.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from driver.analysis.compare import load_side, side_of_summaries
from driver.analysis.factor import factor_pairs
from driver.core.summary import CaseSummary
from driver.frameworks.base import REPO_ROOT
from driver.model.measure import Window, case_stats, measure_repeat
from driver.parsers._runheader import header_line
from driver.parsers.base import PARSERS, LogParseError
from driver.plugins import load_all
from driver.release.imported import figure_summaries
from driver.sources.upstream import SPECS, UpstreamSource
from tests.llm_sources import SourceCases, assert_torchtitan_window_and_switches, node_rank, value

load_all()

SPEC = SPECS["torchtitan"]
PUBLISHED = REPO_ROOT / "published" / "llama3" / "torchtitan.yaml"
H100 = "NVIDIA H100 80GB HBM3"


SOURCE = SourceCases(SPEC)
cases, case_of, argv_of = SOURCE.cases, SOURCE.case_of, SOURCE.argv_of


# --- the commands ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topology", "variant"), [("1n8g", "8b"), ("1n8g", "8b-compile"), ("4n32g", "8b"),
                              ("4n32g", "70b")],
)  # fmt: skip
def test_each_node_starts_torchtitan_under_torchrun_with_the_case_in_its_flags(
    topology: str, variant: str
) -> None:
    case = case_of(topology, variant)
    nodes, procs = case.topology.nodes, case.topology.devices_per_node
    for node in range(nodes):
        argv = argv_of(case, node)
        launcher = argv[: argv.index("torchtitan.train") + 1]
        assert launcher == [
            "env", "PYTHONPATH=/workspace/src/torchtitan-0.3.0",
            "PYTORCH_ALLOC_CONF=expandable_segments:True",  # as its run_train.sh sets it
            "torchrun", "--nnodes", str(nodes), "--node_rank", str(node),
            "--nproc_per_node", str(procs), "--master_addr", "10.0.0.11",
            "--master_port", "29500", "--local-ranks-filter", "0", "--tee", "3",
            "-m", "torchtitan.train",
        ]  # fmt: skip
        assert "--role" not in argv  # its [rankN]: prefix carries the local rank
        assert value(argv, "--module") == "llama3"
        assert value(argv, "--config") == case.options["config"]
        assert_torchtitan_window_and_switches(
            argv, case, "--hf-assets-path", "--dataloader.dataset-path",
            ("--metrics.disable-color-printing", "--profiler.no-enable-profiling",
                   "--metrics.no-enable-tensorboard", "--checkpoint.no-enable",
                   "--validator.no-enable"),
        )  # fmt: skip


def test_the_node_command_announces_the_case_and_runs_the_argv_unchanged() -> None:
    case = case_of("4n32g", "8b")
    upstream = UpstreamSource(SPEC)
    command = upstream.command(case, node_rank(case, 3), 2)
    assert command[:2] == ["sh", "-c"] and "cd /workspace/src/torchtitan-0.3.0" in command[2]
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in command[2]
    header = json.loads(command[4].removeprefix("DLPERF-UPSTREAM "))
    assert header | {"node_rank": 3, "nodes": 4, "procs_per_node": 8, "batch": 2} == header
    assert header["logging"] == "rank0" and header["step_offset"] == 0
    assert command[5:] == argv_of(case, 3)
    assert shlex.split(shlex.join(command)) == command  # every word survives the shell


def test_a_case_the_release_cannot_run_is_refused_before_it_starts() -> None:
    from dataclasses import replace

    upstream = UpstreamSource(SPEC)
    case = case_of("1n8g", "8b")
    with pytest.raises(ValueError, match="synthetic"):
        upstream.launch_for(replace(case, dataset="synthetic"))
    with pytest.raises(ValueError, match="fp32"):
        upstream.launch_for(replace(case, precision="fp32"))
    with pytest.raises(ValueError, match="dropout"):
        upstream.launch_for(replace(case, options={**case.options, "dropout": 0.1}))


@pytest.mark.parametrize("attention", ["sdpa", "flex_flash", "varlen"])
def test_an_attention_backend_the_release_cannot_select_is_refused_with_its_reason(
    attention: str,
) -> None:
    from dataclasses import replace

    upstream = UpstreamSource(SPEC)
    case = case_of("1n8g", "8b")
    assert upstream.launch_for(case) is not None  # flex, the release's own, runs
    with pytest.raises(ValueError, match=r"config_utils\.py:97-101.*trainer\.py:75-77"):
        upstream.launch_for(replace(case, options={**case.options, "attention": attention}))


def test_the_published_like_8b_case_needs_a_96gb_part_and_its_80gb_sibling_fits() -> None:
    """torchtitan's published 1n8g run without compile peaked at 82.4 GiB on H100 96GB: the
    plan says it may not fit an H100 80GB; local batch 1 (llama3_8b's own default) and the
    compiled run (77.0 GiB published) do; at 4n32g FSDP shards the state and it fits."""
    from driver.core.estimate import estimate_case
    from driver.core.knowledge import load_knowledge

    knowledge = load_knowledge()
    by_id = {c.id: c for c in cases()}

    def note(case_id: str) -> str:
        return estimate_case(by_id[case_id], "H100", knowledge).basis

    assert "may run out of memory" in note("llama/pytorch/1n8g/bs2/amp/real/8b/src-torchtitan")
    for fits in ("1n8g/bs1/amp/real/8b", "1n8g/bs2/amp/real/8b-compile", "4n32g/bs2/amp/real/8b",
                 "4n32g/bs1/amp/real/70b"):  # fmt: skip
        assert "out of memory" not in note(f"llama/pytorch/{fits}/src-torchtitan"), fits


# --- the parser -----------------------------------------------------------------------------

COLOURS = ("\x1b[31m", "\x1b[32m", "\x1b[39m")


def stamp(seconds: float) -> str:
    whole = int(seconds)
    return f"2026-11-27 10:{whole // 60:02d}:{whole % 60:02d},{round((seconds - whole) * 1000):03d}"


def step_line(step: int, seconds: float, tps: int, colour: bool = False) -> str:
    red, green, reset = COLOURS if colour else ("", "", "")
    return (
        f"[titan] {stamp(seconds)} - root - INFO - {red}step: {step:2}  {green}loss: 7.12345  "
        f"grad_norm:  1.2345  memory: 60.10GiB(75.58%)  tps: {tps:,}  tflops: 383.10  "
        f"mfu: 38.70%{reset}"
    )


def logs(nodes: int, times: list[float], *, colour: bool = False) -> dict[str, str]:
    """Node logs as torchrun --local-ranks-filter 0 --tee 3 shows them: each node's local rank 0,
    every step, tps made up (not the window's rate), a validation line and the end."""
    case = case_of("1n8g" if nodes == 1 else "4n32g", "8b")
    out = {}
    for node in range(nodes):
        header = header_line(UpstreamSource(SPEC).header(case, node_rank(case, node), 2))
        lines = [header, "DLPERF-HOST " + json.dumps({"devices": [H100], "hostname": f"n{node}"})]
        lines.append(f"[default0]:[titan] {stamp(0)} - root - INFO - Training starts at step 1")
        for step, seconds in enumerate(times, start=1):
            lines.append("[default0]:" + step_line(step, seconds, 99_999, colour))
        lines.append(f"[default0]:[titan] {stamp(times[-1])} - root - INFO - validate step: 1  "
                     "loss: 7.1000  memory: 60.10GiB(75.58%)  tps: 5")  # fmt: skip
        lines.append(
            f"[default0]:[titan] {stamp(times[-1] + 2)} - root - INFO - Training completed"
        )
        out[f"node{node}.log"] = "\n".join(lines) + "\n"
    return out


def step_times(warmup: int = 20, measured: int = 100) -> list[float]:
    """Warm-up steps 1.5 s, measured steps 0.75 s, plus a 0.25 s stall inside the window."""
    times, now = [], 1.0
    for step in range(1, warmup + measured + 1):
        now += 1.5 if step <= warmup else 0.75
        now += 0.25 if step == 60 else 0.0
        times.append(round(now, 3))
    return times


@pytest.mark.parametrize(("nodes", "colour"), [(1, False), (4, True)])
def test_the_window_is_read_from_the_log_s_timestamps_never_from_its_tps(
    nodes: int, colour: bool
) -> None:
    parsed = PARSERS.get("torchtitan")().parse(logs(nodes, step_times(), colour=colour))
    assert sorted(parsed.ranks) == [0]  # global rank 0 counts; the other nodes' lines do not
    measured = measure_repeat(parsed, Window(20, 100))
    global_batch = 2 * 8 * nodes
    # 100 steps in 75 s + the stall; torchtitan's tps (99,999 per device) plays no part
    assert measured.throughput == pytest.approx(100 * global_batch / 75.25, rel=1e-9)


def test_a_log_whose_clock_goes_back_or_is_cut_short_is_refused() -> None:
    times = step_times()
    times[70] = times[60]
    with pytest.raises(LogParseError, match="time goes back"):
        PARSERS.get("torchtitan")().parse(logs(1, times))
    with pytest.raises(LogParseError):
        measure_repeat(
            PARSERS.get("torchtitan")().parse(logs(1, step_times()[:90])), Window(20, 100)
        )


# --- pairing with the published figures ------------------------------------------------------


def test_a_measured_case_pairs_with_torchtitan_s_published_figure_of_the_same_case(
    tmp_path: Path,
) -> None:
    published = {s.case.id: s for s in figure_summaries(PUBLISHED)}
    ours = {case.id: case for case in cases()}
    for case_id in ("llama/pytorch/1n8g/bs2/amp/real/8b/src-torchtitan",
                    "llama/pytorch/1n8g/bs2/amp/real/8b-compile/src-torchtitan"):  # fmt: skip
        assert case_id in published and case_id in ours, case_id
        assert published[case_id].case.options["llama_size"] == ours[case_id].options["llama_size"]
    measured = [
        CaseSummary(
            case=case, stats=case_stats([rate]), batch_size=2, speedup=None, efficiency=None,
            throughputs=[rate], devices=[H100] * case.topology.world_size,
        )
        for case in cases()
        if case.variant.startswith("8b")
        for rate in [0.8 * case.topology.world_size]  # samples/s: 6,553.6 tokens/s/GPU
    ]  # fmt: skip
    mine = side_of_summaries("h100-80gb", "session", measured)
    theirs = load_side(str(PUBLISHED), tmp_path, tmp_path)
    pairs = factor_pairs([mine, theirs], "device", "HBM2e", "HBM3")
    paired = {(a.fields["variant"], a.fields["topology"]) for a, _b, _ratio in pairs}
    assert paired == {("8b", "1n8g"), ("8b-compile", "1n8g")}
    ratio = next(r for a, _b, r in pairs if a.fields["variant"] == "8b")
    assert ratio == pytest.approx(0.8 * 8 * 8192 / 8 / 5762)


# --- model-parallel accounting (issue #49) ---------------------------------------------------


def seventy_b_logs(seconds_per_step: float) -> dict[str, str]:
    """4n32g logs of the 70b variant (tensor-parallel 8) at batch 1, as the kit launches it."""
    case = case_of("4n32g", "70b")
    times = [round(1.0 + step * seconds_per_step, 3) for step in range(1, 121)]
    out = {}
    for node in range(4):
        header = header_line(UpstreamSource(SPEC).header(case, node_rank(case, node), 1))
        lines = [header, f"[default0]:[titan] {stamp(0)} - root - INFO - node {node} starts",
                 *("[default0]:" + step_line(s, t, 1) for s, t in enumerate(times, 1))]  # fmt: skip
        out[f"node{node}.log"] = "\n".join(lines) + "\n"
    return out


def test_the_70b_case_counts_its_four_tensor_parallel_replicas_not_32_devices() -> None:
    """llama3_70b trains tensor-parallel 8: 4n32g at batch 1 is 4 sequences a step. At 2.0 s a
    step that is 2.00 samples/s; the kit once counted batch x 32 devices, 16.00."""
    case = case_of("4n32g", "70b")
    header = UpstreamSource(SPEC).header(case, node_rank(case, 0), 1)
    assert header.tensor_parallel == 8 and header.to_dict()["tensor_parallel"] == 8
    assert "tensor_parallel" not in UpstreamSource(SPEC).header(
        case_of("4n32g", "8b"), node_rank(case, 0), 2
    ).to_dict()  # a header without model parallelism reads as before
    parsed = PARSERS.get("torchtitan")().parse(seventy_b_logs(2.0))
    assert parsed.model_parallel == 8
    measured = measure_repeat(parsed, Window(20, 100))
    assert measured.throughput == pytest.approx(2.00, rel=1e-9)
    assert measured.samples == 100 * 4


def test_degrees_that_do_not_divide_the_devices_are_refused_before_the_run() -> None:
    from dataclasses import replace

    case = case_of("1n8g", "8b")
    with pytest.raises(ValueError, match=r"tensor_parallel 3 .* do not divide the world size 8"):
        UpstreamSource(SPEC).launch_for(replace(case, options={**case.options,
                                                               "tensor_parallel": 3}))  # fmt: skip
    with pytest.raises(ValueError, match=r"option tensor_parallel 0 \(an integer >= 1\)"):
        UpstreamSource(SPEC).launch_for(replace(case, options={**case.options,
                                                               "tensor_parallel": 0}))  # fmt: skip


def test_a_header_whose_degrees_do_not_divide_its_world_is_refused_with_its_line() -> None:
    texts = seventy_b_logs(2.0)
    texts = {n: t.replace('"tensor_parallel":8', '"tensor_parallel":12') for n, t in texts.items()}
    with pytest.raises(LogParseError) as refused:
        PARSERS.get("torchtitan")().parse(texts)
    assert "node0.log:1" in str(refused.value)
    assert "tensor_parallel 12" in str(refused.value) and "world size 32" in str(refused.value)


def test_an_imported_tensor_parallel_log_counts_replicas(tmp_path: Path) -> None:
    """The issue's fabricated 4n32g torchtitan log at batch 1 and 2.0 s a step: with
    ``tensor_parallel: 8`` in --facts it imports at 2.00 samples/s (16.00 before); degrees that
    do not divide the topology are refused naming where they came from."""
    from driver.core.importlogs import import_run
    from driver.sources.logfacts import ImportLogsError, load_facts

    paths = []
    for name, text in seventy_b_logs(2.0).items():
        path = tmp_path / name
        path.write_text("\n".join(text.splitlines()[1:]) + "\n")  # the kit's header dropped
        paths.append(path)
    facts_file = tmp_path / "facts.yaml"
    facts_file.write_text("model: llama\ntopology: 4n32g\nbatch: 1\nprecision: amp\n"
                          "dataset: real\nwarmup_steps: 20\nmeasured_steps: 100\n"
                          "tensor_parallel: 8\n")  # fmt: skip
    record = import_run(tmp_path / "s", "torchtitan", load_facts(facts_file, {}), paths)
    assert record.verdict == "ok", record.detail
    assert record.measurement.throughput == pytest.approx(2.00, rel=1e-9)
    with pytest.raises(ImportLogsError) as refused:
        import_run(tmp_path / "t", "torchtitan",
                   load_facts(facts_file, {"tensor_parallel": None, "pipeline_parallel": 3}),
                   paths)  # fmt: skip
    message = str(refused.value)
    assert "--pipeline-parallel on the command line" in message and "world size 32" in message
