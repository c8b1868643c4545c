"""``dlperf parity`` (driver.studies.parity): ``dlperf run`` beside a bare loop.

Correctness only, never timing: a real PyTorch pair at tiny shapes through the command line
(the kit through the whole ``dlperf run``), the options each bare loop is handed and refuses,
and the reading, checking and alternation of the pairs with step logs written by the protocol's
own logger into sessions written as the runner writes them.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from driver.bench.protocol import StepLogger
from driver.core.runner import evaluate
from driver.files import write_json
from driver.frontend.cli import main
from driver.model.case import Case
from driver.model.results import RECORD, RepeatRecord
from driver.parsers.base import LogParseError
from driver.studies.bareloop import OPTIONS_TAG
from driver.studies.parity import ParityError, ParityRequest, format_result, run_parity
from driver.studies.parity.commands import commands
from driver.studies.parity.cpu import cpu_sample, driver_cost
from driver.studies.parity.handing import (
    NOT_HANDED,
    check_bare_options,
    handed_options,
    probe_header,
)
from driver.studies.parity.plan import plan_case, prepare
from driver.studies.parity.process import Finished, SideCommand, run_process
from driver.studies.parity.reading import check_same_work, read_bare, read_kit
from driver.studies.parity.records import DriverCost, ParityPair, SideRun
from tests.real_frameworks import framework_env

TINY = {"image_size": 32, "num_classes": 10}
SLOW = pytest.mark.skipif(
    not os.environ.get("DLPERF_SLOW_TESTS"),
    reason="a minute or more on a 2-core CPU; set DLPERF_SLOW_TESTS=1",
)
TINY_RESNET_PARAMETERS = 23_528_522  # ResNet-50 v1.5 with a 10-class head


def test_pytorch_pair_at_tiny_shapes_through_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    framework_env("pytorch")
    out_json = tmp_path / "parity.json"
    code = main([
        "parity", "--framework", "pytorch", "--model", "resnet50", "--batch", "2",
        "--rounds", "1", "--warmup-steps", "1", "--measured-steps", "2",
        "--option", "image_size=32", "--option", "num_classes=10", "--json", str(out_json),
        "--results", str(tmp_path / "results"),
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    result = json.loads(out_json.read_text())
    (pair,) = result["pairs"]
    for side in ("bare", "kit"):
        assert pair[side]["model"] == "resnet50"
        assert pair[side]["batch_size"] == 2
        assert pair[side]["precision"] == "fp32"
        assert pair[side]["parameters"] == TINY_RESNET_PARAMETERS
        assert pair[side]["samples"] == 2 * 2
        assert pair[side]["device"] == "cpu"
    ratio = pair["kit"]["throughput"] / pair["bare"]["throughput"]
    assert math.isfinite(ratio) and ratio > 0
    assert result["options"] == TINY
    assert pair["kit"]["shape"] == pair["bare"]["shape"] == {**TINY, "channels_last": False}
    # The kit ran through dlperf run (its session holds the record the throughput came from),
    # and the bare loop applied every option of the kit's header that changes the computation.
    session = Path(pair["kit"]["session"])
    assert session.parent.parent == tmp_path / "results" and session.name == "round-01"
    record = json.loads(next(session.rglob(RECORD)).read_text())
    assert record["measurement"]["throughput"] == pair["kit"]["throughput"]
    assert record["header"]["options"]["optimizer_impl"] == "fused"
    assert result["kit_command"][3:5] == ["run", "--framework"]
    handed = result["handed"]
    assert handed["device"] == "cpu" and handed["optimizer_impl"] == "fused"
    assert handed["set_to_none"] is True and handed["amp_dtype"] is None
    assert handed["num_threads"] == result["threads"] >= 1
    assert not set(handed) & set(NOT_HANDED) and "seq_len" not in handed
    assert pair["kit"]["options"] == pair["bare"]["options"] == handed
    # The table lists the pair (round 1, bare first) and the median line.
    row = next(line for line in printed.splitlines() if line.startswith("| 1 "))
    assert "| bare " in row and f"{ratio:.3f}" in row
    assert f"median kit/bare {ratio:.3f} over 1 rounds" in printed


def test_both_sides_get_the_same_interpreter_environment_and_threads() -> None:
    framework_env("pytorch")
    request = prepare(
        ParityRequest("pytorch", batch_size=4, threads=1, options={"channels_last": 1})
    )
    sides = commands(request)
    kit, bare = sides["kit"], sides["bare"]
    assert kit.argv[0] == bare.argv[0] and kit.argv[0].endswith(".venvs/pytorch/bin/python")
    assert kit.argv[1] == "PyTorch/benchmark/train.py"
    assert bare.argv[1] == "PyTorch/bare_loop.py"
    assert kit.env == bare.env and kit.env["OMP_NUM_THREADS"] == "1"
    assert "channels_last=true" in kit.argv and "channels_last=true" in bare.argv
    # The kit runs warm-up + measured steps; the bare loop times the measured ones after it.
    assert kit.argv[kit.argv.index("--total-steps") + 1] == "15"
    assert bare.argv[bare.argv.index("--steps") + 1] == "12"
    # The kit side of a round is dlperf run of exactly that case, with the same threads.
    driver = sides["driver"].argv
    assert driver[1:4] == ["-m", "driver", "run"]
    for flag, value in (("--variant", "default"), ("--amp", "off"), ("--batch", "4"),
                        ("--repeats", "1"), ("--warmup-steps", "3"), ("--measured-steps", "12"),
                        ("--nodes", "1"), ("--gpus", "1"), ("--dataset", "synthetic")):  # fmt: skip
        assert driver[driver.index(flag) + 1] == value, flag
    assert "channels_last=true" in driver and "--python" not in driver
    # The driver runs in the repository root: a relative --results is made absolute first.
    relative = prepare(ParityRequest("pytorch", results=Path("elsewhere")))
    assert relative.results == Path.cwd() / "elsewhere"
    assert sides["driver"].env["OMP_NUM_THREADS"] == "1" and sides["driver"].terminal


def test_an_existing_install_runs_both_sides(tmp_path: Path) -> None:
    python = framework_env("pytorch")
    request = prepare(ParityRequest("pytorch", python=python, options={"image_size": 32}))
    sides = commands(request)
    assert sides["kit"].argv[0] == sides["bare"].argv[0] == python
    driver = sides["driver"].argv
    assert driver[driver.index("--python") + 1] == python
    # dlperf run takes it too: the local runtime starts the script with that interpreter.
    code = main([
        "run", "--framework", "pytorch", "--model", "resnet50", "--batch", "2", "--nodes", "1",
        "--gpus", "1", "--amp", "off", "--variant", "default", "--python", python,
        "--results", str(tmp_path), "--dry-run",
    ])  # fmt: skip
    assert code == 0
    with pytest.raises(ParityError, match="--python /no/such/python: no such executable"):
        prepare(ParityRequest("pytorch", python="/no/such/python"))


def test_the_case_is_planned_as_dlperf_run_plans_it() -> None:
    framework_env("pytorch")
    # Without a GPU, auto is the CPU smoke profile; its channels_last variant sets the option.
    case, profile = plan_case(prepare(ParityRequest("pytorch", variant="channels_last")))
    assert profile == "cpu-smoke"
    assert case.id == "resnet50/pytorch/1n1g/bs8/fp32/synthetic/channels_last"
    assert case.options == {"channels_last": True} and case.repeats == 1
    assert (case.warmup_steps, case.measured_steps, case.total_steps) == (3, 12, 15)
    case, profile = plan_case(prepare(ParityRequest("pytorch", profile="dlperf")))
    assert profile == "dlperf" and case.options == {"channels_last": True}


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (ParityRequest("caffe"), "not a framework of the kit"),
        (ParityRequest("pytorch", model="bert"), "the bare loops train resnet50"),
        (ParityRequest("pytorch", variant="nchw"), "its variants: channels_last, default"),
        (ParityRequest("oneflow"), "its variants: eager, graph"),
        (ParityRequest("pytorch", profile="gpu-big"), "--profile gpu-big"),
        (ParityRequest("pytorch", options={"image_size": "big"}), "image_size"),
        (ParityRequest("pytorch", options={"channels_last": 2}), "channels_last"),
        (ParityRequest("tensorflow", options={"channels_last": True}), "no option"),
        (ParityRequest("pytorch", rounds=0), "--rounds"),
        (ParityRequest("pytorch", precision="fp8"), "--precision"),
        (ParityRequest("pytorch", topology="1n2g"), "bare pytorch resnet50 loop runs one process"),
        (ParityRequest("pytorch", model="llama", topology="2n2g"), "one host; use 1n<k>g"),
        (ParityRequest("pytorch", model="llama", topology="two"), "--topology two: topology"),
    ],
)
def test_bad_requests_are_refused_with_the_reason(request_: ParityRequest, message: str) -> None:
    with pytest.raises(ParityError, match=message):
        prepare(request_)


def kit_log(steps: int, step_s: float, batch: int = 2, parameters: int = 100) -> str:
    """A kit step log as the protocol's logger writes it, on a fake clock."""
    clock = iter([10.0 + step_s * n for n in range(steps + 1)])
    stream = io.StringIO()
    rank = {"rank": 0, "world_size": 1, "local_rank": 0, "node_rank": 0}
    logger = StepLogger(
        framework="pytorch", model="resnet50", stream=stream, clock=lambda: next(clock),
        rank_env=rank,
    )  # fmt: skip
    options = {"batch_size": batch, "precision": "fp32", "parameters": parameters,
               "device": "cpu", "dataset": "synthetic", "seq_len": 128}  # fmt: skip
    logger.header(versions={}, devices=["cpu"], options=options)
    logger.begin()
    for number in range(1, steps + 1):
        logger.step(number, batch, 1.0)
    logger.end()
    return stream.getvalue()


