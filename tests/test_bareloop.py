"""The bare loops' shared command line and result line (driver/bareloop.py)."""

from __future__ import annotations

import json

import pytest

from driver.studies.bareloop import COMMON_OPTIONS, OPTIONS_TAG, TAG, only, parse_args, print_result

BASE = ["--model", "resnet50", "--batch-size", "4", "--steps", "3"]
WITH_LAYOUTS = {**COMMON_OPTIONS, "channels_last": False, "cuda_graphs": False}
REFUSALS = {"cuda_graphs": only(False, "a bare loop does not capture its step")}


def test_options_merge_over_the_defaults_and_threads_come_from_omp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    args = parse_args("pytorch", [*BASE, "--option", "image_size=64", "--option",
                                  "channels_last=true"], options=WITH_LAYOUTS)  # fmt: skip
    shape = {key: args.options[key] for key in ("image_size", "num_classes", "channels_last")}
    assert shape == {"image_size": 64, "num_classes": 1000, "channels_last": True}
    assert args.threads == 3 and args.warmup_steps == 3 and args.precision == "fp32"
    # The model's defaults are resolved as the kit resolves them: SGD at 0.1 x batch / 256.
    assert args.options["lr"] == pytest.approx(0.1 * 4 / 256)
    assert args.options["weight_decay"] == 1e-4 and args.options["optimizer"] == "sgd"
    # The kit's thread count, handed as an option, wins over the environment.
    args = parse_args("pytorch", [*BASE, "--option", "num_threads=2"], options=WITH_LAYOUTS)
    assert args.threads == 2
    adamw = parse_args("pytorch", [*BASE, "--option", "optimizer=adamw"], options=WITH_LAYOUTS)
    assert (adamw.options["lr"], adamw.options["weight_decay"]) == (1e-4, 0.01)


@pytest.mark.parametrize(
    ("extra", "options", "message"),
    [
        (["--option", "compile=true"], WITH_LAYOUTS, "the bare mxnet loop does not mirror"),
        (["--option", "image_size=big"], WITH_LAYOUTS, "expected a positive integer"),
        (["--option", "image_size=0"], WITH_LAYOUTS, "expected a positive integer"),
        (["--option", "channels_last=maybe"], WITH_LAYOUTS, "expected true or false"),
        (["--option", "channels_last=true"], COMMON_OPTIONS, "does not mirror 'channels_last'"),
        (["--option", "cuda_graphs=true"], WITH_LAYOUTS, "does not capture its step"),
        (["--option", "lr=-1"], WITH_LAYOUTS, "expected a number >= 0"),
        (["--option", "optimizer=lamb"], WITH_LAYOUTS, "expected sgd or adamw"),
        (["--option", "noequals"], WITH_LAYOUTS, "expected KEY=VALUE"),
        (["--steps", "0"], WITH_LAYOUTS, "must be positive"),
    ],
)
def test_bad_arguments_exit_with_the_reason(
    extra: list[str], options: dict, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args("mxnet", [*BASE, *extra], options=options, refusals=REFUSALS)
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in error and error.startswith("mxnet/bare_loop.py: error: --")


def test_the_option_check_says_what_would_be_applied(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(
            "pytorch", [*BASE, "--option", "lr=0.5", "--option", "xla=false", "--check-options"],
            options=WITH_LAYOUTS,
        )  # fmt: skip
    assert exit_.value.code == 0
    line = json.loads(capsys.readouterr().out)
    assert line[OPTIONS_TAG] == "pytorch"
    assert line["options"]["lr"] == 0.5 and line["options"]["xla"] is False


def test_the_result_line_says_what_ran(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_args("paddle", BASE, options=COMMON_OPTIONS)
    print_result(
        "paddle", args, seconds=1.5, cpu_seconds=2.5, parameters=10, device="cpu", loss=2.0,
        applied={"image_size": 224, "device": "cpu"},
    )  # fmt: skip
    record = json.loads(capsys.readouterr().out)
    assert record[TAG] == "paddle" and record["seconds"] == 1.5 and record["steps"] == 3
    assert record["batch_size"] == 4 and record["applied"]["image_size"] == 224
    assert record["cpu_seconds"] == 2.5 and record["threads"] == args.threads
