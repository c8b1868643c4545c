"""The door: a repeat's files in, a verified repeat or a named refusal out.

Every consumer of a finished repeat (``dlperf run``'s closing table, ``report``, ``release``,
``audit``, ``compare``, ``factor``, ``import-logs``) gets it from :func:`verify_repeat`, whether
the files come from a session folder (:mod:`driver.verify.folder`) or from a release archive
(``driver.release.dataset``). In order, a repeat must have:

1. a case definition that loads and whose id is the folder it sits in;
2. a record of a known schema, of that case;
3. every log the record names, with the SHA-256 the record holds for it (schema 2), and no
   ``node*.log`` the record does not name;
4. logs that give a measurement with the record's parser (``measure_logs``: parser, world
   size, window) that passes every plausibility check (``driver.model.plausible``:
   ``measure_checked``, which the runner applies before it writes a record);
5. a record that agrees with that measurement (the straggler facts included: who was slowest,
   re-derived from the logs; a record written before those fields has none to compare), with
   rank 0's header and with every rank's fingerprint facts (``fingerprints``, schema 3: what
   the seal takes from the record), unless the caller accepts re-measured repeats: then the
   logs win (never over a failed check above).

A refusal is a :class:`RepeatRefused` naming the file at fault and, where there is one, the fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from driver.files import sha256_bytes
from driver.model.case import Case
from driver.model.hardware import UNKNOWN, Hardware, HardwareError, display_labels
from driver.model.measure import RepeatMeasurement
from driver.model.plausible import Implausible, measure_checked
from driver.model.results import NODE_LOG, RECORD, RecordError, RepeatRecord, rank_fingerprints
from driver.parsers.base import LogParseError, ParsedLog
from driver.verify.hardware import AttestationError, load_attestation, machine_of

CASE_FILE = "case.json"


class RepeatRefused(ValueError):
    """A repeat that cannot be trusted; the message names the file and the reason."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


@dataclass(frozen=True)
class RepeatFiles:
    """One repeat folder's content, wherever it was read from.

    ``folder`` names it in messages (a path, or an archive member folder); ``case_dir`` is the
    case id its location claims (the path between ``cases/`` and ``repeat-NN``)."""

    folder: str
    case_dir: str
    case_json: bytes | None
    files: Mapping[str, bytes]  # file name -> bytes (record.json, node logs, telemetry, ...)
    attestation: bytes | None = None  # the session's hardware.json, if it has one
    attestation_path: str = ""

    def path(self, name: str) -> str:
        return f"{self.folder}/{name}"

    @property
    def case_path(self) -> str:
        return f"{self.folder.rsplit('/', 1)[0]}/{CASE_FILE}"


@dataclass(frozen=True)
class VerifiedRepeat:
    """A repeat the door let through: what every reader of a finished repeat gets."""

    case: Case
    record: RepeatRecord  # with the measurement and header its logs give
    # the record as its file holds it (the straggler facts a record written before them lacks
    # filled from the logs: ``RepeatMeasurement.filled_from``)
    written: RepeatRecord
    parsed: ParsedLog
    logs: dict[str, str] = field(repr=False)
    # The machine it ran on (driver/verify/hardware.py) and the label tables show for it: the
    # label computed from its facts, set apart by its key's digest where two machines of the
    # same readers' set share one (``with_machine_labels``).
    fingerprint: str = ""
    hardware: Hardware = UNKNOWN
    source: RepeatFiles | None = field(default=None, repr=False)  # the files it came from

    @property
    def folder(self) -> str:
        """Where it was read from (a path, or an archive member folder)."""
        return self.source.folder if self.source else ""

    @property
    def measurement(self) -> RepeatMeasurement | None:
        """The measurement its logs give (the door lets no finished repeat through without)."""
        return self.record.measurement

    @property
    def recorded(self) -> RepeatMeasurement | None:
        """The measurement the record itself held."""
        return self.written.measurement

    @property
    def header_differs(self) -> bool:
        """The record's header is not rank 0's header in the logs (as a record holds it), or
        the ranks' fingerprint facts it holds are not theirs."""
        rank0 = json.loads(json.dumps(self.record.header, default=str))
        return rank0 != self.written.header or self.fingerprints_differ

    @property
    def fingerprints_differ(self) -> bool:
        """The record holds other ranks' fingerprint facts than the logs give (a record written
        before it held them has none to compare)."""
        written = self.written.fingerprints
        return written is not None and written != self.record.fingerprints

    @property
    def remeasured(self) -> bool:
        """The logs give another measurement or header than the record says."""
        return self.recorded != self.record.measurement or self.header_differs


@dataclass(frozen=True)
class Unfinished:
    """A repeat whose record says it did not finish ok: its verdict is its record's."""

    case: Case
    record: RepeatRecord


def load_case(files: RepeatFiles) -> Case:
    if files.case_json is None:
        raise RepeatRefused(files.case_path, "missing (the repeat's case definition)")
    try:
        data = json.loads(files.case_json)
        if not isinstance(data, dict):
            raise ValueError("a JSON object is expected")
        case = Case.from_dict(data)
    except (ValueError, TypeError, KeyError) as error:
        raise RepeatRefused(files.case_path, f"unreadable case definition ({error})") from None
    if case.id != files.case_dir:
        raise RepeatRefused(
            files.case_path,
            f"defines case {case.id!r} but sits in the folder of {files.case_dir!r} (edited or "
            "moved; a case's folder is its id)",
        )
    return case


def load_repeat_record(files: RepeatFiles, case: Case) -> RepeatRecord:
    path = files.path(RECORD)
    if RECORD not in files.files:
        raise RepeatRefused(
            path, "missing (a repeat folder without its record: crashed, or deleted)"
        )
    try:
        record = RepeatRecord.parse(files.files[RECORD], path)
    except RecordError as error:
        raise RepeatRefused(path, str(error).removeprefix(f"{path}: ")) from None
    if record.case_id != case.id:
        raise RepeatRefused(path, f"a record of case {record.case_id!r} in the folder of {case.id}")
    return record