def bare_line(steps: int, seconds: float, batch: int = 2, parameters: int = 100) -> str:
    record = {"dlperf-bare": "pytorch", "model": "resnet50", "batch_size": batch,
              "precision": "fp32", "parameters": parameters, "device": "cpu",
              "steps": steps, "seconds": seconds, "applied": {"device": "cpu"}}  # fmt: skip
    return "noise\n" + json.dumps(record) + "\n"


def kit_session(root: Path, case: Case, log: str, batch: int = 2) -> Path:
    """A kit session as dlperf run leaves it: the repeat's node log and its record, measured
    by the runner's own function (a log without a window: a parse-error record)."""
    repeat = root / "cases" / case.id / "repeat-01"
    repeat.mkdir(parents=True)
    (repeat / "node0.log").write_text(log)
    try:
        measurement, parsed = evaluate(case, "dlperf-jsonl", {"node0.log": log}, batch)
        header = parsed.header
        verdict, detail = "ok", ""
    except LogParseError as error:
        measurement, header, verdict, detail = None, {}, "parse-error", str(error)
    record = RepeatRecord(
        case_id=case.id, repeat=1, verdict=verdict, batch_size=batch, started_at=0.0,
        finished_at=1.0, commands=[], exit_codes={"local0": 0}, logs=["node0.log"],
        parser="dlperf-jsonl", measurement=measurement, header=header, detail=detail,
    )  # fmt: skip
    write_json(repeat / RECORD, record.to_dict())
    return root


