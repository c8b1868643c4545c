"""``dlperf release vX.Y SESSION...``: result sessions -> an immutable ``reports/vX.Y/``.

    reports/vX.Y/README.md          the DLPerf-style tables, references, telemetry, provenance
    reports/vX.Y/results.json|csv   one row per case and one per repeat, every field named
    reports/vX.Y/manifest.json      schema, kit commit, images, config hashes, nodes, SHA-256s
    reports/vX.Y/raw/<session>.tar.gz   the raw logs (and records, telemetry, probes)
    reports/vX.Y/config/...         copies of the config files the numbers depend on
    reports/vX.Y/plots/*.png        throughput and efficiency vs devices, per table
    reports/README.md               the generated changelog of all versions, newest first

The version is built in a hidden folder, audited there, and only then renamed into place, so
a version folder is always complete and always passes the audit at release. Releasing onto an
existing version is refused; a correction is a new version with ``--changelog``. The versions
already released and the index are ``versions.py``'s; the signing key and the reasons for
superlinear cases are checked by ``vouching.py``; what a release refuses in the request and in
the sessions it is given is ``refusals.py``'s.
"""

from __future__ import annotations

import os
import platform
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.core.released import Results, ResultsError
from driver.files import (
    TEMP_PREFIX,
    KitWriteError,
    ensure_dir,
    remove_tree,
    sha256_file,
    write_text,
)
from driver.frameworks.base import REPO_ROOT
from driver.model.results import kit_revision
from driver.release.archive import RAW_DIR, collect_session, read_archive, write_archive
from driver.release.compute import Computed, Marks, compute
from driver.release.dataset import Dataset
from driver.release.layout import PUBLISHED_DIR, load_config
from driver.release.manifest import (
    KIND,
    MANIFEST,
    MANIFEST_SCHEMA,
    config_destination,
    config_sources,
    derived_parts,
    manifest_text,
)
from driver.release.mfu import compute_model_costs
from driver.release.readme import README_LAYOUT, readme_text
from driver.release.refusals import (
    ReleaseError,
    cases_on_several_devices,
    check_config_files,
    checked_dataset,
    checked_signatures,
    refuse_a_bad_request,
    refuse_sessions_a_release_cannot_hold,
    refused_as_release_error,
    remeasured_repeats,
)
from driver.release.results import RESULTS_SCHEMA, csv_text, json_text, results_data
from driver.release.signatures import Signatures
from driver.release.versions import write_index
from driver.release.vouching import (
    Vouching,
    VouchingError,
    check_mfu,
    check_superlinear,
    vouching_for,
)
from driver.signing import RELEASE_NAMESPACE, sign

if TYPE_CHECKING:
    from driver.release.findings import AuditReport

DEFAULT_REPORTS = REPO_ROOT / "reports"
DEFAULT_RESULTS = REPO_ROOT / "results"
Printer = Callable[[str], None]


# A version is built in ``<reports>/.dlperf-tmp-release-<pid>-<version>``: hidden, and named so
# that a release killed half-way (SIGKILL, power loss) is recognised and removed by the next.
WORK_PREFIX = f"{TEMP_PREFIX}release-"


def remove_stale_work(reports_root: Path) -> list[Path]:
    """Work folders of releases whose process is gone (killed mid-way), removed."""
    removed = []
    for entry in reports_root.glob(f"{WORK_PREFIX}*"):
        pid_text = entry.name[len(WORK_PREFIX) :].split("-", 1)[0]
        if pid_text.isdigit() and _alive(int(pid_text)):
            continue  # a release running now
        remove_tree(entry)
        removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def resolve_session(text: str, results_root: Path = DEFAULT_RESULTS) -> Path:
    """A session folder given as a path or as a name under ``results/``."""
    path = Path(text)
    for candidate in (path, results_root / text):
        if (candidate / "session.json").exists():
            return candidate
    raise ReleaseError(f"{text}: not a session folder (no session.json here or in {results_root})")


def resolve_version(text: str, reports_root: Path = DEFAULT_REPORTS) -> Path:
    path = Path(text)
    for candidate in (path, reports_root / text):
        if (candidate / MANIFEST).exists():
            return candidate
    raise ReleaseError(f"{text}: not a released version (no {MANIFEST} here or in {reports_root})")


