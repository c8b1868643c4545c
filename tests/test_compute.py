"""Every number of a release from its raw data: repeats re-measured by the one statistics path,
typed extras, the scaling bound against the one 1n1g baseline."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.core.summary import CaseRow, baseline_of
from driver.release.archive import read_archive
from driver.release.compute import Config, compute
from driver.release.dataset import load_dataset
from driver.release.layout import load_config

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def members_of(version: Path) -> dict[str, bytes]:
    members: dict[str, bytes] = {}
    for archive in sorted((version / "raw").glob("*.tar.gz")):
        members.update(read_archive(archive))
    return members


def test_a_committed_version_recomputes_to_its_records() -> None:
    version = REPORTS / "v0.1-cpu"
    dataset = load_dataset(members_of(version))
    assert not dataset.problems
    computed = compute(dataset, load_config(version, {}))
    assert len(computed.repeats) == 86
    for repeat in computed.repeats:  # re-measured from the logs = what the run recorded
        assert repeat.measurement == repeat.written.measurement, repeat.folder
    for summary in computed.summaries:
        row = computed.rows[summary.key]
        assert isinstance(row, CaseRow) and row.session == computed.sessions_of[
            summary.case_id
        ]
        base = baseline_of(summary, computed.summaries)
        if base is not None and summary is not base:
            assert summary.speedup == pytest.approx(summary.stats.median / base.stats.median)


def test_extras_are_validated() -> None:
    # a case row's release columns (MFU, bound, reference), on a summary of the committed v0.1
    version = REPORTS / "v0.1-cpu"
    summary = compute(load_dataset(members_of(version)), load_config(version, {})).summaries[0]
    extras = summary.row(session="s")
    extras.mfu = 0.5
    with pytest.raises(ValueError):
        extras.mfu = float("nan")
    with pytest.raises(ValueError):
        summary.row(reference_devices="eight")
    assert summary.row(flops_per_sample=4089000000).model_dump()["flops_per_sample"] == 4089000000


def test_a_repeat_whose_logs_give_nothing_is_a_problem_of_its_folder() -> None:
    version = REPORTS / "v0.1-cpu"
    members = members_of(version)
    log = next(m for m in sorted(members) if m.endswith("/repeat-01/node0.log"))
    members[log] = members[log][: len(members[log]) // 3]
    dataset = load_dataset(members)
    folder = log.rsplit("/", 1)[0]
    ((where, problem),) = dataset.problems
    assert where == folder and "give no measurement" in problem and "node0.log" in problem
    computed = compute(dataset, Config())
    assert all(r.folder != folder for r in computed.repeats)
