"""``dlperf import-logs``: a run the kit did not launch, stored as one repeat of a session.

The run becomes one repeat of a session that ``report``, ``factor`` and ``compare`` read like any
other: each log is stored as ``node<i>.log``, the run header made from the facts first and the
original bytes after it unchanged (their path and SHA-256 are in the record), so the audit
recomputes it from its raw logs like a repeat the kit ran. Its case has the variant ``imported``
and every record says "imported logs, not run by dlperf" (``extra``); the report marks its
figures (i) and footnotes them. The facts and what the logs print of them:
``driver.sources.logfacts``.

A multi-node run of which only worker 0's log was kept is accepted with ``--worker0-only``: node
0's logging ranks stand for the job (samples scaled by world size / ranks logged) and every
figure says "from worker 0's log"::

    dlperf import-logs --source ngc-pytorch --logs rn50_8x8.log --facts facts.yaml --worker0-only

A log whose SHA-256 is already in the session (or given twice) is refused: one run is one
repeat.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from driver.files import sha256_bytes
from driver.parsers._runheader import HEADER_MARK, header_line
from driver.parsers.base import LogParseError
from driver.sources.logfacts import Facts, ImportLogsError, case_and_header, check_printed

IMPORTED = "imported logs, not run by dlperf"
WORKER0 = "from worker 0's log"


def is_import_session(root: Path) -> bool:
    """Whether the session folder ``root`` is one ``import-logs`` made (its ``session.json``
    says so)."""
    try:
        meta = json.loads((Path(root) / "session.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("imported") == IMPORTED


def check_target(session_root: Path, signer: str | None) -> None:
    """``import-logs`` adds to a session of its own, and seals (signs, with ``signer``'s key)
    only what it adds: a session ``dlperf run`` made, or one holding files its seal does not
    (added or changed since; where it signs, any file no seal of the same key holds), is refused
    before anything is imported."""
    from driver.model.warrant import unvouched

    root = Path(session_root)
    if not root.exists():
        return
    if not root.is_dir() or root.is_symlink():
        raise ImportLogsError(f"{root}: not a session folder (a file or a symlink)")
    if any(root.iterdir()) and not is_import_session(root):
        raise ImportLogsError(
            f"{root}: not a session of `dlperf import-logs` (its session.json does not say "
            f"{IMPORTED!r}); import-logs adds only to its own sessions: import into another "
            "--session"
        )
    foreign = [f"{rel}: {what}" for rel, what in unvouched(root, None, signer)]
    if foreign:
        raise ImportLogsError(
            f"{root}: holds files its seal does not vouch for, which sealing it again would "
            "sign: "
            + "; ".join(foreign[:10])
            + (f"; and {len(foreign) - 10} more" if len(foreign) > 10 else "")
            + "; import into another --session"
        )


def session_log_hashes(session_root: Path) -> dict[str, str]:
    """SHA-256 of every log already imported into the session -> which repeat holds it."""
    from driver.model.results import RecordError, Session

    if not (session_root / "cases").is_dir():
        return {}
    held: dict[str, str] = {}
    try:
        for case, record, _folder in Session(session_root).records(include_failed=True):
            for origin in record.extra.get("imported_from", []):
                if isinstance(origin, dict) and isinstance(origin.get("sha256"), str):
                    held[origin["sha256"]] = (
                        f"{session_root}: {case.id} repeat {record.repeat} (imported from "
                        f"{origin.get('file')})"
                    )
    except (RecordError, ValueError, KeyError, OSError) as error:
        raise ImportLogsError(
            f"{session_root}: cannot read the session's records to check that no log is "
            f"imported twice ({error}); fix or remove that record, or import into another "
            "session"
        ) from None
    return held


def check_new_logs(logs: list[Path], hashes: list[str], held: dict[str, str]) -> None:
    """A log is one run: the same bytes twice (in this run or already in the session) would
    count one run as two repeats or two nodes."""
    seen: dict[str, Path] = {}
    for path, digest in zip(logs, hashes, strict=True):
        if digest in held:
            raise ImportLogsError(
                f"{path}: this log (SHA-256 {digest[:16]}...) is already imported, as "
                f"{held[digest]}; a log is one run: import it once"
            )
        if digest in seen and seen[digest].resolve() == path.resolve():
            raise ImportLogsError(
                f"{path}: given twice; each node's and each run's log is imported once"
            )
        if digest in seen:
            raise ImportLogsError(
                f"{path}: the same bytes as {seen[digest]} (SHA-256 {digest[:16]}...); each "
                "node's and each run's log is imported once: give the other log"
            )
        seen[digest] = path


def _foreign_log(path: Path) -> bytes:
    """A log's bytes, refused where it is one the kit ran (it has a run header)."""
    data = path.read_bytes()
    if HEADER_MARK.encode() in data:
        raise ImportLogsError(
            f"{path}: already has a {HEADER_MARK.strip()} run header (a log the kit ran): "
            "copy its repeat folder into a session instead of importing it"
        )
    return data


def _imported_record(
    case_id: str,
    repeat: int,
    facts: Facts,
    stored: dict[str, bytes],
    measured: tuple[str, Any, Any],
    origins: list[dict[str, str]],
) -> Any:
    """The imported run's record: ``measured`` is the parser's name, its measurement and the
    parsed logs; ``origins`` where each stored log came from."""
    from driver.model.results import RepeatRecord, rank_fingerprints
    from driver.runtimes.base import Verdict

    parser, measurement, parsed = measured
    note = IMPORTED + (f", every figure {WORKER0}" if facts.worker0_only else "")
    now = time.time()
    return RepeatRecord(
        case_id=case_id,
        repeat=repeat,
        verdict=Verdict.OK.value,
        batch_size=facts.batch,
        started_at=now,  # when it was imported; the run's own times are in its logs
        finished_at=now,
        commands=[],
        exit_codes={},
        logs=sorted(stored),
        log_sha256={n: sha256_bytes(d) for n, d in sorted(stored.items())},
        parser=parser,
        measurement=measurement,
        header=parsed.header,
        fingerprints=rank_fingerprints(parsed),
        detail="",
        runtime="imported",
        extra={
            "imported": note,
            "imported_from": origins,
            "worker0_only": facts.worker0_only,
            "facts": facts.model_dump(),
        },
    )


def _through_the_door(
    case: Any, folder: Path, stored: dict[str, bytes], record: Any, logs: list[Path]
) -> None:
    """The repeat as it will be stored (its logs and record) through the checks every reader
    of a repeat applies; refused with the logs named."""
    from driver.model.results import RECORD
    from driver.verify.repeat import RepeatFiles, RepeatRefused, verify_repeat

    record_bytes = (json.dumps(record.to_dict(), indent=2, sort_keys=True) + "\n").encode()
    try:
        verify_repeat(
            RepeatFiles(
                folder=str(folder),
                case_dir=case.id,
                case_json=json.dumps(case.to_dict()).encode(),
                files={**stored, RECORD: record_bytes},
            )
        )
    except RepeatRefused as refusal:
        raise ImportLogsError(f"{', '.join(map(str, logs))}: refused: {refusal}") from None


def import_run(session_root: Path, source_name: str, facts: Facts, logs: list[Path]) -> Any:
    """Store one run's logs as the next repeat of its case in the session; its record."""
    from dataclasses import replace

    from driver.files import write_bytes
    from driver.model.plausible import Implausible
    from driver.model.results import Session
    from driver.verify.repeat import measure_checked

    case, header, parser = case_and_header(source_name, facts)
    expected = 1 if facts.worker0_only else case.topology.nodes
    if len(logs) != expected:
        raise ImportLogsError(
            f"{case.topology.label} needs {expected} log(s) (one per node, in node order"
            f"{'; worker 0 only' if facts.worker0_only else ''}), got {len(logs)}: "
            + ", ".join(map(str, logs))
        )
    texts = [_foreign_log(path) for path in logs]
    hashes = [sha256_bytes(data) for data in texts]
    check_new_logs(logs, hashes, session_log_hashes(session_root))
    check_printed(facts, case.topology.world_size, logs, texts)
    stored = {}  # node log name -> (its bytes: the header made from the facts, then the original)
    origins = []
    for rank, (path, data, digest) in enumerate(zip(logs, texts, hashes, strict=True)):
        name = f"node{rank}.log"
        line = header_line(replace(header, node_rank=rank)) + "\n"
        stored[name] = line.encode() + data
        origins.append({"file": str(path.resolve()), "sha256": digest, "as": name})
    try:  # measured, with the door's checks, before anything is written to the session
        texts_read = {name: data.decode(errors="replace") for name, data in stored.items()}
        measurement, parsed = measure_checked(case, parser, texts_read, facts.batch)
    except (LogParseError, Implausible) as error:
        raise ImportLogsError(
            f"{', '.join(map(str, logs))}: parser {parser} cannot measure it with these facts: "
            f"{error}"
        ) from None
    case_dir = Session(session_root).case_dir(case)
    done = [int(p.name[len("repeat-") :]) for p in case_dir.glob("repeat-[0-9][0-9]")]
    repeat = max(done, default=0) + 1
    measured = (parser, measurement, parsed)
    record = _imported_record(case.id, repeat, facts, stored, measured, origins)
    # The repeat as it will be stored, through the door every reader of it goes through.
    _through_the_door(case, case_dir / f"repeat-{repeat:02d}", stored, record, logs)
    session = Session.open(session_root, {"imported": IMPORTED})
    session.save_case(case)
    directory = session.fresh_repeat_dir(case, repeat)
    for name, data in stored.items():
        write_bytes(directory / name, data)
    session.write_record(directory, record)
    return record