def _tool_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("dlperf", "tabulate", "matplotlib", "PyYAML"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def _changes(
    previous: tuple[str, dict[str, Any]] | None, reports_root: Path, data: Results
) -> dict:
    if previous is None:
        return {}
    try:
        old = Results.load(reports_root / previous[0] / "results.json")
    except ResultsError:
        return {"note": f"{previous[0]}/results.json unreadable"}
    before = {row.case_id: row.throughput_median for row in old.cases}
    now = {row.case_id: row.throughput_median for row in data.cases}
    return {
        "added": sorted(set(now) - set(before)),
        "removed": sorted(set(before) - set(now)),
        "changed": [
            {
                "case_id": case_id,
                "previous_median": before[case_id],
                "median": now[case_id],
                "ratio": now[case_id] / before[case_id] if before[case_id] else None,
            }
            for case_id in sorted(set(now) & set(before))
            if now[case_id] != before[case_id]
        ],
    }


def release(
    version: str,
    sessions: list[Path],
    *,
    reports_root: Path = DEFAULT_REPORTS,
    changelog: str | None = None,
    title: str | None = None,
    accept_remeasured: bool = False,
    compute_flops: bool = True,
    repo_root: Path = REPO_ROOT,
    printer: Printer = print,
    imports: Sequence[Path] = (),
    signing_key: Path | None = None,
    allowed_signers: Path | None = None,
    superlinear: Mapping[str, str] | None = None,
    require_signed: bool = False,
) -> Path:
    """Build, audit and publish ``reports_root/version``; returns its folder. ``imports``:
    files of published figures (``dlperf import``) shown beside the measured cases; each is
    copied into ``config/published/`` and audited by its SHA-256. ``signing_key`` signs the
    version's manifest; every signature is checked against ``allowed_signers`` (default
    ``<reports_root>/allowed_signers``; driver/release/signatures.py). ``superlinear``: case id
    -> the reason a case measured above 100% efficiency is published (else it is refused).
    ``require_signed``: refuse an unsigned session, and a version without a signing key."""
    from driver.release.audit import audit

    reports_root = Path(reports_root)
    target = reports_root / version
    previous = refuse_a_bad_request(version, sessions, target, changelog, title, imports)
    check_config_files(imports, repo_root)
    with refused_as_release_error(VouchingError):
        vouching = vouching_for(
            reports_root, signing_key, allowed_signers, superlinear or {}, require_signed
        )
    collected = [collect_session(Path(s)) for s in sessions]
    refuse_sessions_a_release_cannot_hold(collected)
    work = _work_folder(reports_root, version)
    try:
        try:
            _build(
                work,
                version,
                collected,
                previous[0] if previous else None,
                reports_root=reports_root,
                changelog=(changelog or "").strip(),
                title=title or f"dlperf report {version}",
                accept_remeasured=accept_remeasured,
                compute_flops=compute_flops,
                repo_root=repo_root,
                printer=printer,
                imports=[Path(p) for p in imports],
                vouching=vouching,
            )
            report = audit(
                work,
                expected_version=version,
                recompute_flops=False,
                allowed_signers=vouching.trust,
            )
        except OSError as error:  # a copy or a plot that could not be written into the version
            if isinstance(error, KitWriteError):
                raise
            raise KitWriteError(error.filename or work, error) from None
        _publish(work, target, report)
    except BaseException:
        remove_tree(work)
        raise
    write_index(reports_root)
    printer(f"released {target} ({report.summary_line()})")
    return target


def _work_folder(reports_root: Path, version: str) -> Path:
    """The hidden folder the version is built in (stale ones of killed releases removed)."""
    ensure_dir(reports_root)
    remove_stale_work(reports_root)
    work = reports_root / f"{WORK_PREFIX}{os.getpid()}-{version}"
    try:
        work.mkdir()
    except OSError as error:
        raise KitWriteError(work, error) from None
    return work


def _publish(work: Path, target: Path, report: AuditReport) -> None:
    """The version that passes its own audit, read-only, renamed into place (never over
    another's)."""
    if not report.ok:
        raise ReleaseError("the new version fails its own audit:\n" + report.text())
    for path in work.rglob("*"):
        if path.is_file():
            path.chmod(0o444)
    ignored = git_ignored(target, [p.relative_to(work) for p in work.rglob("*") if p.is_file()])
    if ignored:
        raise ReleaseError(
            "git would not commit these files of the version (.gitignore): " + ", ".join(ignored)
        )
    if target.exists():  # released by someone else meanwhile
        raise ReleaseError(f"{target} appeared while releasing; nothing was written")
    try:
        os.rename(work, target)
    except OSError as error:
        raise KitWriteError(target, error) from None


def _build(
    work: Path,
    version: str,
    collected: list,
    previous: tuple[str, dict[str, Any]] | None,
    *,
    reports_root: Path,
    changelog: str,
    title: str,
    accept_remeasured: bool,
    compute_flops: bool,
    repo_root: Path,
    printer: Printer,
    imports: Sequence[Path],
    vouching: Vouching,
) -> None:
    archives, raw_files, members = _archive_sessions(work, collected)
    signatures = checked_signatures(members, collected, vouching, printer)
    dataset = checked_dataset(members, collected)
    config_files = _copy_config_files(work, repo_root, dataset, imports)
    model_costs = (
        compute_model_costs(((r.case.model, r.case.options) for r in dataset.repeats), printer)
        if compute_flops
        else {}
    )
    computed = _checked_computation(work, dataset, model_costs, signatures, vouching)
    remeasured = remeasured_repeats(computed, collected, accept_remeasured)
    derived = derived_parts(dataset, computed, work)
    if derived["images"]["unlisted"]:
        printer(
            "warning: the repeats ran image digest(s) that neither images.lock nor the build "
            f"records list: {', '.join(derived['images']['unlisted'])}"
        )
    data = results_data(computed, version)
    manifest: dict[str, Any] = {
        "schema": MANIFEST_SCHEMA,
        "kind": KIND,
        "version": version,
        "title": title,
        "released_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "changelog": changelog,
        "previous": previous[0] if previous else None,
        "kit": kit_revision(repo_root),
        "release_tool": _tool_versions(),
        **derived,
        "config_files": config_files,
        "raw_files": raw_files,
        "archives": archives,
        "files": {},
        "model_costs": model_costs,
        "excluded_repeats": [e for c in collected for e in c.excluded],
        "remeasured": remeasured,
        "changes": _changes(previous, reports_root, data),
        "readme_layout": README_LAYOUT,
        "results_schema": RESULTS_SCHEMA,
        "signatures": {
            "version": vouching.version_status(),
            "sessions": signatures.sessions,
            "trust": vouching.trust_status(),
        },
        "superlinear": dict(sorted(vouching.superlinear.items())),
    }
    _write_version(work, computed, data, manifest, vouching)


def _archive_sessions(work: Path, collected: list) -> tuple[dict, dict, dict[str, bytes]]:
    """One raw archive per session: (archives, raw files, the members as archived)."""
    archives: dict[str, dict[str, Any]] = {}
    raw_files: dict[str, dict[str, Any]] = {}
    members: dict[str, bytes] = {}
    for session in collected:
        archive = f"{RAW_DIR}/{session.name}.tar.gz"
        digests = write_archive(session.name, session.files, work / archive)
        archives[archive] = {"sha256": sha256_file(work / archive), "members": len(digests)}
        raw_files.update({m: {**d, "archive": archive} for m, d in digests.items()})
        members.update(read_archive(work / archive))
    return archives, raw_files, members


def _copy_config_files(
    work: Path, repo_root: Path, dataset: Dataset, imports: Sequence[Path]
) -> dict[str, dict[str, Any]]:
    """Copies of the config files in the version, which the numbers are then read from (as
    the audit will): destination -> its source and SHA-256."""
    config_files: dict[str, dict[str, Any]] = {}

    def copy(source: Path, destination: str, shown: str) -> None:
        (work / destination).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, work / destination)
        config_files[destination] = {"source": shown, "sha256": sha256_file(work / destination)}

    frameworks = {r.case.framework for r in dataset.repeats}
    for source in config_sources(repo_root, list(dataset.sessions.values()), frameworks):
        try:
            shown = source.resolve().relative_to(repo_root.resolve()).as_posix()
        except ValueError:
            shown = str(source)
        copy(source, config_destination(repo_root, source), shown)
    for path in imports:  # published figures: read from the version's copy, like the audit
        copy(path, f"{PUBLISHED_DIR}/{path.name}", str(path))
    return config_files


