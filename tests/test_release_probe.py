"""The all-reduce probe and the scaling bound it puts beside multi-device efficiencies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver.diagnose.probes import probe_topologies, run_allreduce_probe
from driver.model.case import Topology
from driver.release.audit import audit
from driver.release.release import release
from driver.release.scaling import ProbeError, bus_factor, parse_probe_log, scaling_bound
from driver.runtimes.local import LocalRuntime
from tests.synth import real_session

RECORDED = "\n".join(
    [
        "[W socket.cpp] some launcher noise",
        '{"backend": "gloo", "device": "cpu", "dlperf_probe": "header", "hostname": "vm", '
        '"local_world_size": 2, "nodes": 1, "torch": "2.13.0", "v": 1, "world_size": 2}',
        '{"bytes": 1000000, "dlperf_probe": "allreduce", "times": [0.002, 0.001, 0.003], "v": 1}',
        '{"bytes": 8000000, "dlperf_probe": "allreduce", "times": [0.01, 0.008, 0.009], "v": 1}',
        '{"dlperf_probe": "end", "v": 1}',
    ]
)


def test_probe_log_gives_nccl_tests_bandwidths() -> None:
    result = parse_probe_log(RECORDED)
    small, large = result["sizes"]
    assert small["median_s"] == 0.002 and small["algbw_gbps"] == pytest.approx(0.5)
    assert large["algbw_gbps"] == pytest.approx(8e6 / 0.009 / 1e9)
    # busbw = algbw x 2(n-1)/n; for n = 2 the factor is 1
    assert large["busbw_gbps"] == large["algbw_gbps"] * bus_factor(2)
    assert result["busbw_gbps"] == large["busbw_gbps"] and result["busbw_at_bytes"] == 8_000_000
    assert bus_factor(32) == pytest.approx(1.9375)
    with pytest.raises(ProbeError):
        parse_probe_log(RECORDED.rsplit("\n", 1)[0])  # no end line: cut short


def test_scaling_bound_reproduces_the_published_ceilings() -> None:
    """published-results.md: 12 GB/s busbw, 32 GPUs; ResNet-50 FP32 (102 MB, 367 img/s at
    bsz 128) ~95%; BERT-base 440 MB: FP32 (119.6/s at 32) ~79%, AMP (444.5/s at 64) ~67%."""
    assert scaling_bound(128 / 367, 102e6, 32, 12.0) == pytest.approx(0.95, abs=0.01)
    assert scaling_bound(32 / 119.6, 440e6, 32, 12.0) == pytest.approx(0.79, abs=0.01)
    assert scaling_bound(64 / 444.5, 440e6, 32, 12.0) == pytest.approx(0.67, abs=0.01)
    assert scaling_bound(1.0, 1e6, 1, 12.0) is None


def test_probe_in_a_session_bounds_its_multi_device_efficiency(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    gradient_bytes = 40_000_000
    session = real_session(
        tmp_path / "results" / "bound",
        topologies=("1n1g", "1n2g"),
        repeats=2,
        options={"gradient_bytes": gradient_bytes},
    )
    probe = run_allreduce_probe(session, LocalRuntime(), "1n2g", sizes_mb="1,4", iters=4)
    assert probe["backend"] == "gloo" and probe["world_size"] == 2 and probe["busbw_gbps"] > 0
    stored = json.loads((session / "probes" / "allreduce-1n2g.json").read_text())
    assert stored["busbw_gbps"] == probe["busbw_gbps"]
    # `dlperf run --probe` on a resumed session reuses the stored probe, runs no other
    again = probe_topologies(session, LocalRuntime(), [Topology.parse("1n2g")] * 2)
    assert again == [stored] and not list((session / "probes").glob("*.old-*"))
    version = release("v0.1", [session], reports_root=tmp_path / "reports", printer=lambda _: None)
    assert audit(version).ok
    manifest = json.loads((version / "manifest.json").read_text())
    (recorded,) = manifest["probes"]
    assert recorded["busbw_gbps"] == probe["busbw_gbps"]  # re-parsed from the archived log
    rows = {r["topology"]: r for r in _cases(version)}
    step = 8 / rows["1n1g"]["throughput_median"]
    expected = scaling_bound(step, gradient_bytes, 2, probe["busbw_gbps"])
    assert rows["1n2g"]["scaling_bound"] == expected and rows["1n1g"]["scaling_bound"] is None
    readme = (version / "README.md").read_text()
    assert "| bound" in readme and f"| {expected:.1%}" in readme


def _cases(version: Path) -> list[dict]:
    data = json.loads((version / "results.json").read_text())
    return [{**r, "topology": f"{r['nodes']}n{r['devices']}g"} for r in data["cases"]]
