"""``dlperf report`` prints what the logs give: every repeat re-measured from its raw logs."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from driver.core.summary import baseline_of, summarize
from driver.model.results import Session
from driver.verify.folder import verify_sessions
from tests.session_edits import drop_fingerprint, rewrite_session_headers
from tests.synth import cached_session


def session_copy(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    shutil.copytree(cached_session(), root)
    return root


def test_a_whole_session_is_verified_from_its_logs(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    verified = verify_sessions([root])
    assert verified.refused == []
    recorded = {(c.id, r.repeat): r for c, r, _ in Session(root).records()}
    assert len(verified.records) == len(recorded) == 9
    for case, record, _machine in verified.records:
        assert record.measurement == recorded[(case.id, record.repeat)].measurement


def test_a_schema_1_record_without_log_hashes_is_still_checked_against_its_logs(
    tmp_path: Path,
) -> None:
    root = session_copy(tmp_path)
    _case, _record, folder = next(Session(root).records())
    data = json.loads((folder / "record.json").read_text())
    data["schema"] = 1
    del data["log_sha256"]
    (folder / "record.json").write_text(json.dumps(data))
    assert verify_sessions([root]).refused == []
    log = folder / "node0.log"
    lines = log.read_text().split("\n")
    index = next(i for i, line in enumerate(lines) if '"step": 12,' in line)
    lines[index] = lines[index].replace('"samples": 8,', '"samples": 9,')
    log.write_text("\n".join(lines))
    (refused,) = verify_sessions([root]).refused
    assert refused.startswith(f"{folder}: the logs (node0.log) are not a plausible measurement")
    assert "step 12: 9 samples, but 1 step(s) of batch 8 per device make 8" in refused


def test_a_rewritten_record_with_rehashed_logs_is_still_recomputed(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    _case, _record, folder = next(Session(root).records())
    log = folder / "node0.log"
    log.write_text(log.read_text().replace('"samples": 8', '"samples": 16'))
    data = json.loads((folder / "record.json").read_text())
    data["log_sha256"]["node0.log"] = hashlib.sha256(log.read_bytes()).hexdigest()
    (folder / "record.json").write_text(json.dumps(data))
    (refused,) = verify_sessions([root]).refused
    assert refused.startswith(f"{folder}: ") and "16 samples" in refused


def test_a_failed_repeat_is_not_a_refusal(tmp_path: Path) -> None:
    root = session_copy(tmp_path)
    _case, _record, folder = next(Session(root).records())
    data = json.loads((folder / "record.json").read_text())
    data.update(verdict="failed", measurement=None)
    (folder / "record.json").write_text(json.dumps(data))
    verified = verify_sessions([root])
    assert verified.refused == [] and len(verified.records) == 8


def on_device(source: Path, target: Path, device: str) -> Path:
    """A copy of a session whose every rank's header says it ran on ``device`` and carries no
    fingerprint of this machine (logs rehashed, records' headers rewritten), as a run on
    another machine by an older kit would have written it."""
    shutil.copytree(source, target)

    def edit(header: dict) -> None:
        drop_fingerprint(header)
        header["devices"] = [device]

    return rewrite_session_headers(target, edit)


def test_two_hardware_types_are_two_labelled_row_groups_never_one_median(
    tmp_path: Path,
) -> None:
    from driver.frontend.cli import main
    from driver.model.measure import measure_logs

    slow = on_device(cached_session(), tmp_path / "v100", "Tesla V100-SXM2-16GB")
    fast = on_device(cached_session(), tmp_path / "h100", "NVIDIA H100 80GB HBM3")
    # the H100 session runs twice as fast: every timestamp of its logs halved
    for case, record, folder in Session(fast).records():
        data = json.loads((folder / "record.json").read_text())
        texts = {}
        for name in data["logs"]:
            log = folder / name
            lines = []
            for line in log.read_text().split("\n"):
                if '"t": ' in line:
                    event = json.loads(line)
                    line = json.dumps({**event, "t": event["t"] / 2}, sort_keys=True)
                lines.append(line)
            texts[name] = "\n".join(lines)
            log.write_text(texts[name])
            data["log_sha256"][name] = hashlib.sha256(log.read_bytes()).hexdigest()
        measurement, _parsed = measure_logs(case, record.parser, texts, record.batch_size)
        data["measurement"] = measurement.model_dump()
        (folder / "record.json").write_text(json.dumps(data))
    verified = verify_sessions([slow, fast])
    assert verified.refused == []
    summaries = summarize(verified.records)
    ids = {s.case_id for s in summaries}
    # the same case ids on two device models: two summaries each, repeats never pooled
    assert len(summaries) == 2 * len(ids) and all(s.stats.repeats == 3 for s in summaries)
    for s in summaries:
        base = baseline_of(s, summaries)
        assert base is not None and base.identity == s.identity
    out = tmp_path / "report"
    assert main(["report", str(slow), str(fast), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    table = text.split("## Detail")[1]
    assert "| machine " in table
    rows = [line for line in table.splitlines() if line.startswith("| ") and "|--" not in line]
    devices = [line.split("|")[1].strip() for line in rows[1:]]
    assert devices == sorted(devices)  # one group per device, labelled on every row
    # their logs carry no fingerprint: the machine is what their headers hold
    assert set(devices) == {"NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB"}
    for line in rows[1:]:
        cells = [c.strip() for c in line.split("|")]
        if cells[2].startswith(("median", "geometric")):
            continue
        topology = f"{cells[3]}n{cells[4]}g"
        (s,) = [
            x for x in summaries if x.identity == cells[1] and x.case.topology.label == topology
        ]
        assert cells[5] == f"{s.stats.median:.2f}" + (" ~" if s.stats.unstable else "")
    h100 = [s for s in summaries if s.device_model.startswith("NVIDIA H100")]
    v100 = {s.case_id: s for s in summaries if s.device_model.startswith("Tesla")}
    for s in h100:  # every median is its own device's: no 79.75 from 29.5 and 130
        assert s.stats.median == pytest.approx(2 * v100[s.case_id].stats.median, rel=1e-6)
    summary = text.split("## Summary")[1].split("## Detail")[0]
    assert summary.count("| NVIDIA H100 80GB HBM3 ") == 1
    assert summary.count("| Tesla V100-SXM2-16GB ") == 1


def test_the_tables_name_a_slow_node_and_release_readmes_do_not() -> None:
    from driver.core.report import markdown_tables, to_json
    from driver.model.case import Topology
    from tests.test_summary import case, two_node_record

    slow = case(Topology(2, 2))
    summaries = summarize([(slow, two_node_record(slow, r, 1, 0.123)) for r in (1, 2, 3)])
    note = (
        f"- {slow.id}: slow node: gpu-b (ranks 2-3), windows 12.3% longer than the other "
        "nodes' in 3/3 repeats."
    )
    assert note in markdown_tables(summaries).splitlines()  # report and run's closing table
    assert "slow node" not in markdown_tables(summaries, name_slow_nodes=False)  # releases
    [row] = json.loads(to_json(summaries))
    assert (row["slow_node"], row["slow_node_ranks"], row["slow_node_excess"]) == (
        "gpu-b", "2-3", 0.123
    )


def test_a_session_table_shows_mfu_by_the_formula_or_the_count_at_the_default_shape() -> None:
    """Llama's FLOPs are a formula of its sizes (8.713e4 GFLOP per 8192-token sample of Llama
    3.2 1B), so a session's table shows its MFU against the device's bf16 peak with no release
    and no torch; a model counted from its definition (ResNet-50) shows it at its default shape
    (the count its workload holds), and none at another shape until a release counts it."""
    from driver.core.report import markdown_tables, session_mfu
    from driver.core.summary import CaseSummary
    from driver.model.case import Case, Topology
    from driver.model.measure import case_stats

    def summary(case: Case, rate: float, device: str) -> CaseSummary:
        return CaseSummary(
            case=case, stats=case_stats([rate, rate]), batch_size=int(case.batch_size),
            speedup=None, efficiency=None, throughputs=[rate, rate],
            devices=[device] * case.topology.world_size, amp_dtype="bfloat16",
        )  # fmt: skip

    options = {"llama_size": "llama3-1b", "seq_len": 8192}
    llama = Case("llama", "pytorch", Topology(1, 1), 2, "amp", "synthetic", options=options)
    # 5 sequences a second of 8.713e13 FLOPs on one H100 SXM (989.4 TFLOP/s bf16): 44.0%
    on_h100 = summary(llama, 5.0, "NVIDIA H100 80GB HBM3")
    assert session_mfu(on_h100) == pytest.approx(5.0 * 8.7127e13 / 989.4e12, rel=1e-3)
    text = markdown_tables([on_h100], plain=True)
    header, _dashes, row = text.splitlines()[2:5]
    assert "MFU" in header and "44.0%" in row
    assert session_mfu(summary(llama, 5.0, "AMD EPYC 9B14")) is None  # no peak for a CPU
    # FP32 with TF32 math on (the case's tf32): the TF32 peak (494.7), not IEEE fp32's (66.9)
    tf32 = Case("llama", "pytorch", Topology(1, 1), 2, "fp32", "synthetic",
                options={**options, "tf32": True})  # fmt: skip
    on_tf32 = summary(tf32, 1.0, "NVIDIA H100 80GB HBM3")
    assert session_mfu(on_tf32) == pytest.approx(8.7127e13 / 494.7e12, rel=1e-3)
    # ResNet-50 at 224 x 224: 24.30 GFLOP a training sample; 3,000 images/s on the same H100
    resnet = Case("resnet50", "pytorch", Topology(1, 1), 256, "amp", "synthetic")
    on_h100 = summary(resnet, 3000.0, "NVIDIA H100 80GB HBM3")
    assert session_mfu(on_h100) == pytest.approx(3000.0 * 24.299e9 / 989.4e12, rel=1e-3)
    header, _dashes, row = markdown_tables([on_h100], plain=True).splitlines()[2:5]
    assert "MFU" in header and "7.4%" in row
    small = Case("resnet50", "pytorch", Topology(1, 1), 256, "amp", "synthetic",
                 options={"image_size": 128})  # fmt: skip
    plain = markdown_tables([summary(small, 3000.0, "NVIDIA H100 80GB HBM3")], plain=True)
    assert "MFU" not in plain.splitlines()[2]  # another shape: counted by a release only
