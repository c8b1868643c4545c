"""driver.bench: the protocol's OOM record and its one matcher, the shared options, and
run_benchmark over a framework-free adapter (a least-squares model trained with floats)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from driver.bench import fingerprint
from driver.bench.contract import parse_benchmark_args, resolve_options
from driver.bench.host import threads_per_process
from driver.bench.loop import Adapter, DeviceTimer, Run, is_oom, run_benchmark
from driver.bench.protocol import EXIT_OOM, has_oom_record, oom_record
from driver.model.hardware import hardware_of
from driver.model.measure import Window, measure_repeat
from driver.parsers.dlperf_jsonl import DlperfJsonlParser

REPO_ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------
# Protocol: the OOM record and the one function that recognises it


def test_the_oom_record_keeps_its_byte_format() -> None:
    line = oom_record(3, 512, MemoryError("CUDA out of memory.\nTried to allocate 2 GiB"))
    assert line == (
        '{"dlperf": "oom", "v": 1, "rank": 3, "batch_size": 512, '
        '"error": "MemoryError", "message": "CUDA out of memory."}'
    )
    assert oom_record(0, 8) == '{"dlperf": "oom", "v": 1, "rank": 0, "batch_size": 8}'


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (oom_record(0, 8), True),
        ('[default1]:{"dlperf": "oom", "rank": 1}', True),  # torchrun's prefix
        ('{"dlperf":"oom","rank":1}', True),  # written without spaces
        (b'{"dlperf": "oom", "rank": 1}\n', True),  # a launcher relay's raw line
        ('{"dlperf": "header", "options": {"note": "oom"}}', False),
        ("RuntimeError: CUDA out of memory", False),  # only the record says it
    ],
)
def test_one_matcher_recognises_the_oom_record(text: str | bytes, found: bool) -> None:
    assert has_oom_record(text) is found


def test_allocator_failures_are_told_by_type_or_message() -> None:
    class DeviceOOM(RuntimeError):
        pass

    assert is_oom(MemoryError())
    assert is_oom(DeviceOOM("no words"), (DeviceOOM,))
    assert is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory"))
    assert is_oom(RuntimeError("std::bad_alloc"), messages=("std::bad_alloc",))
    assert not is_oom(RuntimeError("shape mismatch"))
    assert not is_oom(SystemExit("out of memory"))  # an exit is never an allocator failure


# --------------------------------------------------------------------------------------------
# Contract and host


def test_shared_knobs_get_model_defaults_and_the_framework_its_own() -> None:
    args = parse_benchmark_args(
        ["--model", "resnet50", "--batch-size", "64", "--total-steps", "1", "--option", "x=1"]
    )
    options = resolve_options(args, {"x": 0, "fused": True}, world_size=4, on_gpu=False)
    assert options["optimizer"] == "sgd" and options["lr"] == pytest.approx(0.1)
    assert options["x"] == 1 and options["fused"] is True and options["image_size"] == 224
    bert = parse_benchmark_args(["--model", "bert", "--batch-size", "4", "--total-steps", "1"])
    assert resolve_options(bert, {}, world_size=1, on_gpu=False)["grad_clip"] == 1.0
    dali = parse_benchmark_args([*"--model bert --batch-size 4 --total-steps 1".split(),
                                 "--option", "dali=true"])  # fmt: skip
    with pytest.raises(SystemExit):
        resolve_options(dali, {}, world_size=1, on_gpu=False)
    masked = parse_benchmark_args([*"--model bert --batch-size 4 --total-steps 1".split(),
                                   "--option", "max_predictions=128"])  # fmt: skip
    with pytest.raises(SystemExit):  # as many masked positions as tokens: no [CLS] left
        resolve_options(masked, {}, world_size=1, on_gpu=False)


def test_threads_follow_the_option_then_omp_then_cores_per_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert threads_per_process(3) == (3, "option")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads_per_process(0) == (1, "OMP_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    cores = len(os.sched_getaffinity(0))
    assert threads_per_process(0) == (max(1, cores // 2), "cores/local processes")


# --------------------------------------------------------------------------------------------
# The loop, over an adapter without a framework


class LeastSquares(Adapter):
    """Fits y = 3x by gradient descent on floats; every call is recorded in ``events``."""

    framework = "toy"
    own_options = {"toy_lr": 0.1}

    def __init__(self, run: Run) -> None:
        super().__init__(run)
        self.events: list[str] = []
        self.weight = 0.0

    def setup(self) -> bool:
        self.events.append("setup")
        return False

    def check_options(self, options: dict[str, Any]) -> None:
        self.events.append("check_options")
        if options["toy_lr"] <= 0:
            from driver.bench.contract import OptionError

            raise OptionError("toy_lr must be positive")

    def build_model(self) -> int:
        self.events.append("build_model")
        return 1

    def make_batch(self) -> list[tuple[float, float]]:
        return [(x, 3.0 * x) for x in (1.0, 2.0)]

    def step(self, batch: list[tuple[float, float]]) -> float:
        self.events.append("step")
        grad = sum(2 * (self.weight * x - y) * x for x, y in batch) / len(batch)
        self.weight -= self.options["toy_lr"] * grad
        return sum((self.weight * x - y) ** 2 for x, y in batch) / len(batch)

    def sync(self) -> None:
        self.events.append("sync")

    def device(self) -> str:
        return "cpu"

    def versions(self) -> dict[str, Any]:
        return {"toy": "1"}

    def devices(self) -> list[str]:
        return ["abacus"]

    def header_options(self) -> dict[str, Any]:
        return {"distributed_backend": None}

    def barrier(self) -> None:
        self.events.append("barrier")

    def weights_checksum(self) -> float:
        return abs(self.weight)

    def finish(self) -> None:
        self.events.append("finish")


def run_toy(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], world_size: int = 1
) -> tuple[int, str, LeastSquares]:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    made: list[LeastSquares] = []  # the adapter, for the events it recorded

    def factory(run: Run) -> LeastSquares:
        made.append(LeastSquares(run))
        return made[0]

    out = io.StringIO()
    with redirect_stdout(out):
        code = run_benchmark(factory, argv, description="toy", models=("toy",))
    return code, out.getvalue(), made[0]


def test_the_loop_writes_the_protocol_the_parser_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = "--model toy --batch-size 2 --warmup-steps 2 --total-steps 5".split()
    code, out, adapter = run_toy(monkeypatch, [*argv, "--option", "weights_checksum=true"])
    assert code == 0
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["dlperf"] for r in records] == ["header", "begin", *["step"] * 5, "end"]
    header = records[0]
    assert header["framework"] == "toy" and header["devices"] == ["abacus"]
    # The node's hardware fingerprint, beside the old keys; the driver reads it back whole.
    assert {"fingerprint": header["fingerprint"], "hardware": header["hardware"]} == (
        fingerprint.take()
    )
    on_cpu = {**header, "devices": [header["fingerprint"]["cpu_model"]]}  # the toy's "abacus"
    assert hardware_of(on_cpu).label == fingerprint.label_of({**header["fingerprint"], "gpus": []})
    options = header["options"]
    shared = {"batch_size": 2, "global_batch_size": 2, "precision": "fp32", "warmup_steps": 2,
              "total_steps": 5, "device": "cpu", "seed": 1234, "xla": False, "parameters": 1,
              "dataset": "synthetic", "toy_lr": 0.1, "distributed_backend": None}  # fmt: skip
    assert {k: options[k] for k in shared} == shared
    assert {"num_threads", "num_threads_source", "optimizer", "lr"} <= set(options)
    losses = [r["loss"] for r in records if r["dlperf"] == "step"]
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0] / 10  # it trains
    # A sync before every timestamp; no barrier with one rank; finish last.
    assert adapter.events[:3] == ["setup", "check_options", "build_model"]
    assert adapter.events.count("step") == 5 and "barrier" not in adapter.events
    steps = [i for i, event in enumerate(adapter.events) if event == "step"]
    assert all(adapter.events[i + 1] == "sync" for i in steps)
    assert adapter.events[-1] == "finish"
    assert f"dlperf-weights-checksum rank=0 sum={adapter.weight:.6f}" in out
    parsed = DlperfJsonlParser().parse({"node0.log": out})
    assert parsed.world_size == 1 and len(parsed.ranks[0].points) == 6  # begin + 5 steps


class TimedLeastSquares(LeastSquares):
    """The toy with a device clock: the timer's marks land in the same event list."""

    def device_timer(self) -> DeviceTimer:
        events = self.events

        class Timer(DeviceTimer):
            source = "toy-clock"

            def mark_start(self) -> None:
                events.append("mark_start")

            def mark_end(self) -> None:
                events.append("mark_end")

            def seconds(self) -> float:
                return 0.25

        return Timer()


