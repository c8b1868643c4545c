"""``dlperf audit reports/vX.Y``: recompute a released version from its raw logs and compare.

Checks, each failure naming the file, the cell and both values:

1. the manifest's schema, and that the version folder holds exactly the files it lists;
2. the SHA-256 of every archive, raw file (logs, records, telemetry, probes), config copy and
   plot;
3. every repeat re-measured from its raw logs with the parser its record names
   (``driver.parsers.base.PARSERS`` + ``driver.model.measure``), against its record;
4. every case re-summarised (``driver.core.summary.summarize``: median, CV, speedup,
   efficiency) with MFU, scaling bounds, references and telemetry, and results.json and
   results.csv re-rendered and compared: the result data structurally (JSON path, or CSV row
   and column, of each differing value), every file byte for byte (a unified diff shows
   where); README.md too, byte for byte, where it is of the layout this kit writes. A version
   keeps the README it was released with: one of an older layout is held byte for byte to what
   the kit that released it re-renders (its audit, as ``dlperf audit --kit released`` runs
   it); where that kit cannot run, the verdict is INCOMPLETE, never PASS;
5. the manifest parts that follow from the raw data (sessions, nodes, probes, counts, image
   digests: the ``images.lock`` copy's pins, the digests the records ran, those no lock or build
   record lists, which are noted), and the repo's current ``images.lock`` (a note, or a
   failure with ``--images-lock``),
   and the model FLOPs when torch is importable (cached values are used otherwise);
6. the manifest's SHA-256 in ``reports/README.md``, when the version is listed there;
7. who vouches for it (``driver.release.signatures``): every session's files against its seal
   (a log, record or fingerprint changed after sealing is named) and its signature, the
   version's signature (``manifest.json.sig``), each against the allowed-signers file, and
   what the manifest records of both; a case measured above 100% efficiency beyond its noise
   tolerance needs the reason the manifest records for it (README layout 5 on).

How a difference becomes a finding, and how the published files are compared with the
recomputed ones, is ``findings.py``'s. Needs only the driver's own dependencies: no framework,
no torch, no matplotlib.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from driver.core.report import tables
from driver.files import sha256_bytes, sha256_file
from driver.model.seal import SEAL
from driver.release.archive import read_archive
from driver.release.compute import Computed, Config, Marks, compute
from driver.release.dataset import load_dataset
from driver.release.findings import (
    VERSION_LEVEL,
    AuditReport,
    AuditState,
    compare_csv,
    compare_json,
    compare_text,
    compare_values,
    read_published,
)
from driver.release.layout import load_config
from driver.release.manifest import (
    IMAGES_LOCK,
    MANIFEST,
    derived_parts,
    read_images_lock,
    validate,
)
from driver.release.readme import README_LAYOUT, readme_text
from driver.release.results import (
    csv_text,
    json_text,
    readme_layout,
    results_by_machine,
    results_data,
    results_schema,
)
from driver.release.signatures import (
    OWN_ANCHOR,
    SIGNED,
    VERSION_SIGNATURE,
    Signatures,
    TrustAnchor,
    describe,
    outside_anchor,
    session_signatures,
    trust_anchor,
    version_signature,
)
from driver.release.versions import index_digest
from driver.schema import ConfigError
from driver.signing import SigningError

PUBLISHED_TEXTS = ("README.md", "results.json", "results.csv")
_CASE_IN_MEMBER = re.compile(r"^[^/]+/cases/(.+?)/(?:repeat-\d+(?:\.failed-\d+)?/|[^/]+$)")


def case_of_member(member: str) -> str | None:
    match = _CASE_IN_MEMBER.match(member)
    return match[1] if match else None


def audit(
    version_dir: Path,
    *,
    expected_version: str | None = None,
    images_lock: Path | None = None,
    recompute_flops: bool = True,
    reports_root: Path | None = None,
    allowed_signers: Path | TrustAnchor | None = None,
    require_signed: bool = False,
    signatures_only: bool = False,
) -> AuditReport:
    """Audit one version folder; never raises for a bad version (the findings say why).
    Signatures are checked against ``allowed_signers``, else the file from outside the reports
    folder (``driver.release.signatures.trust_anchor``), else ``allowed_signers`` in
    ``reports_root`` or beside the version folder, which the verdict then names.
    ``require_signed``: an unsigned version or session is a finding, and so is a signature
    that only the reports folder's own allowed_signers trusts (git's model: trust is a list the
    reader keeps, not one shipped with the data). ``signatures_only``: check the seals and
    signatures and nothing else (``dlperf audit --kit released``: the kit that released the
    version recomputes the numbers, this one checks who vouches for them against the
    auditor's file, whatever that kit knows of it)."""
    started = time.perf_counter()
    version_dir = Path(version_dir)
    report = AuditReport(version_dir=version_dir, signatures_only=signatures_only)
    state = AuditState(version_dir, report)
    try:
        trust = allowed_signers
        if not isinstance(trust, TrustAnchor):
            trust = trust_anchor(allowed_signers, reports_root or version_dir.parent)
    except SigningError as error:
        state.add("allowed_signers", "the file", str(error), "a readable allowed-signers file")
        report.elapsed_s = time.perf_counter() - started
        return report
    report.trust = trust.verdict()
    try:
        if signatures_only:
            _run_signatures(state, expected_version, trust.path)
        else:
            _run(state, expected_version, images_lock, recompute_flops, reports_root, trust.path)
        _judge_trust(state, trust, require_signed)
    finally:
        report.elapsed_s = time.perf_counter() - started
    return report


def _judge_trust(state: AuditState, trust: TrustAnchor, require_signed: bool) -> None:
    """What ``--require-signed`` refuses (an unsigned session or version, the reports folder's
    own allowed_signers), and whether the verdict names that own file."""
    report = state.report
    for unsigned in report.unsigned if require_signed else []:
        state.add(unsigned, "signature", "unsigned", "signed (--require-signed)")
    if require_signed and trust.own:
        state.add(str(trust.path), "--require-signed", OWN_ANCHOR, outside_anchor())
    # the verdict names the version's own file where it decided something: a signature
    # verified, or one that did not verify against it
    checked = len(report.signatures) > len(report.unsigned) or any(
        f.cell in ("seal", "signature") and f.published != "unsigned" for f in report.findings
    )
    report.trust_own = trust.own and checked


def _manifest(state: AuditState, expected_version: str | None) -> tuple[bytes, dict] | None:
    """The version's manifest (its bytes and its content) when it reads and is well formed,
    else None with the findings that say why; the version it names checked against the
    folder's and ``expected_version``."""
    directory, report = state.dir, state.report
    try:
        manifest_bytes = (directory / MANIFEST).read_bytes()
        manifest = json.loads(manifest_bytes)
    except (OSError, ValueError) as error:
        state.add(MANIFEST, "the file", "unreadable", f"a JSON manifest ({error})")
        return None
    problems = validate(manifest)
    for problem in problems:
        state.add(MANIFEST, "schema", problem, "a valid manifest")
    if problems:
        return None
    report.version = manifest["version"]
    # A version is what its manifest says: a copy unpacked under another folder name is the
    # same version (noted); only a version the caller named explicitly must match.
    if expected_version is not None and manifest["version"] != expected_version:
        state.add(MANIFEST, "version", manifest["version"], expected_version)
    elif manifest["version"] != directory.name:
        report.notes.append(
            f"the folder name {directory.name!r} differs from the version its manifest names "
            f"({manifest['version']!r}): audited as {manifest['version']}"
        )
    return manifest_bytes, manifest


def _run_signatures(state: AuditState, expected_version: str | None, allowed: Path) -> None:
    """The seals and signatures of a version, and nothing else: each session's files against
    its seal and signature, the version's signature, each against ``allowed``."""
    read = _manifest(state, expected_version)
    if read is None:
        return
    manifest_bytes, manifest = read
    members: dict[str, bytes] = {}
    present = {p.relative_to(state.dir).as_posix() for p in state.dir.rglob("*") if p.is_file()}
    for archive, entry in sorted(manifest["archives"].items()):
        path = state.dir / archive
        if archive not in present:  # only a file of the folder: never a path out of it
            state.add(archive, "presence", "missing", "listed in the manifest")
            continue
        if sha256_file(path) != entry.get("sha256"):  # its seal is then not the one signed
            state.add(archive, "sha256", entry.get("sha256"), sha256_file(path))
        _read_members(state, archive, path, members)
    signatures = session_signatures(members, allowed)
    _check_signatures(state, manifest_bytes, manifest, signatures, allowed)


def _read_members(
    state: AuditState, archive: str, path: Path, members: dict[str, bytes]
) -> None:
    """Add ``archive``'s members to ``members``, or a finding where it does not read."""
    try:
        members.update(read_archive(path))
    except Exception as error:  # a corrupted archive: tarfile/gzip/zlib errors
        state.add(archive, "archive", f"unreadable ({type(error).__name__}: {error})", "readable")


def _check_folder_files(state: AuditState, manifest: dict) -> set[str]:
    """The version folder's files against the manifest's lists (none more, none missing) and
    their checksums; the files present, relative to the folder."""
    directory = state.dir
    recorded = manifest.get("signatures")  # README layout 5 on
    version_signed = (recorded or {}).get("version", {}).get("status") == SIGNED
    listed = {MANIFEST, *PUBLISHED_TEXTS, *manifest["files"], *manifest["archives"]}
    listed |= {VERSION_SIGNATURE} if version_signed else set()
    listed |= set(manifest["config_files"])
    present = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}
    for extra in sorted(present - listed):
        state.add(extra, "presence", "a file the manifest does not list", "absent")
    for path, entry in sorted(
        {**manifest["files"], **manifest["config_files"], **manifest["archives"]}.items()
    ):
        if path not in present:
            state.add(path, "presence", "missing", "listed in the manifest")
        elif sha256_file(directory / path) != entry.get("sha256"):
            state.add(path, "sha256", entry.get("sha256"), sha256_file(directory / path))
    return present