def test_the_kit_side_is_measured_over_its_window(tmp_path: Path) -> None:
    request = ParityRequest("pytorch", batch_size=2, warmup_steps=1, measured_steps=4)
    case, _profile = plan_case(prepare(request))
    run = read_kit(kit_session(tmp_path, case, kit_log(5, 0.5)), case, request, load=0.5)
    assert run.seconds == pytest.approx(2.0) and run.samples == 8
    assert run.throughput == pytest.approx(4.0)
    assert (run.model, run.batch_size, run.parameters) == ("resnet50", 2, 100)
    # What the bare loop is handed: the header's options but the run's facts.
    assert run.options == {"device": "cpu"} and run.session == str(tmp_path)


def test_a_kit_log_cut_short_is_an_error(tmp_path: Path) -> None:
    request = ParityRequest("pytorch", batch_size=2, warmup_steps=1, measured_steps=4)
    case, _profile = plan_case(prepare(request))
    with pytest.raises(ParityError, match="gives no measurement(.|\n)*parse-error"):
        read_kit(kit_session(tmp_path, case, kit_log(3, 0.5)), case, request, load=0.0)
    with pytest.raises(ParityError, match="gives no measurement(.|\n)*cannot be read"):
        read_kit(tmp_path / "nothing", case, request, load=0.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nothing here\n", "printed 0 result lines"),
        (bare_line(2, 1.0) + bare_line(2, 1.0), "printed 2 result lines"),
        (bare_line(2, 0.0), "positive finite"),
        ('{"dlperf-bare": "pytorch", "seconds": 1.0}\n', "malformed"),
    ],
)
def test_bad_bare_output_is_an_error(text: str, message: str) -> None:
    with pytest.raises(ParityError, match=message):
        read_bare(text, load=0.0)


