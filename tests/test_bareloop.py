"""The bare loops' shared command line and result line (driver/studies/bareloop.py)."""

from __future__ import annotations

import json

import pytest

from driver.studies.bareloop import TAG, parse_args, print_result

BASE = ["--model", "resnet50", "--batch-size", "4", "--steps", "3"]


def test_options_merge_over_the_defaults_and_threads_come_from_omp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    args = parse_args("pytorch", [*BASE, "--option", "image_size=64", "--option",
                                  "channels_last=true"], layouts=True)  # fmt: skip
    assert args.options == {"image_size": 64, "num_classes": 1000, "channels_last": True}
    assert args.threads == 3 and args.warmup_steps == 3 and args.precision == "fp32"


@pytest.mark.parametrize(
    ("extra", "layouts", "message"),
    [
        (["--option", "compile=true"], True, "a bare loop applies only"),
        (["--option", "image_size=big"], True, "expected a positive integer"),
        (["--option", "channels_last=maybe"], True, "expected true or false"),
        (["--option", "channels_last=true"], False, "has no such option"),
        (["--steps", "0"], True, "must be positive"),
    ],
)
def test_bad_arguments_exit_with_the_reason(
    extra: list[str], layouts: bool, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args("mxnet", [*BASE, *extra], layouts=layouts)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_the_result_line_says_what_ran(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_args("paddle", BASE)
    print_result("paddle", args, seconds=1.5, parameters=10, device="cpu", loss=2.0)
    record = json.loads(capsys.readouterr().out)
    assert record[TAG] == "paddle" and record["seconds"] == 1.5 and record["steps"] == 3
    assert record["batch_size"] == 4 and record["options"]["image_size"] == 224