def _release_config(state: AuditState, manifest: dict) -> Config | None:
    """The release's configuration as the version folder's copies give it, with the marks its
    manifest records; None with a finding where an import file does not load."""
    try:
        config = load_config(
            state.dir, manifest["model_costs"], split_by_machine=results_by_machine(manifest)
        )
    except ConfigError as error:  # an import file of published figures that does not load
        state.add(error.path, error.field_path, error.message, "a valid import file")
        return None
    recorded = manifest.get("signatures")  # README layout 5 on
    if recorded is not None:
        config.marks = Marks(
            sessions=recorded.get("sessions", {}),
            version=recorded.get("version", {}),
            superlinear=manifest.get("superlinear") or {},
        )
    return config


def _count_tables(report: AuditReport, computed: Computed, raw_files: int) -> None:
    """The tables the recomputation gives, their sizes and the counts the verdict shows."""
    report.tables = [title for title, _ in tables(computed.summaries)]
    for s in computed.summaries:
        cases, repeats = report.table_sizes.get(computed.titles[s.case_id], (0, 0))
        report.table_sizes[computed.titles[s.case_id]] = (cases + 1, repeats + s.stats.repeats)
    report.counts = {
        "cases": len(computed.summaries),
        "repeats": sum(1 for r in computed.repeats if r.measurement is not None),
        "raw_files": raw_files,
    }


