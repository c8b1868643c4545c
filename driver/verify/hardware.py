"""Which machine a repeat ran on: the fingerprint label the door gives every repeat.

Three sources, in this order:

1. the log header's own fingerprint (``hardware``: the label the benchmark process computed
   on the node, ``driver/bench/fingerprint.py``);
2. the session's attestation, ``<session>/hardware.json``, for sessions whose logs predate the
   fingerprint: written after the run by ``dlperf attest-hardware`` from a source that says
   what the machine was (a session note, an inventory), recorded with that source, archived and
   hashed with the session like any raw file, and never used where the logs carry their own;
3. else a label derived from what the header holds (:func:`legacy_label`): headers that differ
   in any recorded hardware fact get different labels.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from driver.core.measure import StrictModel
from driver.files import write_json

ATTESTATION = "hardware.json"
ATTESTATION_SCHEMA = 1
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+/()@:-]{0,119}")


class AttestationError(ValueError):
    """A hardware.json the kit cannot use; names the file, the field and the fix."""


class Attestation(StrictModel):
    """A session's machine, stated after the run (its logs carry no fingerprint)."""

    schema_: int = Field(ATTESTATION_SCHEMA, alias="schema")
    label: str
    facts: dict[str, str | int | float | bool | list[str]] = Field(default_factory=dict)
    source: str = Field(min_length=10)  # how this is known: a note, a log, an inventory

    @field_validator("label")
    @classmethod
    def _label(cls, value: str) -> str:
        if not _LABEL.fullmatch(value):
            raise ValueError(
                "a short label of letters, digits, spaces and ._+/()@:- (e.g. 'AMD EPYC 2c "
                "avx2'), at most 120 characters, no control characters"
            )
        return value

    @field_validator("source")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("one line of text, no control characters")
        return value


def load_attestation(data: bytes, where: str) -> Attestation:
    try:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("a JSON object is expected")
        if raw.get("schema") != ATTESTATION_SCHEMA:
            raise ValueError(f"schema must be {ATTESTATION_SCHEMA}")
        return Attestation.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"field {'.'.join(map(str, e['loc'])).replace('schema_', 'schema')}: {e['msg']}"
            for e in error.errors()
        )
        raise AttestationError(f"{where}: {problems}") from None
    except ValueError as error:
        raise AttestationError(f"{where}: not a hardware attestation ({error})") from None


def write_attestation(session_root: Path, attestation: Attestation) -> Path:
    return write_json(Path(session_root) / ATTESTATION, attestation.model_dump(by_alias=True))


# Header keys of the logs before the fingerprint that say something about the machine (rank 0's
# header: its host, its devices, and whatever CPU facts a script recorded).
LEGACY_FACTS = ("hostname", "devices", "cpu", "cpu_model", "cores", "physical_cores", "threads")


def legacy_label(header: dict[str, Any]) -> str:
    """A label for a header without a fingerprint: the device model, then the other recorded
    facts (``host vm``); two headers that differ in any of them get different labels."""
    devices = header.get("devices") or []
    name = ", ".join(sorted({str(d) for d in devices})) or "unknown device"
    facts = [
        f"{key} {', '.join(map(str, value)) if isinstance(value, list) else value}"
        for key in LEGACY_FACTS
        if key != "devices" and (value := header.get(key)) not in (None, "", [])
    ]
    return name + (f" ({'; '.join(facts).replace('hostname', 'host')})" if facts else "")


def fingerprint_label(header: dict[str, Any], attestation: Attestation | None) -> str:
    """The label of the machine a repeat ran on (see the module docstring)."""
    own = header.get("hardware")
    if isinstance(own, str) and own:
        return own
    if attestation is not None:
        return attestation.label
    return legacy_label(header)
