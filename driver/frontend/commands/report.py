"""``dlperf report``: tables (Markdown, CSV, JSON) from sessions' raw logs, through the door."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from driver.frontend.args import free_text


def cmd_report(args: argparse.Namespace) -> int:
    """Tables from the sessions' raw logs; a repeat whose record disagrees with its logs, or
    whose record or logs cannot be read, is refused: named, left out, and the exit status is 1."""
    from driver.core.report import write_report
    from driver.core.summary import summarize
    from driver.release.imported import figure_summaries, is_import_file
    from driver.release.release import DEFAULT_REPORTS
    from driver.release.signatures import trust_anchor
    from driver.schema import ConfigError
    from driver.signing import SigningError
    from driver.verify.folder import verify_sessions

    try:  # what a release of the kit's reports folder would trust (one named but missing: refused)
        allowed_signers = trust_anchor(args.allowed_signers, DEFAULT_REPORTS).path
    except SigningError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    sessions, published = [], []
    for root in args.sessions:
        if is_import_file(Path(root)):
            try:  # published figures, beside the measured cases (marked in every table)
                published += figure_summaries(Path(root))
            except ConfigError as error:
                raise SystemExit(f"error: {error}") from None
        elif (Path(root) / "session.json").exists():
            sessions.append(Path(root))
        else:
            raise SystemExit(
                f"{root}: neither a dlperf session folder (no session.json) nor an import file "
                "of published figures (.csv, .yaml)"
            )
    verified = verify_sessions(sessions)
    summaries = summarize(verified.records, published=published)
    seals, seal_problems = _seals(sessions, allowed_signers)
    first = Path(args.sessions[0])
    out = (
        Path(args.out)
        if args.out
        else (
            first / "report"
            if sessions and first == sessions[0]
            else first.with_name(f"{first.stem}-report")
        )
    )
    paths = write_report(
        summaries, out, args.title or "dlperf report", preamble=seals, refused=verified.refused
    )
    print(paths["markdown"].read_text())
    print(f"written: {', '.join(str(p) for p in paths.values())}")
    for problem in verified.refused:
        print(f"refused: {problem}", file=sys.stderr)
    for problem in seal_problems:
        print(f"seal: {problem}", file=sys.stderr)
    return 1 if verified.refused or seal_problems else 0


def _seals(sessions: list[Path], allowed_signers: Path) -> tuple[str, list[str]]:
    """The report's provenance lines (who vouches for each session, what changed since it was
    sealed, Markdown) and the problems (one line each, naming the file)."""
    from driver.model.drift import seal_state
    from driver.model.seal import adopted_files
    from driver.text import markdown_code, markdown_inline

    lines, problems = [], []
    for root in sessions:
        state = seal_state(root, allowed_signers)
        line = f"- {markdown_code(root.name)}: {markdown_inline(state.how)}"  # a signer's name
        adopted = adopted_files(root)  # vouched for on resume (--adopt), not measured
        if adopted:
            line += f"; **{len(adopted)} file(s) adopted, not measured:** " + markdown_inline(
                ", ".join(sorted(adopted)[:5]) + (" ..." if len(adopted) > 5 else "")
            )
        if state.problems:
            shown = "; ".join(markdown_inline(p) for p in state.problems[:5])
            more = f" (and {len(state.problems) - 5} more)" if len(state.problems) > 5 else ""
            line += f". **Changed since sealed:** {shown}{more}"
        lines.append(line)
        problems += [f"{root}/{problem}" for problem in state.problems]
    if not lines:
        return "", problems
    return "Who vouches for each session (its seal, `session-manifest.json`):\n\n" + "\n".join(
        lines
    ), problems


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    report = sub.add_parser("report", help="tables (Markdown, CSV, JSON) from sessions")
    report.add_argument("sessions", nargs="+", help="session folders, and import files")
    report.add_argument("--out")
    report.add_argument("--title", type=free_text("name"))
    report.add_argument(
        "--allowed-signers",
        metavar="FILE",
        help="the keys trusted to sign sessions, git's format (default: as for a release: "
        "$DLPERF_ALLOWED_SIGNERS, ~/.config/dlperf/allowed_signers, the kit's reports folder's)",
    )
    report.set_defaults(func=cmd_report)