def test_sides_that_trained_different_models_are_refused() -> None:
    bare = read_bare(bare_line(4, 1.0, parameters=100), load=0.0)
    kit = SideRun(**{**bare.model_dump(), "side": "kit", "parameters": 101})
    with pytest.raises(ParityError, match="differ in parameters"):
        check_same_work(bare, kit)
    bare = bare.model_copy(update={"shape": {"image_size": 224, "channels_last": True}})
    kit = kit.model_copy(update={"parameters": 100, "shape": {"image_size": 112}})
    with pytest.raises(ParityError, match="differ in option image_size: bare 224, kit 112"):
        check_same_work(bare, kit)
    check_same_work(bare, kit.model_copy(update={"shape": {"image_size": 224}}))


def test_sides_that_applied_different_options_are_refused() -> None:
    """Every option of the kit's header that changes the computation must be what the bare
    loop says it applied: a missing one, another value, or a flag read as a number fails."""
    options = {"optimizer_impl": "fused", "tf32": False, "lr": 0.003125, "amp_dtype": None}
    bare = read_bare(bare_line(4, 1.0), load=0.0).model_copy(update={"options": options})
    kit = bare.model_copy(update={"side": "kit"})
    check_same_work(bare, kit)
    applied = {**options, "optimizer_impl": "loop", "tf32": 0}
    del applied["amp_dtype"]
    with pytest.raises(ParityError) as error:
        check_same_work(bare.model_copy(update={"options": applied}), kit)
    assert str(error.value) == (
        "the two sides differ in option amp_dtype: bare '(not applied)', kit None; "
        "optimizer_impl: bare 'loop', kit 'fused'; tf32: bare 0, kit False"
    )
    # Options the bare loop applies beyond the kit's (its own defaults) are not compared.
    check_same_work(bare.model_copy(update={"options": {**options, "extra": 1}}), kit)


LLAMA_TINY = {"llama_size": "llama-tiny", "seq_len": 32}
TINY_LLAMA_PARAMETERS = 164_160


def test_the_bare_llama_loop_applies_what_the_kits_llama_header_records() -> None:
    """dlperf parity --model llama: the case planned as dlperf run plans it, the kit's header
    handed over (vision, BERT and SGD keys left out), the bare Llama loop trains with every
    option as the header records it (activation checkpointing included)."""
    framework_env("pytorch")
    request = prepare(ParityRequest(
        "pytorch", model="llama", variant="small", batch_size=2, warmup_steps=1,
        measured_steps=1, threads=1, options={**LLAMA_TINY, "activation_checkpointing": "full"},
    ))  # fmt: skip
    header = probe_header(request, run_process)
    handed = handed_options(header, "llama")
    assert handed["llama_size"] == "llama-tiny" and handed["seq_len"] == 32
    assert handed["activation_checkpointing"] == "full" and handed["optimizer"] == "adamw"
    assert not {"image_size", "momentum", "bert_layers"} & set(handed)
    # one process: nothing sharded on either side (handed, and compared, all the same)
    assert handed["parallelism"] == "none" and handed["distributed_backend"] is None
    check_bare_options(request, handed, run_process)
    finished = run_process(commands(request, handed)["bare"], 600)
    assert finished.code == 0, finished.err[-3000:]
    bare = read_bare(finished.out, load=0.0)
    assert bare.model == "llama" and bare.parameters == TINY_LLAMA_PARAMETERS
    options = header["options"]
    assert options["parameters"] == TINY_LLAMA_PARAMETERS
    kit = bare.model_copy(update={
        "side": "kit", "options": handed, "parameters": options["parameters"],
        "device": options["device"], "precision": options["precision"],
    })  # fmt: skip
    check_same_work(bare, kit)


