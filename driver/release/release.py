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
superlinear cases are checked by ``vouching.py``.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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
from driver.model.figures import load_peaks, load_references
from driver.model.results import kit_revision
from driver.release.archive import RAW_DIR, collect_session, read_archive, write_archive
from driver.release.compute import Computed, Marks, compute
from driver.release.dataset import Dataset, load_dataset, session_of
from driver.release.imported import load_import
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
from driver.release.results import RESULTS_SCHEMA, csv_text, json_text, results_data
from driver.release.signatures import Signatures, describe, session_signatures
from driver.release.versions import VERSION, released_versions, write_index
from driver.release.vouching import (
    Vouching,
    VouchingError,
    check_mfu,
    check_required_signatures,
    check_superlinear,
    vouching_for,
)
from driver.schema import ConfigError
from driver.signing import RELEASE_NAMESPACE, sign
from driver.text import check_plain_text

if TYPE_CHECKING:
    from driver.release.findings import AuditReport

DEFAULT_REPORTS = REPO_ROOT / "reports"
DEFAULT_RESULTS = REPO_ROOT / "results"
Printer = Callable[[str], None]


class ReleaseError(RuntimeError):
    pass


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


@contextmanager
def _refused_as_release_error(*kinds: type[Exception], prefix: str = "") -> Iterator[None]:
    """A check's own error (a bad config file, an unvouched signature) as a ReleaseError."""
    try:
        yield
    except kinds as error:
        raise ReleaseError(f"{prefix}{error}") from None


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
    previous = _refuse_a_bad_request(version, sessions, target, changelog, title, imports)
    _check_config_files(imports, repo_root)
    with _refused_as_release_error(VouchingError):
        vouching = vouching_for(
            reports_root, signing_key, allowed_signers, superlinear or {}, require_signed
        )
    collected = [collect_session(Path(s)) for s in sessions]
    _refuse_sessions_a_release_cannot_hold(collected)
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


def _refuse_a_bad_request(
    version: str,
    sessions: list[Path],
    target: Path,
    changelog: str | None,
    title: str | None,
    imports: Sequence[Path],
) -> list[tuple[str, dict[str, Any]]]:
    """What is wrong with the request itself, before anything is read; the versions already
    released (newest first)."""
    if not VERSION.fullmatch(version):
        raise ReleaseError(f"version {version!r} is not of the form vX.Y[.Z][-label] (v0.1-cpu)")
    for option, text, kind in (("--title", title, "name"), ("--changelog", changelog, "note")):
        with _refused_as_release_error(ValueError, prefix=f"{option} "):
            if text is not None:
                check_plain_text(text, kind)
    if target.exists():
        raise ReleaseError(
            f"{target} exists: a released version is never rewritten. Release the correction "
            "as a new version, with --changelog saying what changed and why."
        )
    previous = released_versions(target.parent)
    if previous and not (changelog or "").strip():
        raise ReleaseError(
            f"--changelog is required: {previous[0][0]} exists, so say what {version} changes "
            "and why"
        )
    if not sessions:
        raise ReleaseError("give at least one session")
    for what, paths in (("sessions", sessions), ("import files", imports)):
        names = [Path(p).name for p in paths]
        if len(set(names)) != len(names):
            raise ReleaseError(f"two {what} share a name: {names}")
    return previous


def _check_config_files(imports: Sequence[Path], repo_root: Path) -> None:
    """The import files, and the published results and device peaks every table of the
    version is computed with, load."""
    for path in imports:
        with _refused_as_release_error(ConfigError, prefix="import file refused: "):
            load_import(path)
    with _refused_as_release_error(ConfigError, prefix="config file refused: "):
        load_references(repo_root / "reports" / "references.yaml")
        load_peaks(repo_root / "reports" / "peaks.yaml")


def _refuse_sessions_a_release_cannot_hold(collected: list) -> None:
    refused = [line for c in collected for line in c.refused]
    if refused:
        raise ReleaseError(
            "the sessions hold what a release never follows or archives:\n"
            + "\n".join(f"  {line}" for line in refused)
        )
    if not any(c.repeats for c in collected):
        raise ReleaseError("the sessions hold no finished repeat")


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
    signatures = _checked_signatures(members, collected, vouching, printer)
    dataset = _checked_dataset(members, collected)
    config_files = _copy_config_files(work, repo_root, dataset, imports)
    model_costs = (
        compute_model_costs(((r.case.model, r.case.options) for r in dataset.repeats), printer)
        if compute_flops
        else {}
    )
    computed = _checked_computation(work, dataset, model_costs, signatures, vouching)
    remeasured = _remeasured(computed, collected, accept_remeasured)
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


