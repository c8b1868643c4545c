"""``dlperf release / audit / compare / factor / probe``: released, auditable report versions.

Imported by ``driver.frontend.cli`` when present (``add_subcommands``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from driver.frameworks.base import REPO_ROOT
from driver.frontend.args import bounded_float, bounded_float_list, bounded_int, session_name

REPORTS = REPO_ROOT / "reports"
RESULTS = REPO_ROOT / "results"
# The all-reduce probe's message sizes (MB: at least 1 KB, at most what fits in a device's
# memory) and timed iterations (a probe takes seconds to minutes, not hours).
PROBE_MIN_MB, PROBE_MAX_MB, PROBE_MAX_ITERS = 0.001, 16384.0, 100_000


def cmd_release(args: argparse.Namespace) -> int:
    from driver.release.release import ReleaseError, release, resolve_session

    try:
        sessions = [resolve_session(s, Path(args.results)) for s in args.sessions]
        target = release(
            args.version,
            sessions,
            reports_root=Path(args.reports),
            changelog=args.changelog,
            title=args.title,
            accept_remeasured=args.accept_remeasured,
            compute_flops=not args.no_flops,
            imports=[Path(p) for p in args.imports],
        )
    except ReleaseError as error:
        print(f"release refused: {error}", file=sys.stderr)
        return 2
    print(f"{target}/README.md")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from driver.release.audit import audit
    from driver.release.release import ReleaseError, released_versions, resolve_version

    if args.images_lock:  # a lock named but missing or unreadable is an error, never skipped
        from driver.images.lock import LockFileError, load_lock

        try:
            load_lock(args.images_lock)
        except LockFileError as error:
            print(f"error: --images-lock {error}", file=sys.stderr)
            return 2
    reports = Path(args.reports)
    if args.all:
        targets = [reports / name for name, _ in reversed(released_versions(reports))]
        if not targets:
            print(f"no released version under {reports}")
            return 0
    else:
        if not args.versions:
            print("give a version (reports/vX.Y) or --all", file=sys.stderr)
            return 2
        try:
            targets = [resolve_version(v, reports) for v in args.versions]
        except ReleaseError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.kit == "released":
        return _audit_with_released_kits(targets, reports, args)
    failed = 0
    for target in targets:
        report = audit(
            target,
            images_lock=Path(args.images_lock) if args.images_lock else None,
            recompute_flops=not args.cached_flops,
        )
        print(report.text())
        failed += not report.ok
    return 1 if failed else 0


def _audit_with_released_kits(targets: list[Path], reports: Path, args: argparse.Namespace) -> int:
    from driver.release.released_kit import ReleasedKitError, audit_with_released_kit

    extra = [*(["--images-lock", args.images_lock] if args.images_lock else [])]
    extra += ["--cached-flops"] if args.cached_flops else []
    failed = 0
    for target in targets:
        try:
            failed += audit_with_released_kit(target, reports, extra) != 0
        except ReleasedKitError as error:
            print(f"error: {error}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


def cmd_compare(args: argparse.Namespace) -> int:
    from driver.release.compare import compare_sides, load_side

    a = load_side(args.a, Path(args.reports), Path(args.results))
    b = load_side(args.b, Path(args.reports), Path(args.results))
    rows, text = compare_sides(a, b, alpha=args.alpha)
    print(json.dumps(rows, indent=2) if args.json else text)
    return 0


def cmd_factor(args: argparse.Namespace) -> int:
    from driver.release.compare import load_side
    from driver.release.factor import factor_report

    sides = [load_side(s, Path(args.reports), Path(args.results)) for s in args.inputs]
    data, text = factor_report(
        sides, args.factor, args.a, args.b, where=args.where, metric=args.metric, by=args.by
    )
    print(json.dumps(data, indent=2) if args.json else text)
    return 0 if data["pairs"] else 1


def cmd_import(args: argparse.Namespace) -> int:
    """Check an import file of published figures and show what the kit derives from them."""
    from driver.core.report import write_report
    from driver.release.imported import imported_summaries
    from driver.schema import ConfigError

    path = Path(args.file)
    try:
        summaries = imported_summaries(path)
    except ConfigError as error:
        print(f"import refused: {error}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else path.with_name(f"{path.stem}-report")
    publishers = sorted({str(s.published_by) for s in summaries})
    preamble = (
        f"{len(summaries)} published figure(s) from `{path.name}` (published by "
        f"{', '.join(publishers)}): rates as published, not measured by this kit. Give the "
        "file to `dlperf report`, `factor` or `compare` beside sessions and versions."
    )
    paths = write_report(summaries, out, args.title or f"published figures: {path.name}", preamble)
    if args.json:
        print(paths["json"].read_text(), end="")
    else:
        print(paths["markdown"].read_text())
    print(f"written: {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from driver.model.results import Session
    from driver.probes import ProbeError, run_allreduce_probe
    from driver.runtimes.factory import make_runtime

    session = Session.open(Path(args.results) / args.session, {"runtime": args.runtime})
    runtime = make_runtime(args.runtime, inventory=args.inventory)
    status = 0
    for topology in args.topology:
        try:
            result = run_allreduce_probe(
                session.root,
                runtime,
                topology,
                python=args.python,
                sizes_mb=args.sizes_mb,
                iters=args.iters,
            )
        except (ProbeError, ValueError) as error:
            print(f"probe {topology}: {error}", file=sys.stderr)
            status = 1
            continue
        print(
            f"probe {topology}: {result['backend']}, busbw {result['busbw_gbps']:.3f} GB/s at "
            f"{result['busbw_at_bytes']} bytes -> {session.root}/probes/allreduce-{topology}.json"
        )
    return status


def cmd_attest_hardware(args: argparse.Namespace) -> int:
    """State the machine a session ran on, for logs that carry no fingerprint of their own."""
    from driver.release.release import ReleaseError, resolve_session
    from driver.verify.folder import verify_sessions
    from driver.verify.hardware import ATTESTATION, Attestation, write_attestation

    try:
        root = resolve_session(args.session, Path(args.results))
    except ReleaseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if root.is_symlink():
        print(
            f"error: {root}: a symlink; attest the session folder itself (a release refuses a "
            "symlinked session too)",
            file=sys.stderr,
        )
        return 2
    if (root / ATTESTATION).exists():
        print(
            f"error: {root / ATTESTATION} exists: a session's attestation is written once "
            "(remove it first if it is wrong, and say why in the next release's changelog)",
            file=sys.stderr,
        )
        return 2
    facts: dict[str, str] = {}
    for text in args.fact or []:
        key, sep, value = text.partition("=")
        if not sep or not key or key in facts:
            print(f"error: --fact {text!r}: one KEY=VALUE per key", file=sys.stderr)
            return 2
        facts[key] = value
    try:
        attestation = Attestation(label=args.label, facts=facts, source=args.source)
    except ValueError as error:
        print(f"error: attest-hardware: {error}", file=sys.stderr)
        return 2
    own = {r.record.header.get("hardware") for r in verify_sessions([root]).repeats} - {None}
    if own:
        print(
            f"error: {root}: its logs carry their own fingerprint ({', '.join(sorted(own))}); "
            "an attestation is only for logs without one",
            file=sys.stderr,
        )
        return 2
    path = write_attestation(root, attestation)
    print(f"{path}: {attestation.label} (source: {attestation.source})")
    return 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    def common(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--reports", default=str(REPORTS), help="the reports folder")
        parser.add_argument("--results", default=str(RESULTS), help="the results folder")

    attest = sub.add_parser(
        "attest-hardware",
        help="state the machine of a session whose logs carry no hardware fingerprint",
    )
    attest.add_argument("session", help="session folder or name under results/")
    attest.add_argument("--label", required=True, help="e.g. 'AMD EPYC 2c avx2'")
    attest.add_argument(
        "--source", required=True, help="how this is known (a note, an inventory, a log)"
    )
    attest.add_argument("--fact", action="append", metavar="KEY=VALUE", help="repeatable")
    common(attest)
    attest.set_defaults(func=cmd_attest_hardware)

    release = sub.add_parser(
        "release", help="turn result sessions into an immutable, auditable reports/<version>"
    )
    release.add_argument("version", help="vX.Y[.Z][-label], e.g. v0.1-cpu")
    release.add_argument("sessions", nargs="+", help="session folders or names under results/")
    release.add_argument(
        "--changelog", help="what changed and why (required once a version exists)"
    )
    release.add_argument("--title", help="README title (default: dlperf report <version>)")
    release.add_argument(
        "--accept-remeasured",
        action="store_true",
        help="publish repeats whose raw logs now measure differently from their records",
    )
    release.add_argument(
        "--no-flops", action="store_true", help="do not count model FLOPs (no MFU column)"
    )
    release.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="FILE",
        help="published figures (dlperf import file) beside the measured cases (repeatable)",
    )
    common(release)
    release.set_defaults(func=cmd_release)

    audit = sub.add_parser("audit", help="recompute a released version from its raw logs")
    audit.add_argument("versions", nargs="*", help="reports/vX.Y folders or version names")
    audit.add_argument("--all", action="store_true", help="every version under --reports")
    audit.add_argument(
        "--images-lock", help="fail when this images.lock pins another digest for an image"
    )
    audit.add_argument(
        "--kit",
        choices=("current", "released"),
        default="current",
        help="audit with this checkout's kit, or with the kit commit that released the version "
        "(a temporary git worktree: later renderer changes do not count as differences)",
    )
    audit.add_argument(
        "--cached-flops",
        action="store_true",
        help="trust the manifest's model FLOPs even where torch could recount them",
    )
    common(audit)
    audit.set_defaults(func=cmd_audit)

    compare = sub.add_parser("compare", help="two versions or sessions, case by case")
    compare.add_argument("a", help="baseline: a version or a session")
    compare.add_argument("b", help="the other version or session")
    compare.add_argument(
        "--alpha",
        type=bounded_float(0, 1, low_open=True, high_open=True),
        default=0.05,
        help="significance level of the Mann-Whitney U test, 0 < alpha < 1 (default 0.05)",
    )
    compare.add_argument("--json", action="store_true")
    common(compare)
    compare.set_defaults(func=cmd_compare)

    factor = sub.add_parser(
        "factor", help="ratio B/A of one factor's two values over otherwise-equal cases"
    )
    factor.add_argument(
        "inputs",
        nargs="+",
        help="versions, sessions or import files (pooled, never a median across device models)",
    )
    factor.add_argument(
        "--factor",
        required=True,
        help="precision, dataset, batch, device, model, framework, xla, topology, variant, "
        "source, hardware, machine",
    )
    factor.add_argument("--a", required=True, help="the baseline value (e.g. fp32)")
    factor.add_argument("--b", required=True, help="the other value (e.g. amp)")
    factor.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="FACTOR=VALUE",
        help="keep only cases with this value (repeatable): topology=1n1g, device=V100",
    )
    factor.add_argument(
        "--metric",
        choices=("throughput", "speedup", "efficiency"),
        default="throughput",
        help="the ratio of median throughputs, of speedups or of efficiencies",
    )
    factor.add_argument("--by", help="median rows per value of this factor too (e.g. model)")
    factor.add_argument("--json", action="store_true")
    common(factor)
    factor.set_defaults(func=cmd_factor)

    imported = sub.add_parser(
        "import",
        help="published figures (CSV or YAML, docs/reports.md): checked, with their derived "
        "speedups and efficiencies; then give the file to report, factor or compare",
    )
    imported.add_argument("file", help="an import file: .csv, .yaml or .yml")
    imported.add_argument("--out", help="report folder (default: <file>-report beside it)")
    imported.add_argument("--title")
    imported.add_argument("--json", action="store_true", help="the derived rows as JSON")
    imported.set_defaults(func=cmd_import)

    probe = sub.add_parser(
        "probe", help="all-reduce bandwidth probe into a session (for scaling bounds)"
    )
    probe.add_argument(
        "--session",
        required=True,
        type=session_name,
        help="session name under --results (created if new)",
    )
    probe.add_argument(
        "--topology", action="append", required=True, help="e.g. 1n2g, 2n16g (repeatable)"
    )
    probe.add_argument(
        "--sizes-mb",
        type=bounded_float_list(PROBE_MIN_MB, PROBE_MAX_MB, unit="MB"),
        default="1,16,64",
        help="message sizes in MB, comma-separated",
    )
    probe.add_argument(
        "--iters", type=bounded_int(1, PROBE_MAX_ITERS), default=10, help="timed all-reduces"
    )
    probe.add_argument("--python", help="interpreter with torch (default: the PyTorch venv)")
    probe.add_argument("--runtime", default="local")
    probe.add_argument("--inventory")
    common(probe)
    probe.set_defaults(func=cmd_probe)