def test_the_bare_llama_loop_shards_with_fsdp2_under_torchrun() -> None:
    """Two gloo processes: every block and the root sharded by fully_shard, one result line."""
    python = framework_env("pytorch")
    finished = subprocess.run(
        [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "PyTorch/bare_loop.py", "--model", "llama", "--batch-size", "2", "--steps", "2",
         "--warmup-steps", "1", "--precision", "amp", "--option", "llama_size=llama-tiny",
         "--option", "seq_len=32", "--option", "num_threads=1"],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    (line,) = [line for line in finished.stdout.splitlines() if '"dlperf-bare"' in line]
    result = json.loads(line)
    # the whole model's parameters over both shards; bf16 compute from the FSDP2 policy
    assert result["parameters"] == TINY_LLAMA_PARAMETERS
    assert result["applied"]["amp_dtype"] == "bfloat16" and math.isfinite(result["loss"])
    assert result["applied"]["parallelism"] == "fsdp" and result["world_size"] == 2
    assert result["applied"]["distributed_backend"] == "gloo"


def test_llama_pair_at_1n2g_shards_both_sides_with_fsdp2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--topology 1n2g: dlperf run shards the kit's case over two gloo ranks, the bare loop runs
    under torchrun with the options of the kit's header (FSDP2, its bf16 policy, the
    checkpointing); each side over both ranks' samples and its slowest rank's window."""
    framework_env("pytorch")
    out_json = tmp_path / "parity.json"
    code = main([
        "parity", "--framework", "pytorch", "--model", "llama", "--variant", "small",
        "--topology", "1n2g", "--batch", "2", "--precision", "amp", "--rounds", "1",
        "--warmup-steps", "1", "--measured-steps", "2", "--kit-progress", "plain",
        "--option", "llama_size=llama-tiny", "--option", "seq_len=32",
        "--option", "activation_checkpointing=selective",
        "--json", str(out_json), "--results", str(tmp_path / "results"),
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0, printed
    result = json.loads(out_json.read_text())
    assert result["topology"] == "1n2g" and "/1n2g/" in result["case_id"]
    handed = result["handed"]
    assert handed["parallelism"] == "fsdp" and handed["distributed_backend"] == "gloo"
    assert handed["amp_dtype"] == "bfloat16" and handed["activation_checkpointing"] == "selective"
    assert result["bare_command"][1:6] == [
        "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
    ]  # fmt: skip
    assert result["kit_command"][result["kit_command"].index("--gpus") + 1] == "2"
    (pair,) = result["pairs"]
    for side in ("bare", "kit"):
        assert pair[side]["parameters"] == TINY_LLAMA_PARAMETERS
        assert pair[side]["samples"] == 2 * 2 * 2  # two ranks x batch 2 x two steps
        assert pair[side]["options"] == handed
    record = json.loads(next(Path(pair["kit"]["session"]).rglob(RECORD)).read_text())
    assert record["measurement"]["throughput"] == pair["kit"]["throughput"]
    assert record["measurement"]["slowest_rank"] in (0, 1)
    # Sides that sharded differently (or one that did not shard) are refused.
    bare, kit = SideRun.model_validate(pair["bare"]), SideRun.model_validate(pair["kit"])
    check_same_work(bare, kit)
    unsharded = bare.model_copy(update={"options": {**bare.options, "parallelism": "none"}})
    with pytest.raises(ParityError, match="differ in option parallelism: bare 'none'"):
        check_same_work(unsharded, kit)


def test_the_bare_loop_is_handed_what_changes_the_computation() -> None:
    header = {"options": {"lr": 0.1, "channels_last": True, "seq_len": 128, "bert_layers": 12,
                          "loader_workers": 1, "num_threads": 2, "num_threads_source": "cores",
                          "batch_size": 8, "precision": "amp", "amp_dtype": "bfloat16",
                          "data_dir": None, "total_steps": 15, "parameters": 25}}  # fmt: skip
    assert handed_options(header, "resnet50") == {
        "amp_dtype": "bfloat16", "channels_last": True, "lr": 0.1, "num_threads": 2,
    }  # fmt: skip


def test_a_bare_loop_refuses_what_it_cannot_mirror_in_one_line() -> None:
    framework_env("pytorch")
    request = prepare(ParityRequest("pytorch"))
    applied = check_bare_options(request, {"channels_last": True, "lr": 0.5}, run_process)
    assert applied["channels_last"] is True and applied["lr"] == 0.5
    assert applied["optimizer_impl"] == "fused"  # its own defaults: the kit's
    llama = prepare(ParityRequest("pytorch", model="llama", variant="small"))
    for handed, reason in (
        ({"optimizer": "sgd"}, "optimizer=sgd: the Llama loop trains with AdamW"),
        ({"image_size": 32}, "image_size: the bare pytorch loop does not mirror 'image_size'"),
    ):
        with pytest.raises(ParityError, match=f"refuses the kit's case: --option {reason}"):
            check_bare_options(llama, handed, run_process)
    for handed, reason in (
        ({"cuda_graphs": True}, "cuda_graphs=true: a bare loop does not capture its step"),
        ({"dali_mode": 1}, "dali_mode: the bare pytorch loop does not mirror 'dali_mode'"),
        ({"tf32": 1}, "tf32=1: expected true or false"),
    ):
        with pytest.raises(ParityError, match=f"refuses the kit's case: --option {reason}"):
            check_bare_options(request, handed, run_process)


@pytest.mark.parametrize(
    ("framework", "precision", "variant"),
    [
        ("pytorch", "amp", "channels_last"),
        ("tensorflow", "amp", "default"),
        ("paddle", "amp", "default"),
        ("mxnet", "amp", "default"),
        ("oneflow", "fp32", "graph"),
        # JAX compiles ResNet-50 twice here (the kit's initializers, the bare step): about a
        # minute on a 2-core CPU, so with the slow tests only.
        pytest.param("jax", "amp", "default", marks=SLOW),
    ],
)
def test_each_bare_loop_applies_what_its_kits_header_records(
    framework: str, precision: str, variant: str
) -> None:
    """The kit's benchmark, started until its header, hands its options to the framework's bare
    loop, which trains with them and says it applied every one as the header records it."""
    framework_env(framework)
    request = prepare(ParityRequest(
        framework, batch_size=2, precision=precision, variant=variant, warmup_steps=1,
        measured_steps=1, threads=1, options=TINY,
    ))  # fmt: skip
    header = probe_header(request, run_process)
    handed = handed_options(header, "resnet50")
    assert handed["image_size"] == 32 and handed["num_threads"] == 1
    check_bare_options(request, handed, run_process)
    finished = run_process(commands(request, handed)["bare"], 600)
    assert finished.code == 0, finished.err[-3000:]
    bare = read_bare(finished.out, load=0.0)
    options = header["options"]
    kit = bare.model_copy(update={
        "side": "kit", "options": handed, "parameters": options["parameters"],
        "device": options["device"], "precision": options["precision"],
    })  # fmt: skip
    check_same_work(bare, kit)
    assert bare.device == options["device"] and bare.cpu_share > 0


def fake_runner(
    case: Case, order: list[str], kit_step_s: Callable[[int], float]
) -> Callable[[SideCommand, float], tuple[int, str, str]]:
    """The four processes of a parity run: the probe (the kit's script up to its header), the
    bare loop's option check, the kit's dlperf run (it writes its session) and the bare loop."""

    def runner(command: SideCommand, _timeout: float) -> tuple[int, str, str]:
        argv = command.argv
        if command.stop_after:
            assert argv[1] == "PyTorch/benchmark/train.py"
            return 0, kit_log(0, 0.5), ""
        if "--check-options" in argv:
            return 0, json.dumps({OPTIONS_TAG: "pytorch", "options": {"device": "cpu"}}), ""
        if argv[1:4] == ["-m", "driver", "run"]:
            order.append("kit")
            root = Path(argv[argv.index("--results") + 1]) / argv[argv.index("--session") + 1]
            kit_session(root, case, kit_log(3, kit_step_s(order.count("kit"))))
            return 0, "", ""
        assert argv[1] == "PyTorch/bare_loop.py" and "--option" in argv
        order.append("bare")
        return 0, bare_line(2, 1.0, parameters=100), ""

    return runner


def test_rounds_alternate_and_the_median_ratio_is_reported(tmp_path: Path) -> None:
    # The kit gets slower each round (0.5 s steps, then 0.55 s...); the bare loop stays at 1 s
    # per 2 steps: the ratios are known, and so is their median.
    framework_env("pytorch")  # the commands name its interpreter
    order: list[str] = []
    request = ParityRequest(
        "pytorch", batch_size=2, warmup_steps=1, measured_steps=2, rounds=3, results=tmp_path
    )
    case, _profile = plan_case(prepare(request))
    runner = fake_runner(case, order, lambda round_: 0.5 + 0.05 * (round_ - 1))
    result = run_parity(request, runner=runner)
    assert order == ["bare", "kit", "kit", "bare", "bare", "kit"]
    assert [pair.first for pair in result.pairs] == ["bare", "kit", "bare"]
    assert result.ratios == pytest.approx([1.0, 0.5 / 0.55, 0.5 / 0.6])
    assert result.median_ratio == pytest.approx(0.5 / 0.55)
    text = format_result(result)
    assert "median kit/bare 0.909 over 3 rounds (spread 0.833..1.000; harness cost)" in text
    assert all(f"| {n} " in text for n in (1, 2, 3))
    # Each round's kit is its own dlperf run session; the bare loop got the header's options.
    sessions = sorted(Path(pair.kit.session or "").name for pair in result.pairs)
    assert sessions == ["round-01", "round-02", "round-03"]
    assert result.handed == {"device": "cpu"} and "device=cpu" in result.bare_command
    assert "both sides ran the same 1 options of the kit's header" in text


def test_a_failing_side_is_reported_with_its_output() -> None:
    def runner(_command: SideCommand, _timeout: float) -> tuple[int, str, str]:
        return 1, "", "Traceback ...\nRuntimeError: boom"

    framework_env("pytorch")
    with pytest.raises(ParityError, match="exited with 1(.|\n)*boom"):
        run_parity(ParityRequest("pytorch", rounds=1), runner=runner)


def test_the_drivers_cpu_over_the_kits_window_is_read_from_its_samples() -> None:
    # (time, main thread, other threads, children) once a second; the window is 1.5 s .. 3.5 s
    samples = [(0.0, 0.0, 0.0, 0.0), (1.0, 0.01, 0.02, 1.0), (2.0, 0.03, 0.04, 3.0),
               (3.0, 0.05, 0.06, 5.0), (4.0, 0.07, 0.08, 7.0)]  # fmt: skip
    cost, children = driver_cost(samples, (1.5, 3.5))
    assert isinstance(cost, DriverCost) and cost.window_s == 2.0
    assert (cost.main_thread_s, cost.other_threads_s) == pytest.approx((0.04, 0.04))
    assert cost.ms_per_s == pytest.approx(40.0) and children == pytest.approx(4.0)
    assert driver_cost(samples, (0.5, 4.5)) == (None, None)  # not covered: not guessed
    # A live process of our own (this test process may hold other tests' children): its own
    # threads' and its children's CPU time from /proc.
    busy = "import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass\n"
    child = subprocess.Popen([sys.executable, "-c", busy + "print(flush=True)\ntime.sleep(30)"],
                             stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline()  # done spinning
        now, main, others, descendants = cpu_sample(child.pid)
    finally:
        child.kill()
        child.wait()
    assert now > 0 and main > 0 and others >= 0 and descendants == 0
    assert Finished(*(0, "out", "err")).cpu == ()


def test_the_share_adjusted_ratio_takes_out_the_cores_a_side_did_not_get() -> None:
    bare = read_bare(bare_line(4, 1.0), load=0.0).model_copy(update={"cpu_share": 0.5})
    kit = SideRun(**{**bare.model_dump(), "side": "kit", "throughput": 16.0, "cpu_share": 1.0})
    pair = ParityPair(round=1, bare=bare, kit=kit, first="bare")
    # The kit ran twice as fast with twice the cores: per CPU share, the same speed.
    assert pair.ratio == pytest.approx(2.0)
    assert pair.share_adjusted_ratio == pytest.approx(1.0)
    unknown = pair.model_copy(update={"kit": kit.model_copy(update={"cpu_share": 0.0})})
    assert unknown.share_adjusted_ratio is None