def _checked_signatures(
    members: dict[str, bytes], collected: list, vouching: Vouching, printer: Printer
) -> Signatures:
    """Every session's seal and signature, as archived, holding (and signed where required)."""
    signatures = session_signatures(members, vouching.allowed_signers)
    if signatures.problems:
        raise ReleaseError(
            "sessions whose seal or signature does not hold (driver/model/seal.py; signatures "
            f"checked against {vouching.allowed_signers}). A file changed after sealing is "
            "never published as sealed: re-run what changed, or remove the session's "
            "session-manifest.json and .sig to release it as it is now, unsigned:\n"
            + "\n".join(f"  {_on_disk(m, collected)}: {p}" for m, p in signatures.problems)
        )
    with _refused_as_release_error(VouchingError):
        check_required_signatures(vouching, signatures.sessions)
    printer(f"signatures {vouching.trust.verdict()}")
    for name, status in signatures.sessions.items():
        printer(f"session {name}: {describe(status)}")
    return signatures


def _checked_dataset(members: dict[str, bytes], collected: list) -> Dataset:
    """The archived repeats through the door, each case in one session."""
    dataset = load_dataset(members)
    if dataset.problems:
        raise ReleaseError(
            "repeats the door refuses (driver/verify: what `dlperf report` refuses too; fix or "
            "re-run them, or release without their session):\n"
            + "\n".join(
                f"  {_on_disk(m, collected)}: {_paths_on_disk(p, collected)}"
                for m, p in dataset.problems
            )
        )
    owners: dict[str, set[str]] = {}
    for repeat in dataset.repeats:
        owners.setdefault(repeat.case.id, set()).add(session_of(repeat))
    shared = {c: s for c, s in owners.items() if len(s) > 1}
    if shared:
        case_id, where = next(iter(sorted(shared.items())))
        raise ReleaseError(
            f"case {case_id} is in sessions {sorted(where)} (and {len(shared) - 1} more cases "
            "are shared): release one session per case"
        )
    return dataset


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
    with _refused_as_release_error(VouchingError):
        check_superlinear(computed, vouching.superlinear)
        check_mfu(computed)
    mixed = _cases_on_several_devices(computed)
    if mixed:
        raise ReleaseError(
            "a version holds each case measured on one device model, and a published figure "
            "of it only on other hardware; these are measured on several, or published on the "
            "measured device model (release them as separate versions, or compare them with "
            "`dlperf report`):\n"
            + "\n".join(f"  {case_id}: {', '.join(models)}" for case_id, models in mixed)
        )
    return computed


def _remeasured(computed: Computed, collected: list, accept: bool) -> list[dict[str, Any]]:
    """The repeats whose logs measure differently now than their records say: refused unless
    ``accept`` (--accept-remeasured), then listed in the manifest."""
    remeasured = []
    for repeat in computed.repeats:
        if repeat.remeasured:
            recorded, measured = repeat.recorded, repeat.measurement
            remeasured.append(
                {
                    "folder": repeat.folder,
                    "record": recorded.model_dump() if recorded else None,
                    "recomputed": measured.model_dump() if measured else None,
                    # the record's header is not rank 0's header in the logs (the logs win)
                    **({"header": "differs from the logs"} if repeat.header_differs else {}),
                }
            )
    if remeasured and not accept:
        first = remeasured[0]
        raise ReleaseError(
            f"{len(remeasured)} repeat(s) measure differently from their raw logs now than when "
            f"they ran (kit changed, or a file was edited); first: "
            f"{_on_disk(first['folder'], collected)}/record.json: record "
            f"{first['record']}, recomputed {first['recomputed']}"
            + (", header differs from rank 0's header in the logs" if "header" in first else "")
            + ". Pass --accept-remeasured to "
            "publish the recomputed values (they are listed in the manifest)."
        )
    return remeasured


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


def _on_disk(member: str, collected: list) -> str:
    """An archive member (``<session>/...``) as the path of the session file it came from."""
    session, _, rest = member.partition("/")
    roots = {c.name: c.root for c in collected}
    return str(roots[session] / rest) if session in roots else member


def _paths_on_disk(text: str, collected: list) -> str:
    """A message naming archive members (``<session>/cases/...``), naming the files instead."""
    for session in collected:
        text = re.sub(
            rf"(?<![\w./-]){re.escape(session.name)}/cases/", f"{session.root}/cases/", text
        )
    return text


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


def _cases_on_several_devices(computed: Computed) -> list[tuple[str, list[str]]]:
    """Case ids held more than once where a reader could not tell the rows apart: measured on
    several machines, or a published figure on the device model of a measured row (a published
    figure on other hardware stands beside the measured case: DLPerf's V100 beside an H100)."""
    models: dict[str, list[str]] = {}
    clashes: set[str] = set()
    measured_models: dict[str, set[str]] = {}
    published_models: dict[str, list[str]] = {}
    for s in computed.summaries:
        label = s.identity if s.device_model in s.identity else f"{s.identity} ({s.device_model})"
        label += f" (published by {s.published_by})" if s.published_by else ""
        models.setdefault(s.case_id, []).append(label)
        if s.published_by:
            published_models.setdefault(s.case_id, []).append(s.device_model)
        else:
            measured_models.setdefault(s.case_id, set()).add(s.device_model)
    for case_id, labels in models.items():
        measured = measured_models.get(case_id, set())
        measured_rows = sum(1 for label in labels if "(published by" not in label)
        if measured_rows > 1 or measured & set(published_models.get(case_id, [])):
            clashes.add(case_id)
    return [(c, sorted(m)) for c, m in sorted(models.items()) if c in clashes]