def _check_mfu(state: AuditState, computed: Computed) -> None:
    for row in sorted(computed.rows.values(), key=lambda r: r.case_id):
        if row.mfu is not None and row.mfu > 1.0:  # no run reaches its devices' peak
            state.add("results.json", f"{row.case_id}.mfu", f"{row.mfu:.4f}",
                      "at most 1 (100% of the devices' dense peak): a count or a peak is wrong",
                      row.case_id)  # fmt: skip


def _raw_members(state: AuditState, manifest: dict, present: set[str]) -> dict[str, bytes]:
    """The members of the version's archives that are present, checked against the manifest's
    list of raw files (none missing, none more)."""
    members: dict[str, bytes] = {}
    for archive in sorted(manifest["archives"]):
        if archive in present:
            _read_members(state, archive, state.dir / archive, members)
    raw = manifest["raw_files"]
    for member in sorted(set(raw) - set(members)):
        state.add(member, "presence", "missing from the archives", "listed", case_of_member(member))
    for member in sorted(set(members) - set(raw)):
        state.add(member, "presence", "in an archive", "not listed", case_of_member(member))
    return members


def _check_published_texts(
    state: AuditState, computed: Computed, manifest: dict, reports_root: Path
) -> None:
    """results.json, results.csv and the README against what the recomputation renders (a
    README of an older layout against what the kit that released it renders)."""
    data = results_data(computed, manifest["version"], results_schema(manifest))
    compare_json(state, "results.json", json_text(data))
    compare_csv(state, "results.csv", csv_text(data))
    layout = readme_layout(manifest)
    if layout == README_LAYOUT:
        compare_text(state, "README.md", readme_text(computed, manifest))
    elif read_published(state, "README.md") is not None:
        _check_older_readme(state, layout, reports_root)