def _checked_computation(
    work: Path,
    dataset: Dataset,
    model_costs: dict[str, dict[str, Any]],
    signatures: Signatures,
    vouching: Vouching,
) -> Computed:
    """The version's numbers, computed from its config copies: every superlinear case vouched
    for, each case on one device model."""
    config = load_config(work, model_costs, split_by_machine=True)  # a new version: by machine
    config.marks = Marks(signatures.sessions, vouching.version_status(), dict(vouching.superlinear))
    computed = compute(dataset, config)
    with refused_as_release_error(VouchingError):
        check_superlinear(computed, vouching.superlinear)
        check_mfu(computed)
    mixed = cases_on_several_devices(computed)
    if mixed:
        raise ReleaseError(
            "a version holds each case measured on one device model, and a published figure "
            "of it only on other hardware; these are measured on several, or published on the "
            "measured device model (release them as separate versions, or compare them with "
            "`dlperf report`):\n"
            + "\n".join(f"  {case_id}: {', '.join(models)}" for case_id, models in mixed)
        )
    return computed


def _write_version(
    work: Path, computed: Computed, data: Results, manifest: dict[str, Any], vouching: Vouching
) -> None:
    from driver.release.plots import render_plots

    for rel in render_plots(computed, work):
        manifest["files"][rel] = {"sha256": sha256_file(work / rel)}
    write_text(work / "results.json", json_text(data))
    write_text(work / "results.csv", csv_text(data))
    write_text(work / "README.md", readme_text(computed, manifest))
    write_text(work / MANIFEST, manifest_text(manifest))
    if vouching.key is not None:
        sign(work / MANIFEST, vouching.key, RELEASE_NAMESPACE)


def git_ignored(target: Path, relative: list[Path]) -> list[str]:
    """The files (relative to ``target``) that .gitignore would keep out of a commit; [] when
    ``target`` is not in a git work tree."""
    import subprocess

    probe = target.parent
    try:
        done = subprocess.run(
            ["git", "check-ignore", "--stdin"],
            cwd=probe,
            input="\n".join(str(target / rel) for rel in relative),
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:  # 1: nothing ignored; 128: not a git work tree
        return []
    return sorted(Path(line).relative_to(target).as_posix() for line in done.stdout.splitlines())
