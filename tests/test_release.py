"""``dlperf release``: a real calibration session -> an immutable, complete report version."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from driver.files import sha256_bytes, sha256_file
from driver.frontend.cli import main
from driver.release.audit import audit
from driver.release.manifest import FIELDS, validate
from driver.release.readme import README_LAYOUT
from driver.release.refusals import ReleaseError
from driver.release.release import release
from driver.release.versions import index_digest, released_versions
from tests.session_edits import rewrite_headers
from tests.synth import cached_session

PNG = b"\x89PNG\r\n\x1a\n"


def quiet(_line: str) -> None:
    pass


@pytest.fixture(scope="module")
def session() -> Path:
    return cached_session()


@pytest.fixture(scope="module")
def released(session: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    reports = tmp_path_factory.mktemp("reports")
    return release("v0.1-cpu", [session], reports_root=reports, printer=quiet)


def test_a_version_holds_every_artifact(released: Path, session: Path) -> None:
    names = {p.relative_to(released).as_posix() for p in released.rglob("*") if p.is_file()}
    for required in ("README.md", "results.json", "results.csv", "manifest.json"):
        assert required in names
    assert f"raw/{session.name}.tar.gz" in names
    assert {"config/reports/references.yaml", "config/reports/peaks.yaml"} <= names
    plots = sorted(n for n in names if n.startswith("plots/"))
    assert len(plots) == 2 and all((released / p).read_bytes().startswith(PNG) for p in plots)
    readme = (released / "README.md").read_text()
    for plot in plots:
        assert f"]({plot})" in readme  # linked from the README
    # written once: every file is read-only
    assert all(not (p.stat().st_mode & 0o222) for p in released.rglob("*") if p.is_file())


def test_manifest_records_provenance_and_every_checksum(released: Path, session: Path) -> None:
    manifest = json.loads((released / "manifest.json").read_text())
    assert validate(manifest) == [] and set(manifest) == set(FIELDS)
    assert manifest["schema"] == 1 and manifest["version"] == "v0.1-cpu"
    kit = manifest["kit"]
    assert kit["commit"] is None or len(kit["commit"]) == 40
    assert kit["dirty"] in (True, False, None)
    # every raw file of the session that the release keeps, hashed under its own name
    for member, entry in manifest["raw_files"].items():
        name, _, rel = member.partition("/")
        assert name == session.name
        assert entry["sha256"] == sha256_file(session / rel)
    kept = {m.partition("/")[2] for m in manifest["raw_files"]}
    logs = {p.relative_to(session).as_posix() for p in session.rglob("node*.log")}
    assert logs <= kept and "session.json" in kept
    assert any(k.endswith("telemetry-node0.jsonl") for k in kept)
    with tarfile.open(released / f"raw/{session.name}.tar.gz") as tar:
        assert sorted(tar.getnames()) == sorted(manifest["raw_files"])
    for path, entry in manifest["config_files"].items():
        assert entry["sha256"] == sha256_file(released / path)
    (node,) = manifest["nodes"].values()
    assert node["frameworks"] == ["calibration"] and node["versions"]["calibration"] == "1"
    assert manifest["counts"] == {"sessions": 1, "cases": 3, "repeats": 9, "raw_files": len(kept)}
    assert manifest["sessions"][0]["name"] == session.name
    # the README layout: every layout of the versions released so far, and none beyond
    assert manifest["readme_layout"] == README_LAYOUT
    # results.json's own schema, named in the manifest too
    assert (
        manifest["results_schema"]
        == json.loads((released / "results.json").read_text())["schema"]
        == 2
    )
    for layout in range(1, README_LAYOUT):
        assert validate({**manifest, "readme_layout": layout}) == []
    assert validate({**manifest, "readme_layout": 8}) == [
        "field 'readme_layout': 8 is not allowed; allowed values: 1, 2, 3, 4, 5, 6, 7"
    ]


def test_results_hold_one_row_per_case_and_per_repeat(released: Path, session: Path) -> None:
    data = json.loads((released / "results.json").read_text())
    assert len(data["cases"]) == 3 and len(data["repeats"]) == 9
    records = {
        (r["case_id"], r["repeat"]): r
        for r in (json.loads(p.read_text()) for p in session.rglob("record.json"))
    }
    for row in data["repeats"]:
        assert (
            row["throughput"]
            == records[(row["case_id"], row["repeat"])]["measurement"]["throughput"]
        )
        assert row["telemetry_window"] == "steps" and row["telemetry_cpu_pct_max"] is not None
    for row in data["cases"]:
        repeats = [r["throughput"] for r in data["repeats"] if r["case_id"] == row["case_id"]]
        assert sorted(row["repeat_throughputs"]) == sorted(repeats)
        assert row["throughput_median"] == sorted(repeats)[1]
    rows = list(csv.DictReader(io.StringIO((released / "results.csv").read_text())))
    assert [r["row"] for r in rows] == ["case"] * 3 + ["repeat"] * 9
    assert {"case_id", "throughput_median", "throughput", "telemetry_rss_mib_max"} <= set(rows[0])
    readme = (released / "README.md").read_text()
    # README layout 2: one row per series and topology (layout 1 had a column group each)
    assert "| series      | node num   | device num   | samples/s   |" in readme
    assert "Profile `selftest`" in readme  # the smoke-profile footnote


def test_released_versions_are_never_rewritten(released: Path, session: Path) -> None:
    reports = released.parent
    before = (released / "manifest.json").read_bytes()
    with pytest.raises(ReleaseError, match="never rewritten"):
        release("v0.1-cpu", [session], reports_root=reports, printer=quiet)
    with pytest.raises(ReleaseError, match="--changelog is required"):
        release("v0.2-cpu", [session], reports_root=reports, printer=quiet)
    with pytest.raises(ReleaseError, match="not of the form"):
        release("latest", [session], reports_root=reports, printer=quiet)
    assert (released / "manifest.json").read_bytes() == before
    assert not [p for p in reports.iterdir() if p.name.startswith(".")]  # no half version


def test_a_correction_is_a_new_version_in_the_changelog(session: Path, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    first = release("v0.1", [session], reports_root=reports, printer=quiet)
    other = tmp_path / "corrected"
    shutil.copytree(session, other)
    extra_case = next(other.rglob("1n2g/bs8/fp32/synthetic"))
    shutil.rmtree(extra_case)  # the correction drops a case
    second = release(
        "v0.2",
        [other],
        reports_root=reports,
        changelog="v0.1 counted a 1n2g case run during a host update | reran",
        printer=quiet,
    )
    manifest = json.loads((second / "manifest.json").read_text())
    assert manifest["previous"] == "v0.1"
    assert manifest["changes"]["removed"] == ["calibration/calibration/1n2g/bs8/fp32/synthetic"]
    readme = (second / "README.md").read_text()
    assert "- removed `calibration/calibration/1n2g/bs8/fp32/synthetic`" in readme
    index = (reports / "README.md").read_text()
    assert index.index("[v0.2]") < index.index("[v0.1]")  # newest first
    assert "host update \\| reran" in index
    assert [name for name, _ in released_versions(reports)] == ["v0.2", "v0.1"]
    assert index_digest(reports, "v0.1") == sha256_bytes((first / "manifest.json").read_bytes())
    assert audit(first).ok and audit(second).ok


@pytest.mark.parametrize(
    ("option", "text", "found"),
    [
        ("changelog", "reran\nafter a host update", "U+000A"),
        ("changelog", "reran \u202eetadpu", "U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("title", "<script>alert(1)</script>", "HTML tag"),
        ("title", "x" * 201, "201 characters long"),
    ],
)
def test_a_title_or_changelog_that_could_rewrite_the_readme_is_refused(
    session: Path, tmp_path: Path, option: str, text: str, found: str
) -> None:
    # The command line checks these too; release() itself refuses them for every caller.
    reports = tmp_path / "reports"
    with pytest.raises(ReleaseError, match=f"--{option} .*{re.escape(found)}"):
        release("v0.1", [session], reports_root=reports, printer=quiet, **{option: text})
    assert not reports.exists() or not list(reports.iterdir())


def test_failed_attempts_are_listed_not_archived(session: Path, tmp_path: Path) -> None:
    copy = tmp_path / "s"
    shutil.copytree(session, copy)
    case_dir = next(copy.rglob("1n1g/bs8/fp32/synthetic"))
    failed = case_dir / "repeat-02.failed-1"
    shutil.copytree(case_dir / "repeat-02", failed)
    record = json.loads((failed / "record.json").read_text())
    record.update(verdict="timeout", detail="ran past the timeout of 3 s", measurement=None)
    (failed / "record.json").write_text(json.dumps(record))
    version = release("v1.0", [copy], reports_root=tmp_path / "reports", printer=quiet)
    manifest = json.loads((version / "manifest.json").read_text())
    (excluded,) = manifest["excluded_repeats"]
    assert excluded["verdict"] == "timeout" and excluded["folder"].endswith("repeat-02.failed-1")
    assert not [m for m in manifest["raw_files"] if ".failed-" in m]
    assert (
        "repeat-02.failed-1`: timeout ran past the timeout" in (version / "README.md").read_text()
    )


def test_edited_records_and_shared_cases_are_refused(session: Path, tmp_path: Path) -> None:
    copy = tmp_path / "edited"
    shutil.copytree(session, copy)
    record_path = next(copy.rglob("repeat-01/record.json"))
    record = json.loads(record_path.read_text())
    record["measurement"]["throughput"] *= 1.10  # a hand-edited number
    record_path.write_text(json.dumps(record))
    with pytest.raises(ReleaseError, match="measure differently"):
        release("v1.0", [copy], reports_root=tmp_path / "r1", printer=quiet)
    version = release(
        "v1.0", [copy], reports_root=tmp_path / "r2", accept_remeasured=True, printer=quiet
    )
    manifest = json.loads((version / "manifest.json").read_text())
    assert len(manifest["remeasured"]) == 1 and audit(version).ok
    twin = tmp_path / "twin"
    shutil.copytree(session, twin)
    with pytest.raises(ReleaseError, match="release one session per case"):
        release("v1.0", [session, twin], reports_root=tmp_path / "r3", printer=quiet)


def test_release_command_line(session: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    reports = tmp_path / "reports"
    assert main(["release", "v0.1-cpu", str(session), "--reports", str(reports)]) == 0
    assert "v0.1-cpu/README.md" in capsys.readouterr().out
    assert main(["release", "v0.1-cpu", str(session), "--reports", str(reports)]) == 2
    assert "never rewritten" in capsys.readouterr().err
    code = main(["audit", "v0.1-cpu", "--reports", str(reports)])
    out = capsys.readouterr().out
    assert code == 0 and "verdict: PASS" in out
    assert '[ok]   table "Calibration workload, FP32, bsz=8 per device, synthetic data"' in out


def test_no_file_of_a_version_is_git_ignored() -> None:
    """.gitignore has `.dlperf/` and `results/`: a copied config under such a name would be
    left out of the commit and the committed version would fail its audit."""
    from driver.frameworks.base import REPO_ROOT
    from driver.release.manifest import config_destination
    from driver.release.release import git_ignored

    target = REPO_ROOT / "reports" / "v0.0-probe"
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert git_ignored(target, [Path("config/.dlperf/images-built.json")]) == [
        "config/.dlperf/images-built.json"
    ]
    built = config_destination(REPO_ROOT, REPO_ROOT / ".dlperf" / "images-built.json")
    assert built == "config/images-built.json"
    assert git_ignored(target, [Path(built), Path("raw/s.tar.gz"), Path("plots/a.png")]) == []


def test_the_kit_is_dirty_for_code_changes_not_for_its_reports(tmp_path: Path) -> None:
    """A version being written under reports/ is untracked; it must not mark the releasing kit
    dirty, while any other uncommitted file (code, a matrix) must."""
    import subprocess

    from driver.model.results import kit_revision

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "driver.py").write_text("x = 1\n")
    git("add", "driver.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "kit")
    assert kit_revision(tmp_path)["dirty"] is False
    (tmp_path / "reports" / ".v0.1-cpu.tmp-1").mkdir(parents=True)
    (tmp_path / "reports" / ".v0.1-cpu.tmp-1" / "README.md").write_text("a version\n")
    assert kit_revision(tmp_path)["dirty"] is False
    (tmp_path / "driver.py").write_text("x = 2\n")
    assert kit_revision(tmp_path)["dirty"] is True
    git("checkout", "driver.py")
    (tmp_path / "new_module.py").write_text("y = 1\n")
    assert kit_revision(tmp_path)["dirty"] is True


def committed_sessions(version: Path, target: Path) -> list[Path]:
    """The sessions a committed version was released from, unpacked from its raw archives."""
    from driver.release.archive import read_archive

    sessions = []
    for archive in sorted((version / "raw").glob("*.tar.gz")):
        for name, data in read_archive(archive).items():
            path = target / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        sessions.append(target / archive.name.removesuffix(".tar.gz"))
    return sessions


def table_blocks(text: str) -> list[list[str]]:
    blocks: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.startswith("|"):
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    return [b for b in blocks if b]


def test_a_version_from_the_committed_sessions_reads_at_a_glance(tmp_path: Path) -> None:
    committed = Path(__file__).resolve().parents[1] / "reports" / "v0.2-cpu"
    sessions = committed_sessions(committed, tmp_path / "results")
    target = release(
        "v0.3-cpu", sessions, reports_root=tmp_path / "reports", compute_flops=False,
        printer=quiet,
    )  # fmt: skip
    readme = (target / "README.md").read_text()
    manifest = json.loads((target / "manifest.json").read_text())
    assert manifest["readme_layout"] == README_LAYOUT
    throughput = readme.split("## Summary")[1].split("## Beside published results")[0]
    tables = table_blocks(throughput)
    # which machine each session ran on, a summary per model, a table per model/precision/batch
    assert len(tables) == 1 + 3 + 6
    for table in tables:
        assert max(len(line) for line in table) <= 120, "\n".join(table)
    # the wide layout had 34 columns for ResNet-50 FP32; now one row per series and topology
    rn50 = throughput.split("### ResNet-50 v1.5, FP32, bsz=8 per device")[1]
    assert "| median (5 series)" in rn50 and "| geometric mean (4 series)" in rn50
    # CPU rows are set beside no GPU reference; telemetry is one row per case
    beside = readme.split("## Beside published results")[1].split("## Telemetry")[0]
    assert "No published result on the same device model and precision" in beside
    assert "|" not in beside
    telemetry = table_blocks(readme.split("## Telemetry")[1].split("## Provenance")[0])
    assert len(telemetry) == 1 and len(telemetry[0]) == 2 + manifest["counts"]["cases"]
    assert audit(target, recompute_flops=False).ok


def test_a_case_on_two_device_models_is_refused(session: Path, tmp_path: Path) -> None:
    # one session resumed on another machine: one repeat of a case ran on other devices, its
    # ranks' headers naming them and their node's facts alike
    other = tmp_path / "resumed"
    shutil.copytree(session, other)
    folder = sorted(other.glob("cases/**/repeat-02"))[0]

    def on_x1(header: dict) -> None:
        header["devices"] = ["X1"]
        header["fingerprint"]["cpu_model"] = "X1"

    rewrite_headers(folder, on_x1)
    with pytest.raises(ReleaseError, match=r"on several.*\n  calibration/.*: .* \(none\), X1 \d+c"):
        release("v0.1", [other], reports_root=tmp_path / "reports", printer=quiet)


def test_published_figures_are_released_beside_and_audited_by_checksum(
    session: Path, tmp_path: Path
) -> None:
    dlperf = Path(__file__).parent / "fixtures" / "published" / "dlperf-v1.0-resnet50.yaml"
    assert main(
        ["release", "v0.1", str(session), "--import", str(dlperf), "--no-flops",
         "--reports", str(tmp_path / "reports")]
    ) == 0  # fmt: skip
    target = tmp_path / "reports" / "v0.1"
    manifest = json.loads((target / "manifest.json").read_text())
    entry = manifest["config_files"]["config/published/dlperf-v1.0-resnet50.yaml"]
    assert entry["sha256"] == sha256_file(dlperf) and entry["source"] == str(dlperf)
    readme = (target / "README.md").read_text()
    assert "16 cases (13 of them published figures, `config/published/`), 9 repeats" in readme
    rows = [line for line in readme.splitlines() if line.startswith("| ") and "4n32g" in line]
    assert len(rows) == 8 and all("published by DLPerf v1.0" in line for line in rows)
    data = json.loads((target / "results.json").read_text())
    published = [c for c in data["cases"] if c.get("published_by")]
    assert len(published) == 13 and all(c["repeats"] == 1 for c in published)
    assert all("published_by" not in c for c in data["cases"] if c["model"] == "calibration")
    assert audit(target).ok
    # factor reads the released figures back: DLPerf's two PyTorch sources at FP32
    from driver.analysis.compare import load_side
    from driver.analysis.factor import factor_report

    side = load_side(str(target), tmp_path, tmp_path)
    factor, _text = factor_report(
        [side], "source", "pytorch-examples", "deeplearningexamples", where=["precision=fp32"]
    )
    assert [p["ratio"] for p in factor["pairs"]] == [10917.09 / 10021.29]
    # an edited published figure fails the audit by the file's checksum
    copy = tmp_path / "copy" / "v0.1"
    shutil.copytree(target, copy)
    edited = copy / "config" / "published" / "dlperf-v1.0-resnet50.yaml"
    edited.chmod(0o644)
    edited.write_text(edited.read_text().replace("12411.97", "13411.97"))
    findings = audit(copy).findings
    assert ("config/published/dlperf-v1.0-resnet50.yaml", "sha256") in {
        (f.file, f.cell) for f in findings
    }
    assert any(f.file == "README.md" for f in findings)  # and the numbers it changes
