"""README layout 4: a release names the slow node of a multi-node case, from its raw logs.

Two real sshd nodes (the process runtime) run the calibration workload at 2n4g, node1's steps
1.2 x longer (``tests/test_slow_node.py``'s sessions). The release's README (layout 4) carries
``dlperf report``'s note among the table's notes and is otherwise the README of the same
computation without a slow node, byte for byte; the note follows the logs, not the records'
stored facts; the audit passes and fails on an edited note; an even session names nobody. The
committed versions (layouts 1-3) still audit: tests/test_audit.py (with the kit that released
them), tests/test_release_results.py.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from driver.model.measure import STRAGGLER_FIELDS
from driver.release.archive import read_archive
from driver.release.audit import audit
from driver.release.compute import compute
from driver.release.dataset import load_dataset
from driver.release.layout import load_config
from driver.release.manifest import validate
from driver.release.readme import README_LAYOUT, readme_text
from driver.release.refusals import ReleaseError
from driver.release.release import release
from tests.test_slow_node import SLOWDOWN, run_session

CASE = "calibration/calibration/2n4g/bs8/fp32/synthetic"
NOTE = re.compile(
    rf"- {re.escape(CASE)}: slow node: node1 \(ranks 2-3\), windows (\d+\.\d)% longer than the "
    r"other nodes' in 2/2 repeats\."
)


def quiet(_line: str) -> None:
    pass


def publish(session: Path, reports: Path, version: str = "v0.5", **options: object) -> Path:
    return release(version, [session], reports_root=reports, compute_flops=False,
                   printer=quiet, **options)  # fmt: skip


def throughput_notes(readme: str) -> list[str]:
    """The note lines of the README's throughput section (where ``dlperf report`` puts them)."""
    section = readme.split("## Throughput\n")[1].split("## Beside published results")[0]
    notes = section.split("Notes:\n")[1]
    return [line for line in notes.splitlines() if line.startswith("- ")]


def rerendered(version: Path, slow_nodes: bool = True) -> str:
    """The version's README recomputed from its raw archives (as the audit does); without
    ``slow_nodes``, from the same computation with no case's slow node named."""
    manifest = json.loads((version / "manifest.json").read_text())
    members: dict[str, bytes] = {}
    for archive in sorted(manifest["archives"]):
        members.update(read_archive(version / archive))
    config = load_config(version, manifest["model_costs"], split_by_machine=True)
    computed = compute(load_dataset(members), config)
    if not slow_nodes:
        for summary in computed.summaries:
            summary.slow_node = None
    return readme_text(computed, manifest)


def rewrite_records(session: Path, edit) -> None:  # type: ignore[no-untyped-def]
    for path in sorted(session.glob("cases/**/repeat-*/record.json")):
        record = json.loads(path.read_text())
        edit(record["measurement"])
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def test_a_layout_4_readme_names_the_slow_node_from_the_logs(
    inventory_file, tmp_path: Path
) -> None:
    inventory = inventory_file(defaults={"python": sys.executable})
    slow = run_session(inventory, tmp_path / "results" / "slow", slow_node="node1",
                       slowdown=SLOWDOWN).root  # fmt: skip
    version = publish(slow, tmp_path / "reports")
    manifest = json.loads((version / "manifest.json").read_text())
    assert manifest["readme_layout"] == README_LAYOUT and validate(manifest) == []
    readme = (version / "README.md").read_text()
    notes = [line for line in throughput_notes(readme) if NOTE.fullmatch(line)]
    assert len(notes) == 1, throughput_notes(readme)
    (note,) = notes
    assert 15.0 < float(NOTE.fullmatch(note).group(1)) < 25.0, note  # 1.2 x node1's steps
    assert readme.count("slow node") == 1  # in the notes only
    # The note is all a slow node adds: the same recomputation with no slow node named is that
    # README without the note line, byte for byte.
    assert rerendered(version) == readme
    three = rerendered(version, slow_nodes=False)
    assert "slow node" not in three
    assert three == readme.replace(note + "\n", "")

    # The audit passes, and an edited note fails it, named by its line with the diff.
    assert audit(version).ok, audit(version).text()
    copy = shutil.copytree(version, tmp_path / "copy" / version.name)
    for path in copy.rglob("*"):
        if path.is_file():
            path.chmod(0o644)
    percent = NOTE.fullmatch(note).group(1)
    for edited in (
        note.replace("node1", "node0"),
        note.replace(f"{percent}%", f"{float(percent) + 1.0:.1f}%"),
        note.replace("2/2 repeats", "1/2 repeats"),
    ):
        (copy / "README.md").write_text(readme.replace(note, edited))
        report = audit(copy)
        assert not report.ok, edited
        (finding,) = [f for f in report.findings if f.file == "README.md"]
        assert finding.cell.startswith("line ") and finding.published == edited, finding
        assert finding.recomputed == note and f"+{note}" in finding.diff, finding
    (copy / "README.md").write_text(readme.replace(note + "\n", ""))  # a note left out
    assert not audit(copy).ok
    (copy / "README.md").write_text(readme)
    assert audit(copy).ok

    # The note comes from the raw logs, through the door: records that hold no straggler facts
    # (written before them) give the same README; records that misstate them are refused, and
    # with --accept-remeasured the logs win.
    older = shutil.copytree(slow, tmp_path / "results" / "older")
    rewrite_records(older, lambda m: [m.pop(name) for name in STRAGGLER_FIELDS])
    from_logs = publish(older, tmp_path / "reports-older")
    assert note in throughput_notes((from_logs / "README.md").read_text())
    lying = shutil.copytree(slow, tmp_path / "results" / "lying")
    rewrite_records(lying, lambda m: m.update(slowest_node=0, slowest_node_excess=0.0))
    with pytest.raises(ReleaseError, match="measure differently from their raw logs"):
        publish(lying, tmp_path / "reports-lying")
    remeasured = publish(lying, tmp_path / "reports-lying", accept_remeasured=True)
    assert note in throughput_notes((remeasured / "README.md").read_text())
    assert audit(remeasured).ok


def test_an_even_session_names_nobody(inventory_file, tmp_path: Path) -> None:
    inventory = inventory_file(defaults={"python": sys.executable})
    even = run_session(inventory, tmp_path / "results" / "even").root
    version = publish(even, tmp_path / "reports")
    assert json.loads((version / "manifest.json").read_text())["readme_layout"] == README_LAYOUT
    readme = (version / "README.md").read_text()
    assert "slow node" not in readme
    assert CASE in readme  # the multi-node case is there, with no note
    assert audit(version).ok