def _check_raw_members(
    state: AuditState,
    raw: dict[str, dict[str, Any]],
    members: dict[str, bytes],
    problems: list[tuple[str, str]],
) -> None:
    """Each listed member's checksum, and what reading the raw data found wrong."""
    for member in sorted(set(raw) & set(members)):
        actual = sha256_bytes(members[member])
        if actual != raw[member].get("sha256"):
            state.add(member, "sha256", raw[member].get("sha256"), actual, case_of_member(member))
    for member, problem in problems:
        state.add(member, "raw data", problem, "complete", case_of_member(member))


def _run(
    state: AuditState,
    expected_version: str | None,
    images_lock: Path | None,
    recompute_flops: bool,
    reports_root: Path | None,
    allowed: Path,
) -> None:
    directory, report = state.dir, state.report
    read = _manifest(state, expected_version)
    if read is None:
        return
    manifest_bytes, manifest = read

    # 1-2: the files of the folder, and their checksums.
    members = _raw_members(state, manifest, _check_folder_files(state, manifest))
    raw = manifest["raw_files"]

    # 3-4: recompute.
    dataset = load_dataset(members)
    config = _release_config(state, manifest)
    if config is None:
        return
    signatures = session_signatures(members, allowed)
    computed = compute(dataset, config)
    state.case_titles = dict(computed.titles)
    for repeat in computed.repeats:  # a case that failed to summarise still maps its repeats
        state.case_titles.setdefault(repeat.case.id, VERSION_LEVEL)
    # member hashes after titles are known, so that a changed log names its table
    _check_raw_members(state, raw, members, dataset.problems)
    _count_tables(report, computed, len(members))
    _check_records(state, computed, manifest)
    _check_flops(state, manifest, recompute_flops)
    _check_signatures(state, manifest_bytes, manifest, signatures, allowed)
    _check_superlinear(state, computed, manifest)
    _check_mfu(state, computed)

    # 5: manifest parts recomputed from the raw data and the config copies.
    derived = derived_parts(dataset, computed, directory)
    for name, value in derived.items():
        compare_values(state, f"{MANIFEST}", name, manifest.get(name), value)
    _check_images(state, derived["images"], images_lock)

    # 4: the published texts.
    _check_published_texts(state, computed, manifest, reports_root or directory.parent)

    # 6: the index.
    _check_index(state, manifest_bytes, manifest["version"], reports_root or directory.parent)


_FINDING = re.compile(r"^README\.md: (.+): published '(.*)', recomputed '(.*)'$")


