"""What ``dlperf release`` refuses before it publishes a version, each with the fix.

The request itself (the version's name, a changelog where versions exist, ``--title`` and
``--changelog`` as plain text, sessions and import files named once), the config files every
table is computed with, and what the sessions hold as archived: a seal or signature that does
not hold (or a signature required and missing), repeats the door refuses, a case in two
sessions, repeats whose logs measure differently now than their records say (unless accepted),
and a case on several device models. The build and the publishing are
:mod:`driver.release.release`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from driver.model.figures import load_peaks, load_references
from driver.release.compute import Computed
from driver.release.dataset import Dataset, load_dataset, session_of
from driver.release.imported import load_import
from driver.release.signatures import Signatures, describe, session_signatures
from driver.release.versions import VERSION, released_versions
from driver.release.vouching import Vouching, VouchingError, check_required_signatures
from driver.schema import ConfigError
from driver.text import check_plain_text


class ReleaseError(RuntimeError):
    """A release refused: the message names what, where, and the fix."""


@contextmanager
def refused_as_release_error(*kinds: type[Exception], prefix: str = "") -> Iterator[None]:
    """A check's own error (a bad config file, an unvouched signature) as a ReleaseError."""
    try:
        yield
    except kinds as error:
        raise ReleaseError(f"{prefix}{error}") from None


def refuse_a_bad_request(
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
        with refused_as_release_error(ValueError, prefix=f"{option} "):
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


def check_config_files(imports: Sequence[Path], repo_root: Path) -> None:
    """The import files, and the published results and device peaks every table of the
    version is computed with, load."""
    for path in imports:
        with refused_as_release_error(ConfigError, prefix="import file refused: "):
            load_import(path)
    with refused_as_release_error(ConfigError, prefix="config file refused: "):
        load_references(repo_root / "reports" / "references.yaml")
        load_peaks(repo_root / "reports" / "peaks.yaml")


def refuse_sessions_a_release_cannot_hold(collected: list) -> None:
    refused = [line for c in collected for line in c.refused]
    if refused:
        raise ReleaseError(
            "the sessions hold what a release never follows or archives:\n"
            + "\n".join(f"  {line}" for line in refused)
        )
    if not any(c.repeats for c in collected):
        raise ReleaseError("the sessions hold no finished repeat")


def checked_signatures(
    members: dict[str, bytes], collected: list, vouching: Vouching, printer: Callable[[str], None]
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
    with refused_as_release_error(VouchingError):
        check_required_signatures(vouching, signatures.sessions)
    printer(f"signatures {vouching.trust.verdict()}")
    for name, status in signatures.sessions.items():
        printer(f"session {name}: {describe(status)}")
    return signatures


def checked_dataset(members: dict[str, bytes], collected: list) -> Dataset:
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


def remeasured_repeats(computed: Computed, collected: list, accept: bool) -> list[dict[str, Any]]:
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


def cases_on_several_devices(computed: Computed) -> list[tuple[str, list[str]]]:
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
