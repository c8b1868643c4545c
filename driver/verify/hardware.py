"""Which machine a repeat ran on: the :class:`~driver.model.hardware.Hardware` the door gives
every repeat, with the label its tables show.

Three sources, in this order:

1. the log header's own fingerprint (``fingerprint`` facts, taken by the benchmark process on
   the node: ``driver/bench/fingerprint.py``), checked against its schema and labelled by the
   kit from the facts (the header's ``hardware`` label is not read), or the hardware a person
   declared for imported logs (``import-logs --hardware``: ``hardware`` alone);
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
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator

from driver.files import write_json
from driver.model.hardware import Hardware, declared_hardware, hardware_of
from driver.schema import StrictModel
from driver.text import FreeText, check_free_text

ATTESTATION = "hardware.json"
ATTESTATION_SCHEMA = 1
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+/()@:-]{0,119}")
MAX_FACTS = 100


class AttestationError(ValueError):
    """A hardware.json the kit cannot use; names the file, the field and the fix."""


class Attestation(StrictModel):
    """A session's machine, stated after the run (its logs carry no fingerprint)."""

    schema_: int = Field(ATTESTATION_SCHEMA, alias="schema")
    label: str
    facts: dict[str, str | int | float | bool | list[str]] = Field(default_factory=dict)
    source: Annotated[FreeText("note"), Field(min_length=10)]  # a note, a log, an inventory

    @field_validator("label")
    @classmethod
    def _label(cls, value: str) -> str:
        if not _LABEL.fullmatch(value):
            raise ValueError(
                "a short label of letters, digits, spaces and ._+/()@:- (e.g. 'AMD EPYC 2c "
                "avx2'), at most 120 characters, no control characters"
            )
        return value

    @field_validator("facts")
    @classmethod
    def _plain_facts(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(value) > MAX_FACTS:
            raise ValueError(f"{len(value)} facts; at most {MAX_FACTS} are kept")
        for key, fact in value.items():
            if not key:
                raise ValueError("KEY=VALUE facts, no empty key")
            try:
                check_free_text(key, "name")
                for text in fact if isinstance(fact, list) else [fact]:
                    if isinstance(text, str):
                        check_free_text(text, "label")
            except ValueError as error:
                raise ValueError(f"fact {key[:40]!r}: {error}") from None
        return value

    @property
    def hardware(self) -> Hardware:
        """The machine as the door knows it: this label, and a key of what was stated (the
        label with the facts: a statement may give no facts beyond its label)."""
        return Hardware(
            label=self.label,
            facts={"label": self.label, "facts": dict(self.facts)},
            origin="attested",
        )


def _problems(error: ValidationError) -> str:
    """Every problem of an attestation on one line: ``field label: ...; field source: ...``."""
    return "; ".join(
        f"field {'.'.join(map(str, e['loc'])).replace('schema_', 'schema')}: "
        + str(e["msg"]).removeprefix("Value error, ")
        for e in error.errors()
    )


def load_attestation(data: bytes, where: str) -> Attestation:
    try:
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("a JSON object is expected")
        if raw.get("schema") != ATTESTATION_SCHEMA:
            raise ValueError(f"schema must be {ATTESTATION_SCHEMA}")
        return Attestation.model_validate(raw)
    except ValidationError as error:
        raise AttestationError(f"{where}: {_problems(error)}") from None
    except ValueError as error:
        raise AttestationError(f"{where}: not a hardware attestation ({error})") from None


def make_attestation(label: str, facts: dict[str, Any], source: str) -> Attestation:
    """An attestation of what a person states (``dlperf attest-hardware``); an
    :class:`AttestationError` naming every bad field on one line otherwise."""
    try:
        return Attestation(label=label, facts=facts, source=source)
    except ValidationError as error:
        raise AttestationError(_problems(error)) from None


def write_attestation(session_root: Path, attestation: Attestation) -> Path:
    return write_json(Path(session_root) / ATTESTATION, attestation.model_dump(by_alias=True))


def machine_of(header: dict[str, Any], attestation: Attestation | None) -> Hardware:
    """The machine a repeat ran on (see the module docstring); a malformed fingerprint or
    declared hardware raises ``driver.model.hardware.HardwareError``."""
    if "fingerprint" in header:  # the node's own facts, taken where it ran
        return hardware_of(header)
    declared = header.get("hardware")
    if declared is not None and declared != "":  # import-logs --hardware: as the user stated it
        return declared_hardware(declared)
    if attestation is not None:
        return attestation.hardware
    return hardware_of(header)  # an older header: its device names, or unknown