def _check_older_readme(state: AuditState, layout: int, reports_root: Path) -> None:
    """A README of an older layout than this kit writes, held byte for byte to what the kit
    that released it re-renders (its own audit, in a temporary worktree of its commit); where
    that kit cannot run here, the verdict says the check was skipped, never PASS."""
    from driver.release.released_kit import ReleasedKitError, released_kit_output

    what = f"README.md is of README layout {layout} (this kit writes {README_LAYOUT})"
    try:
        code, output = released_kit_output(state.dir, reports_root, ["--cached-flops"])
    except (ReleasedKitError, OSError) as error:
        state.report.skipped.append(
            f"{what}: not re-rendered: the kit that released it cannot run here ({error}); "
            "its tables are held to nothing"
        )
        return
    by = "the kit that released it"
    if code == 0:
        state.report.notes.append(f"{what}: re-rendered byte for byte by {by}: identical")
        return
    lines = [line.strip() for line in output.splitlines()]
    found = [m for m in map(_FINDING.match, lines) if m]
    for match in found:
        state.add("README.md", f"{match[1]}, as {by} re-renders it", match[2], match[3])
    if not found:  # that kit fails the version for another reason: its verdict stands
        verdict = next((line for line in reversed(lines) if line.startswith("verdict:")), "")
        state.add("README.md", f"{what}: {by}", verdict or f"exit {code}", "verdict: PASS")


def _check_signatures(
    state: AuditState,
    manifest_bytes: bytes,
    manifest: dict[str, Any],
    signatures: Signatures,
    allowed: Path,
) -> None:
    """Every session's files against its seal and its signature, the version's signature, and
    what the manifest records of them (a version before README layout 5 records nothing: it
    predates signatures, and each of its sessions is checked all the same)."""
    report = state.report
    for member, problem in signatures.problems:
        state.add(member, "seal", problem, "as sealed and signed", case_of_member(member))
    recorded = manifest.get("signatures")
    if recorded is None:
        report.unsigned.append(MANIFEST)
        report.signatures.append(
            f"version unsigned (released before signatures, README layout "
            f"{readme_layout(manifest)})"
        )
        if (state.dir / VERSION_SIGNATURE).exists():
            state.add(VERSION_SIGNATURE, "presence", "a signature", "absent (layout before 5)")
    else:
        path = state.dir / VERSION_SIGNATURE
        signature = path.read_bytes() if path.is_file() else None
        version = recorded.get("version", {})
        signer, problems = version_signature(manifest_bytes, signature, version, allowed)
        for problem in problems:
            state.add(VERSION_SIGNATURE, "signature", problem, "a good signature")
        shown = dict(version, principal=signer.principal) if signer else version
        if problems and version.get("status") == SIGNED:  # a claim, not a verified signature
            report.signatures.append(
                f"version NOT verified against {allowed}: its manifest says {describe(shown)}"
            )
        else:
            report.signatures.append(f"version {describe(shown)}")
        if version.get("status") != SIGNED:
            report.unsigned.append(MANIFEST)
        if signer is not None and signer.principal != version.get("principal"):
            report.notes.append(
                f"{allowed} names the version's signer ({signer.key}) {signer.principal!r}; it "
                f"was {version.get('principal')!r} at release"
            )
        compare_values(state, MANIFEST, "signatures.sessions",
                        _keys_only(recorded.get("sessions", {})),
                        _keys_only(signatures.sessions))  # fmt: skip
    for session, status in sorted(signatures.sessions.items()):
        report.signatures.append(f"session {session} {describe(status)}")
        if status.get("status") != SIGNED:
            report.unsigned.append(f"{session}/{SEAL}")


def _keys_only(statuses: dict[str, Any]) -> dict[str, Any]:
    """Signature statuses without the principal (who the allowed-signers file says holds a key
    may be renamed later; the key and the status may not change)."""
    return {
        name: {k: v for k, v in status.items() if k != "principal"}
        if isinstance(status, dict)
        else status
        for name, status in statuses.items()
    }