@pytest.mark.parametrize("step_sync", ["every", "boundary"])
def test_step_sync_and_the_device_clock_frame_the_window(
    monkeypatch: pytest.MonkeyPatch, step_sync: str
) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    made: list[TimedLeastSquares] = []
    argv = "--model toy --batch-size 2 --warmup-steps 2 --total-steps 6 --option"
    argv += f" step_sync={step_sync}"
    out = io.StringIO()
    with redirect_stdout(out):
        run_benchmark(lambda run: made.append(TimedLeastSquares(run)) or made[0], argv.split(),
                      description="toy", models=("toy",))  # fmt: skip
    records = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    steps = [r for r in records if r["dlperf"] == "step"]
    unsynced = [r["step"] for r in steps if r.get("synced") is False]
    # Boundary: only the window's two ends (after warm-up step 2 and last step 6) are synced,
    # and an unsynced step carries no loss (it was never read from the device).
    assert unsynced == ([] if step_sync == "every" else [1, 3, 4, 5])
    assert all(r["loss"] is None for r in steps if r["step"] in unsynced)
    events = made[0].events
    marks = [e for e in events if e.startswith("mark")]
    assert marks == ["mark_start", "mark_end"]
    step_at = [i for i, e in enumerate(events) if e == "step"]
    # start: after warm-up step 2's sync; end: queued right after step 6, before its sync
    assert step_at[1] < events.index("mark_start") < step_at[2]
    assert events.index("mark_end") == step_at[5] + 1 and events[step_at[5] + 2] == "sync"
    window = records[-1]
    assert (window["dlperf"], window["seconds"], window["steps"], window["source"]) == (
        "device-window",
        0.25,
        4,
        "toy-clock",
    )
    # The parser keeps the window's ends and marks what it cannot slice; CV needs synced bounds.
    parsed = DlperfJsonlParser().parse({"node0.log": out.getvalue()})
    points = {p.step: p.synced for p in parsed.ranks[0].points}
    assert [s for s, synced in points.items() if not synced] == unsynced
    measured = measure_repeat(parsed, Window(2, 4))
    assert measured.samples == 8
    assert (measured.interval_cv is None) is (step_sync == "boundary")


