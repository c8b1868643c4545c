"""Telemetry: /proc sampling of real process trees, NVML without a GPU, summaries of samples."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from driver.model.hardware import gpu_names
from driver.telemetry import TelemetrySampler, nvml_status, parse_samples, summarize_samples
from driver.telemetry.sampler import (
    CpuTracker,
    parse_stat,
    process_tree,
    read_process_table,
    read_tree_table,
)
from driver.telemetry.summary import TELEMETRY_FIELDS


def test_parse_stat_counts_fields_after_the_last_parenthesis() -> None:
    fields = ["S", "41", "7"] + ["0"] * 8 + ["150", "50"] + ["0"] * 8 + ["999"]
    line = "1234 (a (weird) name) " + " ".join(fields) + " 0 0\n"
    assert parse_stat(line) == (41, 200, 999)


def test_process_tree_follows_ppid_links_across_sessions() -> None:
    table = {10: (1, 0, 0), 11: (10, 0, 0), 12: (11, 0, 0), 20: (1, 0, 0), 13: (10, 0, 0)}
    assert process_tree([10], table) == {10, 11, 12, 13}
    assert process_tree([99], table) == set()


def test_cpu_tracker_counts_ticks_of_new_and_old_processes() -> None:
    tracker = CpuTracker([10])
    tracker.ticks_per_s, tracker.page_mib = 100.0, 0.004
    first = tracker.sample({10: (1, 100, 1000)}, mono=1.0)
    assert first["cpu_pct"] is None and first["processes"] == 1
    second = tracker.sample({10: (1, 150, 1000), 11: (10, 20, 500)}, mono=2.0)
    # 50 + 20 ticks in 1 s at 100 ticks/s = 70% of one core; RSS 1500 pages
    assert second["cpu_pct"] == pytest.approx(70.0)
    assert second["rss_mib"] == pytest.approx(6.0)
    assert second["processes"] == 2


BURN = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import time\\nend = time.time() + 1.2\\nwhile time.time() < end: pass"],
    start_new_session=True)
end = time.time() + 1.2
while time.time() < end: pass
child.wait()
"""