def _check_superlinear(state: AuditState, computed: Computed, manifest: dict[str, Any]) -> None:
    """A measured case above 100% efficiency beyond its noise tolerance needs the reason it was
    released with, and a reason stands only beside such a case (README layout 5 on)."""
    reasons = manifest.get("superlinear")
    if reasons is None:
        return
    flagged = {s.case_id: s for s in computed.summaries if s.superlinear}
    for case_id in sorted(set(flagged) | set(reasons)):
        if case_id in flagged and case_id not in reasons:
            s = flagged[case_id]
            state.add(MANIFEST, f"superlinear[{case_id}]", "(no reason)",
                      f"a reason: efficiency {s.efficiency:.2%} is above 100% beyond its noise "
                      f"tolerance {s.superlinear_tolerance:.2%}", case_id)  # fmt: skip
        elif case_id not in flagged:
            state.add(MANIFEST, f"superlinear[{case_id}]", reasons[case_id],
                      "no reason: not above 100% beyond its tolerance", case_id)  # fmt: skip


def _check_records(state: AuditState, computed: Computed, manifest: dict[str, Any]) -> None:
    accepted = {
        e.get("folder"): e.get("recomputed") for e in manifest["remeasured"] if isinstance(e, dict)
    }
    for repeat in computed.repeats:
        if repeat.measurement is None or repeat.measurement == repeat.recorded:
            continue
        recomputed = repeat.measurement.model_dump()
        if accepted.get(repeat.folder) == recomputed:
            continue  # published with --accept-remeasured: listed in the manifest
        compare_values(
            state,
            f"{repeat.folder}/record.json",
            "measurement",
            repeat.recorded.model_dump() if repeat.recorded else None,
            recomputed,
            repeat.case.id,
        )


def _check_flops(state: AuditState, manifest: dict[str, Any], recompute: bool) -> None:
    costs = manifest["model_costs"]
    if not costs:
        return
    if not recompute:
        state.report.notes.append("model FLOPs: cached values used (not recomputed)")
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        state.report.notes.append("model FLOPs: cached values used (no torch here)")
        return
    from driver.release.mfu import compute_model_costs, formula_costs
    from driver.workloads.llama import FLOPS_FORMULAS

    fresh = compute_model_costs((c["model"], c["options"]) for c in costs.values())
    for formula in FLOPS_FORMULAS:  # a formula's cost by the count the version was released with
        counted = [(c["model"], c["options"]) for c in costs.values() if c.get("source") == formula]
        fresh.update(formula_costs(counted, formula))
    for key, cost in sorted(costs.items()):
        for name in ("flops_per_sample", "parameters"):
            if fresh.get(key, {}).get(name) != cost.get(name):
                state.add(
                    MANIFEST,
                    f"model_costs[{key}].{name}",
                    cost.get(name),
                    fresh.get(key, {}).get(name),
                )


def _check_images(state: AuditState, images: dict[str, Any], explicit_lock: Path | None) -> None:
    for digest in images.get("unlisted", []):
        state.report.notes.append(
            f"image {digest} ran (records) but neither images.lock nor the build records list it"
        )
    from driver.frameworks.base import REPO_ROOT

    current = explicit_lock or REPO_ROOT / IMAGES_LOCK
    if not images.get("digests") or not current.exists():
        return
    now = read_images_lock(current)
    for name, digest in sorted(images["digests"].items()):
        if name in now and now[name] != digest:
            message = f"{current}: {name}"
            if explicit_lock is not None:
                state.add(str(current), f"image {name}", now[name], digest)
            else:
                state.report.notes.append(
                    f"{message} is now {now[name]} (the version ran {digest}); pass "
                    "--images-lock to make this a failure"
                )


def _check_index(
    state: AuditState, manifest_bytes: bytes, version: str, reports_root: Path
) -> None:
    listed = index_digest(reports_root, version)
    if listed is None:
        state.report.notes.append(f"{reports_root / 'README.md'} does not list {version}")
    elif listed != sha256_bytes(manifest_bytes):
        state.add(
            str(reports_root / "README.md"),
            f"manifest sha256 of {version}",
            listed,
            sha256_bytes(manifest_bytes),
        )