def test_a_step_sync_mode_outside_the_two_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        argv = "--model toy --batch-size 2 --total-steps 2 --option step_sync=half"
        run_toy(monkeypatch, argv.split())
    assert exit_info.value.code == 2
    assert "step_sync must be one of every, boundary, got 'half'" in capsys.readouterr().err


def test_several_ranks_meet_at_a_barrier_before_and_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = "--model toy --batch-size 2 --total-steps 3".split()
    _code, out, adapter = run_toy(monkeypatch, argv, world_size=2)
    events = adapter.events
    assert events.count("barrier") == 2
    assert events.index("barrier") < events.index("step")
    assert events[-2:] == ["barrier", "finish"]
    assert json.loads(out.splitlines()[0])["options"]["global_batch_size"] == 4


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--option", "toy_lr=-1"], "toy_lr must be positive"),
        (["--dataset", "real", "--data-dir", "/data"], "toy scripts have no input pipeline"),
        # a key given twice: the last would win without a word (also spelled with a dash)
        (["--option", "toy_lr=1", "--option", "toy_lr=2"], "'toy_lr' is given twice"),
        (["--option", "toy_lr=1", "--option", "toy-lr=1"], "'toy_lr' is given twice"),
    ],
)
def test_a_bad_option_fails_like_argparse_before_anything_is_built(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    argv = ["--model", "toy", "--batch-size", "2", "--total-steps", "3", *extra]
    with pytest.raises(SystemExit) as exit_info:
        run_toy(monkeypatch, argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


TOY_SCRIPT = """
import sys
from driver.bench.loop import run_benchmark
from tests.test_bench_loop import LeastSquares

class Failing(LeastSquares):
    def build_model(self):
        raise {error}

sys.exit(run_benchmark(Failing, sys.argv[1:], description="toy", models=("toy",)))
"""


def run_failing(error: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TOY_SCRIPT.format(error=error)),
         "--model", "toy", "--batch-size", "4096", "--total-steps", "2"],
        cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "RANK": "1"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_out_of_memory_prints_the_record_and_exits_86() -> None:
    done = run_failing('MemoryError("out of device memory")')
    assert done.returncode == EXIT_OOM == 86, done.stderr
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record == {"dlperf": "oom", "v": 1, "rank": 1, "batch_size": 4096,
                      "error": "MemoryError", "message": "out of device memory"}  # fmt: skip
    assert "out of memory at batch size 4096" in done.stderr


def test_another_error_is_a_plain_failure_with_its_traceback() -> None:
    done = run_failing('ValueError("shape mismatch")')
    assert done.returncode == 1
    assert "ValueError: shape mismatch" in done.stderr and not has_oom_record(done.stdout)


@pytest.mark.parametrize(
    "words",
    [
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
        "GET was unable to find an engine to execute this computation",
        "Unable to find a valid cuDNN algorithm to run convolution",
    ],
)
def test_a_gpu_library_allocation_failure_is_out_of_memory_with_its_words(words: str) -> None:
    assert is_oom(RuntimeError(words))
    done = run_failing(f"RuntimeError({words!r})")
    assert done.returncode == EXIT_OOM, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["message"] == words


# --------------------------------------------------------------------------------------------
# The framework build against the GPU, before anything is built on it


class OnAGpu(LeastSquares):
    """The toy on a GPU of capability 9.0 whose build lists ``ARCHS``."""

    ARCHS: list[str] = []

    def setup(self) -> bool:
        self.events.append("setup")
        return True

    def device_architecture(self) -> tuple[tuple[int, int], list[str], str]:
        return (9, 0), self.ARCHS, "toy 1.0"


def run_on_gpu(monkeypatch: pytest.MonkeyPatch, archs: list[str], argv: list[str]):  # noqa: ANN201
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setattr(OnAGpu, "ARCHS", archs)
    made: list[OnAGpu] = []

    def factory(run: Run) -> OnAGpu:
        made.append(OnAGpu(run))
        return made[0]

    out = io.StringIO()
    with redirect_stdout(out):
        code = run_benchmark(factory, argv, description="toy", models=("toy",))
    return code, out.getvalue(), made[0]


def test_a_build_without_kernels_for_the_gpu_is_refused_before_the_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = "--model toy --batch-size 2 --warmup-steps 1 --total-steps 3".split()
    with pytest.raises(SystemExit) as exit_info:
        run_on_gpu(monkeypatch, ["sm_70", "sm_75"], argv)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "no kernels for this GPU's compute capability 9.0" in error and "CUDA >= 11.8" in error


def test_a_ptx_only_build_is_a_warning_in_the_record_its_compile_out_of_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = "--model toy --batch-size 2 --warmup-steps 0 --total-steps 3".split()
    code, out, adapter = run_on_gpu(monkeypatch, ["sm_75", "compute_75"], argv)
    assert code == 0
    header = json.loads(next(line for line in out.splitlines() if '"header"' in line))
    assert "only PTX" in header["options"]["gpu_arch"]
    assert adapter.events.count("step") == 4  # one before the window: the PTX compile
    first_step, begin = adapter.events.index("step"), adapter.events.index("build_model")
    assert begin < first_step
    code, out, adapter = run_on_gpu(monkeypatch, ["sm_90"], argv)
    assert "gpu_arch" not in json.loads(out.splitlines()[0])["options"]
    assert adapter.events.count("step") == 3
