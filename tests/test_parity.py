"""``dlperf parity`` (driver.studies.parity): the kit's benchmark beside a bare loop.

Correctness only, never timing: a real PyTorch pair at tiny shapes through the command line,
and the reading, checking and alternation of the pairs with step logs written by the protocol's
own logger.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from driver.bench.protocol import StepLogger
from driver.frontend.cli import main
from driver.studies.parity import (
    ParityError,
    ParityPair,
    ParityRequest,
    SideCommand,
    SideRun,
    check_same_work,
    commands,
    format_result,
    prepare,
    read_bare,
    read_kit,
    run_parity,
)
from tests.real_frameworks import framework_env

TINY = {"image_size": 32, "num_classes": 10}
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


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (ParityRequest("caffe"), "not a framework of the kit"),
        (ParityRequest("pytorch", model="bert"), "the bare loops train resnet50"),
        (ParityRequest("pytorch", options={"compile": True}), "bare loops apply only"),
        (ParityRequest("pytorch", options={"image_size": "big"}), "image_size"),
        (ParityRequest("pytorch", options={"channels_last": 2}), "channels_last"),
        (ParityRequest("tensorflow", options={"channels_last": True}), "no option"),
        (ParityRequest("pytorch", rounds=0), "--rounds"),
        (ParityRequest("pytorch", precision="fp8"), "--precision"),
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
               "device": "cpu"}  # fmt: skip
    logger.header(versions={}, devices=["cpu"], options=options)
    logger.begin()
    for number in range(1, steps + 1):
        logger.step(number, batch, 1.0)
    logger.end()
    return stream.getvalue()


def bare_line(steps: int, seconds: float, batch: int = 2, parameters: int = 100) -> str:
    record = {"dlperf-bare": "pytorch", "model": "resnet50", "batch_size": batch,
              "precision": "fp32", "parameters": parameters, "device": "cpu",
              "steps": steps, "seconds": seconds}  # fmt: skip
    return "noise\n" + json.dumps(record) + "\n"


def test_the_kit_side_is_measured_over_its_window() -> None:
    request = ParityRequest("pytorch", batch_size=2, warmup_steps=1, measured_steps=4)
    run = read_kit(kit_log(5, 0.5), request, load=0.5)
    assert run.seconds == pytest.approx(2.0) and run.samples == 8
    assert run.throughput == pytest.approx(4.0)
    assert (run.model, run.batch_size, run.parameters) == ("resnet50", 2, 100)


def test_a_kit_log_cut_short_is_an_error() -> None:
    request = ParityRequest("pytorch", batch_size=2, warmup_steps=1, measured_steps=4)
    with pytest.raises(ParityError, match="gives no measurement"):
        read_kit(kit_log(3, 0.5), request, load=0.0)


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


def test_rounds_alternate_and_the_median_ratio_is_reported() -> None:
    # The kit gets slower each round (0.5 s steps, then 0.55 s...); the bare loop stays at 1 s
    # per 2 steps: the ratios are known, and so is their median.
    framework_env("pytorch")  # the commands name its interpreter
    order: list[str] = []

    def runner(command: SideCommand, _timeout: float) -> tuple[int, str, str]:
        side = "kit" if "train.py" in command.argv[1] else "bare"
        order.append(side)
        kit_round = order.count("kit")
        if side == "kit":
            return 0, kit_log(3, 0.5 + 0.05 * (kit_round - 1)), ""
        return 0, bare_line(2, 1.0, parameters=100), ""

    request = ParityRequest("pytorch", batch_size=2, warmup_steps=1, measured_steps=2, rounds=3)
    result = run_parity(request, runner=runner)
    assert order == ["bare", "kit", "kit", "bare", "bare", "kit"]
    assert [pair.first for pair in result.pairs] == ["bare", "kit", "bare"]
    assert result.ratios == pytest.approx([1.0, 0.5 / 0.55, 0.5 / 0.6])
    assert result.median_ratio == pytest.approx(0.5 / 0.55)
    text = format_result(result)
    assert "median kit/bare 0.909 over 3 rounds (spread 0.833..1.000; harness cost)" in text
    assert all(f"| {n} " in text for n in (1, 2, 3))


def test_a_failing_side_is_reported_with_its_output() -> None:
    def runner(_command: SideCommand, _timeout: float) -> tuple[int, str, str]:
        return 1, "", "Traceback ...\nRuntimeError: boom"

    framework_env("pytorch")
    with pytest.raises(ParityError, match="exited with 1(.|\n)*boom"):
        run_parity(ParityRequest("pytorch", rounds=1), runner=runner)


def test_the_share_adjusted_ratio_takes_out_the_cores_a_side_did_not_get() -> None:
    bare = read_bare(bare_line(4, 1.0), load=0.0).model_copy(update={"cpu_share": 0.5})
    kit = SideRun(**{**bare.model_dump(), "side": "kit", "throughput": 16.0, "cpu_share": 1.0})
    pair = ParityPair(round=1, bare=bare, kit=kit, first="bare")
    # The kit ran twice as fast with twice the cores: per CPU share, the same speed.
    assert pair.ratio == pytest.approx(2.0)
    assert pair.share_adjusted_ratio == pytest.approx(1.0)
    unknown = pair.model_copy(update={"kit": kit.model_copy(update={"cpu_share": 0.0})})
    assert unknown.share_adjusted_ratio is None
