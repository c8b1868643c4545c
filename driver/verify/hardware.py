"""Which machine a repeat ran on: the fingerprint label the door gives every repeat.

Three sources, in this order:

1. the log header's own fingerprint (``fingerprint`` facts and their ``hardware`` label, computed
   by the benchmark process on the node: ``driver/bench/fingerprint.py``), or the hardware a
   person declared for imported logs (``import-logs --hardware``: ``hardware`` alone);
2. the session's attestation, ``<session>/hardware.json``, for sessions whose logs predate the
   fingerprint: written after the run by ``dlperf attest-hardware`` from a source that says
   what the machine was (a session note, an inventory), recorded with that source, archived and
   hashed with the session like any raw file, and never used where the logs carry their own;
3. else what an older header holds (``driver.model.hardware.hardware_of``: its device names,
   else "unknown device").
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from driver.files import write_json
from driver.model.hardware import hardware_of
from driver.schema import StrictModel

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

    @field_validator("facts")
    @classmethod
    def _plain_facts(cls, value: dict[str, Any]) -> dict[str, Any]:
        texts = [*value, *(v for v in value.values() if isinstance(v, str))]
        if any(not key for key in value) or any(
            ord(c) < 32 or ord(c) == 127 for text in texts for c in text
        ):
            raise ValueError("KEY=VALUE facts of one line each, no empty key")
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


def fingerprint_label(header: dict[str, Any], attestation: Attestation | None) -> str:
    """The label of the machine a repeat ran on (see the module docstring); a malformed
    fingerprint raises ``driver.model.hardware.HardwareError``."""
    if "fingerprint" in header:  # the node's own, computed where it ran
        return hardware_of(header).label
    declared = header.get("hardware")
    if isinstance(declared, str) and declared:  # import-logs --hardware: as the user stated it
        return declared
    if attestation is not None:
        return attestation.label
    return hardware_of(header).label  # an older header: its device names, or unknown