def check_logs(files: RepeatFiles, record: RepeatRecord) -> dict[str, str]:
    """The named logs, each as the record's SHA-256 says it was (schema 2), as text."""
    path = files.path(RECORD)
    stray = sorted(n for n in files.files if NODE_LOG.match(n) and n not in record.logs)
    if stray:
        raise RepeatRefused(
            files.path(stray[0]),
            f"a node log {path} does not name (logs: {', '.join(record.logs) or 'none'}): added "
            "after the run; remove it, or re-run the repeat",
        )
    if record.schema_ >= 2:
        unlisted = sorted(set(record.logs) ^ set(record.log_sha256))
        if unlisted:
            raise RepeatRefused(
                path,
                f"log_sha256 and logs disagree on {', '.join(unlisted)} (every log needs its "
                "checksum)",
            )
    texts: dict[str, str] = {}
    for name in record.logs:
        if "/" in name or name in ("", ".", "..") or name == RECORD:
            raise RepeatRefused(path, f"logs names {name!r}, not a log file of this folder")
        if name not in files.files:
            raise RepeatRefused(files.path(name), f"missing (named in {path})")
        data = files.files[name]
        expected = record.log_sha256.get(name)
        if expected is not None and sha256_bytes(data) != expected:
            raise RepeatRefused(
                files.path(name), f"changed since {path} was written (sha256 differs)"
            )
        texts[name] = data.decode("utf-8", errors="replace")  # as the runner reads logs
    return texts


def _measured(
    files: RepeatFiles, case: Case, record: RepeatRecord, texts: dict[str, str]
) -> tuple[RepeatMeasurement, ParsedLog]:
    """What the logs measure with the record's parser and batch, checked as plausible."""
    path = files.path(RECORD)
    try:
        return measure_checked(case, record.parser, texts, record.batch_size)
    except LogParseError as error:
        raise RepeatRefused(
            files.folder,
            f"the logs ({', '.join(record.logs) or 'none'}) give no measurement with the parser "
            f"{path} names ({record.parser!r}): {error}",
        ) from None
    except Implausible as error:
        raise RepeatRefused(
            files.folder,
            f"the logs ({', '.join(record.logs)}) are not a plausible measurement with the "
            f"batch_size {record.batch_size} of {path}: {error}",
        ) from None


def _machine(files: RepeatFiles, parsed: ParsedLog) -> Hardware:
    """The machine the repeat ran on: rank 0's header, with the session's attestation."""
    attestation = None
    if files.attestation is not None:
        try:
            attestation = load_attestation(files.attestation, files.attestation_path)
        except AttestationError as error:
            raise RepeatRefused(files.attestation_path, str(error).split(": ", 1)[1]) from None
    try:
        return machine_of(parsed.header, attestation)
    except HardwareError as error:
        raise RepeatRefused(files.folder, f"rank 0's header: {error}") from None


def _check_as_recorded(verified: VerifiedRepeat, measurement: RepeatMeasurement, path: str) -> None:
    """The record holds what its logs measure, and the ranks' headers and fingerprints."""
    record = verified.written
    if measurement != record.measurement:
        # Field by field (a dump leaves out straggler facts that are None, so one side's
        # dump may lack a key the other holds).
        name = next(
            name
            for name in type(measurement).model_fields
            if getattr(record.measurement, name, None) != getattr(measurement, name)
        )
        raise RepeatRefused(
            path,
            f"measurement.{name} is {getattr(record.measurement, name, None)!r} in the "
            f"record but {getattr(measurement, name)!r} from the logs (the logs win: re-run, "
            "or publish with --accept-remeasured)",
        )
    if verified.fingerprints_differ:
        raise RepeatRefused(path, "fingerprints differ from the ranks' headers in the logs")
    if verified.header_differs:
        raise RepeatRefused(path, "header differs from rank 0's header in the logs")


def verify_repeat(
    files: RepeatFiles, *, accept_remeasured: bool = False
) -> VerifiedRepeat | Unfinished:
    """The repeat of ``files``, verified as the module docstring says; raises RepeatRefused."""
    case = load_case(files)
    record = load_repeat_record(files, case)
    if not record.ok:
        return Unfinished(case, record)
    texts = check_logs(files, record)
    measurement, parsed = _measured(files, case, record, texts)
    machine = _machine(files, parsed)
    if record.measurement is not None:
        # A record written before the straggler facts existed claims nothing about them: they
        # come from the logs, and the record is compared on what it does hold.
        record = record.model_copy(
            update={"measurement": record.measurement.filled_from(measurement)}
        )
    verified = VerifiedRepeat(
        case=case,
        record=record.model_copy(
            update={
                "measurement": measurement,
                "header": parsed.header,
                "fingerprints": rank_fingerprints(parsed),
            }
        ),
        written=record,
        parsed=parsed,
        logs=texts,
        fingerprint=machine.label,
        hardware=machine,
        source=files,
    )
    if not accept_remeasured:
        _check_as_recorded(verified, measurement, files.path(RECORD))
    return verified


def with_machine_labels(repeats: Sequence[VerifiedRepeat]) -> list[VerifiedRepeat]:
    """``repeats`` with the labels their tables show: each machine's label, with its key's
    digest added where two different machines among them share one (two nodes whose facts
    differ only in what the label does not say), so that no table pools them."""
    shown = display_labels(r.hardware for r in repeats)
    return [replace(r, fingerprint=shown.get(r.hardware.key, r.fingerprint)) for r in repeats]