def test_sampler_measures_a_real_process_tree_including_new_sessions(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", BURN], start_new_session=True)
    sampler = TelemetrySampler(tmp_path, {0: [process.pid]}, interval_s=0.1).start()
    process.wait(timeout=30)
    facts = sampler.stop()
    assert facts["files"] == ["telemetry-node0.jsonl"] and facts["samples"] >= 5
    samples = parse_samples((tmp_path / "telemetry-node0.jsonl").read_text())
    assert samples.meta["kind"] == "meta" and samples.meta["interval_s"] == 0.1
    assert max(s["processes"] for s in samples.cpu) >= 2  # the grandchild in its own session
    busy = [s["cpu_pct"] for s in samples.cpu if s["cpu_pct"] is not None]
    assert max(busy) > 10  # two spinning processes (a sleeping tree stays near 0), even
    # on a 2-core machine shared with other benchmarks
    assert max(s["rss_mib"] for s in samples.cpu) > 1
    monos = [s["mono"] for s in samples.cpu]
    assert monos == sorted(monos)


def test_a_sample_reads_the_tree_and_not_every_process_of_the_host() -> None:
    """The kernel's children lists give the same tree as the ppid links of every process, from
    a few files (reading all of /proc twice a second cost the driver ~13 ms of CPU per second
    on a host running 170 processes)."""
    tree = (
        "import subprocess, sys, time\n"
        "subprocess.Popen(['sleep', '30'], start_new_session=True)\ntime.sleep(30)"
    )
    process = subprocess.Popen([sys.executable, "-c", tree], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while len(read_tree_table([process.pid])) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        table = read_tree_table([process.pid])
        every = read_process_table()
        assert set(table) == process_tree([process.pid], every) and len(table) == 2
        assert all(table[pid][0] == every[pid][0] for pid in table)  # the same ppid links
        assert len(every) > len(table)
    finally:
        for pid in read_tree_table([process.pid]):
            subprocess.run(["kill", str(pid)], check=False)
        process.wait(timeout=10)


def test_nvml_reports_no_gpu_cleanly_here() -> None:
    status = nvml_status()
    if gpu_names():
        assert status == "nvml"
    else:
        assert status.startswith("no GPU")
        try:
            import pynvml  # noqa: F401
        except ImportError:
            return
        assert "NVMLError" in status  # e.g. NVMLError_LibraryNotFound on a machine without GPU


class FakeNvml(SimpleNamespace):
    """pynvml's calls with recorded values: two GPUs, the second without power readings."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self) -> None:
        super().__init__(initialised=False, shut=False)

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        self.initialised = True

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:  # noqa: N802
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(gpu=90 + handle, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=(1000 + handle) * 1024 * 1024)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:  # noqa: N802
        if handle == 1:
            raise RuntimeError("not supported")
        return 650_000

    def nvmlDeviceGetClockInfo(self, handle: int, kind: int) -> int:  # noqa: N802
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, handle: int, kind: int) -> int:  # noqa: N802
        return 60 + handle


class FailingNvml(FakeNvml):
    def nvmlInit(self) -> None:  # noqa: N802
        class NVMLError_LibraryNotFound(Exception):  # noqa: N801, N818 - pynvml's name
            pass

        raise NVMLError_LibraryNotFound()


def test_gpu_samples_through_the_nvml_calls(tmp_path: Path) -> None:
    fake = FakeNvml()
    sampler = TelemetrySampler(tmp_path, {0: [999_999_999]}, 0.05, nvml_module=fake).start()
    time.sleep(0.2)
    facts = sampler.stop()
    assert facts["gpu"] == "nvml" and fake.shut
    samples = parse_samples((tmp_path / "telemetry-node0.jsonl").read_text())
    assert samples.meta["gpus"] == ["NVIDIA H100 80GB HBM3"] * 2
    first, second = samples.gpu[0], samples.gpu[1]
    assert (first["gpu"], first["power_w"], first["sm_pct"], first["mem_used_mib"]) == (
        0,
        650.0,
        90.0,
        1000.0,
    )
    assert second["power_w"] is None and second["temp_c"] == 61.0
    assert first["sm_clock_mhz"] == 1980.0 and first["mem_clock_mhz"] == 2619.0
    assert nvml_status(FailingNvml()) == "no GPU: NVMLError_LibraryNotFound"


def _line(**fields: object) -> str:
    return json.dumps(fields)


RECORDED = "\n".join(
    [
        _line(kind="meta", gpu="nvml", node=0, interval_s=0.5),
        _line(kind="cpu", mono=9.0, wall=109.0, cpu_pct=None, rss_mib=100.0, processes=1),
        _line(kind="cpu", mono=10.5, wall=110.5, cpu_pct=150.0, rss_mib=900.0, processes=3),
        _line(kind="gpu", mono=10.5, wall=110.5, gpu=0, power_w=300.0, sm_pct=80.0),
        _line(kind="gpu", mono=10.5, wall=110.5, gpu=1, power_w=500.0, sm_pct=100.0),
        _line(kind="cpu", mono=11.0, wall=111.0, cpu_pct=190.0, rss_mib=1000.0, processes=3),
        _line(kind="gpu", mono=11.0, wall=111.0, gpu=0, power_w=400.0, sm_pct=None),
        '{"kind": "cpu", "mono": 11.5, "wa',  # the sampler was killed mid-line
        _line(kind="cpu", mono=13.0, wall=113.0, cpu_pct=5.0, rss_mib=50.0, processes=1),
    ]
)


def test_summary_keeps_the_measured_window_and_pools_gpus() -> None:
    files = {"telemetry-node0.jsonl": RECORDED}
    summary = summarize_samples(files, {0: (10.0, 12.0)}, run_window=(100.0, 200.0))
    assert set(summary) == set(TELEMETRY_FIELDS)
    assert summary["telemetry_window"] == "steps" and summary["telemetry_status"] == "nvml"
    assert summary["telemetry_samples"] == 2  # mono 10.5 and 11.0; 9.0 and 13.0 are outside
    assert summary["telemetry_cpu_pct_median"] == 170.0
    assert summary["telemetry_cpu_pct_max"] == 190.0
    assert summary["telemetry_rss_mib_max"] == 1000.0
    assert summary["telemetry_gpu_power_w_median"] == 400.0  # of 300, 500, 400
    assert summary["telemetry_gpu_power_w_max"] == 500.0
    assert summary["telemetry_gpu_sm_pct_median"] == 90.0  # None is skipped
    assert summary["telemetry_gpu_temp_c_max"] is None
    assert parse_samples(RECORDED).broken_lines == 1


def test_summary_falls_back_to_the_run_on_the_wall_clock() -> None:
    files = {"telemetry-node0.jsonl": RECORDED}
    # Step clock that does not overlap the samples (an upstream log in wall-clock time).
    summary = summarize_samples(files, {0: (5000.0, 5001.0)}, run_window=(110.0, 111.0))
    assert summary["telemetry_window"] == "run"
    assert summary["telemetry_cpu_pct_max"] == 190.0 and summary["telemetry_samples"] == 2
    empty = summarize_samples({}, None, None)
    assert empty["telemetry_window"] == "none" and empty["telemetry_samples"] == 0


def test_local_runtime_writes_telemetry_beside_the_logs(tmp_path: Path) -> None:
    from tests.synth import cached_session

    session = cached_session()
    folders = sorted(session.rglob("repeat-01"))
    assert folders
    for folder in folders:
        record = json.loads((folder / "record.json").read_text())
        telemetry = record["extra"]["telemetry"]
        nodes = len(record["logs"])
        assert telemetry["files"] == [f"telemetry-node{i}.jsonl" for i in range(nodes)]
        assert telemetry["gpu"] == nvml_status() and not telemetry["errors"]
        for name in telemetry["files"]:
            samples = parse_samples((folder / name).read_text())
            assert samples.cpu and samples.meta["clock"] == "monotonic"


def test_sampler_command_wraps_a_remote_node_command(tmp_path: Path) -> None:
    """What a remote runtime runs on a node: the sampler around the node's command."""
    burn = "import time, sys\nend = time.time() + 0.5\nwhile time.time() < end: pass\nsys.exit(3)"
    done = subprocess.run(
        [sys.executable, "-m", "driver.telemetry.sampler", "--out", str(tmp_path), "--node", "1",
         "--interval", "0.05", "--no-gpu", "--", sys.executable, "-c", burn],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr  # the command's own exit code
    samples = parse_samples((tmp_path / "telemetry-node1.jsonl").read_text())
    assert samples.meta["node"] == 1 and samples.meta["gpu"] == "not sampled"
    assert len(samples.cpu) >= 3 and max(s["cpu_pct"] or 0 for s in samples.cpu) > 5
