"""The release manifest: what a version is made of, and the parts an audit can recompute.

``manifest.json`` holds the schema version, the kit's commit and dirty flag at release, image
digests (``images.lock``), the config files and their SHA-256 (copies under ``config/``), the
provenance of every session and node, the SHA-256 of every raw file, the archives', the plots',
the model FLOPs (cached so the audit needs no torch) and the probes. :func:`derived_parts` is
the part recomputed from the raw data, by the release and again by the audit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from driver.core.released import KNOWN_RESULTS_SCHEMAS
from driver.release.compute import Computed
from driver.release.dataset import Dataset, session_of
from driver.release.readme import README_LAYOUTS
from driver.schema import ConfigError, StrictModel, check_finite, describe_error, one_of, text

MANIFEST = "manifest.json"
MANIFEST_SCHEMA = 1
KIND = "dlperf-release"
CONFIG_DIR = "config"
IMAGES_LOCK = "images.lock"
BUILT_RECORDS = ".dlperf/images-built.json"  # driver.images.build's records, beside the lock
BUILT_COPY = "images-built.json"  # its copy in config/ (".dlperf/" is git-ignored)
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class RawFile(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    sha256: text(r"[0-9a-f]{64}", "a SHA-256 (64 hex digits)")


class SignatureStatus(StrictModel):
    """Who signed a version or a session (driver.release.signatures), as the release found."""

    status: Annotated[Any, one_of("signed", "unsigned")]
    principal: str | None = None  # the allowed-signers name of the key, where signed
    key: str | None = None  # ``ED25519 key SHA256:...``, where signed
    reason: str | None = None  # why unsigned
    # a session's files its seal records as adopted (``dlperf run --adopt``: vouched for by a
    # person, not measured); absent where none are, and in versions before the kit said so
    adopted: list[str] | None = None


class ManifestSignatures(StrictModel):
    version: SignatureStatus
    sessions: dict[str, SignatureStatus]
    # which allowed-signers file the release trusted: the reports folder's own ("own") or one
    # from outside it ("outside"); absent in versions released before the kit said so
    trust: Annotated[Any, one_of("own", "outside")] | None = None


class Manifest(StrictModel):
    """The shape of ``manifest.json`` (what the release writes; the audit checks it first)."""

    schema_: Annotated[Any, one_of(MANIFEST_SCHEMA)] = Field(alias="schema")
    kind: Annotated[Any, one_of(KIND)]
    version: str
    title: str
    released_at: str
    changelog: str
    previous: str | None
    kit: dict[str, Any]
    release_tool: dict[str, Any]
    sessions: list[Any]
    images: dict[str, Any]
    config_files: dict[str, Any]
    nodes: dict[str, Any]
    raw_files: dict[str, RawFile]
    archives: dict[str, Any]
    files: dict[str, Any]
    model_costs: dict[str, Any]
    probes: list[Any]
    excluded_repeats: list[Any]
    remeasured: list[Any]
    changes: dict[str, Any]
    counts: dict[str, Any]
    # README layout (driver.release.readme): absent in the first versions (layout 1)
    readme_layout: Annotated[Any, one_of(*README_LAYOUTS)] = 1
    # results.json's schema (driver.release.results): absent before it had its own (1)
    results_schema: Annotated[Any, one_of(*KNOWN_RESULTS_SCHEMAS)] = 1
    # Layout 5 on (absent before): who signed the version and each session
    # (driver.release.signatures), and the reason each superlinear case was released with.
    signatures: ManifestSignatures | None = None
    superlinear: dict[str, str] | None = None


FIELDS = tuple(info.alias or name for name, info in Manifest.model_fields.items())


def validate(manifest: Any) -> list[str]:
    """Schema problems of a manifest ([] when it is well formed)."""
    if not isinstance(manifest, dict):
        return ["the manifest is not a JSON object"]
    try:
        check_finite(MANIFEST, manifest)
        Manifest.model_validate(manifest)
    except ConfigError as error:
        return [f"field {error.field_path!r}: {error.message}"]
    except ValidationError as error:
        problems = []
        for detail in error.errors():
            where, message = describe_error(Manifest, detail)
            if detail["type"] == "missing":
                problems.append(f"field {where!r} is missing")
            elif detail["type"] == "extra_forbidden":
                problems.append(f"unknown field {where!r}")
            else:
                problems.append(f"field {where!r}: {message}")
        return problems
    return []


# --------------------------------------------------------------------------------------------
# images.lock: read by the one lock reader (driver.images.lock)


def read_images_lock(path: Path) -> dict[str, str]:
    """repository:tag -> digest of the lock's resolved pins (``driver.images.lock``)."""
    from driver.images.lock import pinned_digests

    return pinned_digests(path)


def digests_in(value: Any) -> set[str]:
    """Every image digest mentioned anywhere in a record's ``extra`` (runtimes put them there)."""
    if isinstance(value, str):
        return set(DIGEST.findall(value))
    if isinstance(value, dict):
        return set().union(set(), *(digests_in(v) for v in value.values()))
    if isinstance(value, (list, tuple)):
        return set().union(set(), *(digests_in(v) for v in value))
    return set()


def images_part(version_dir: Path, computed: Computed) -> dict[str, Any]:
    """The pinned digests (the version's copy of images.lock), the digests the repeats ran
    (anywhere in their records' ``extra``: image IDs, provenance), and those of them that
    neither the lock nor the build records (``.dlperf/images-built.json``) list."""
    lock = version_dir / CONFIG_DIR / IMAGES_LOCK
    built = version_dir / CONFIG_DIR / BUILT_COPY
    digests = read_images_lock(lock) if lock.exists() else {}
    built_digests = (
        set(DIGEST.findall(built.read_text(errors="replace"))) if built.exists() else set()
    )
    ran = sorted(set().union(set(), *(digests_in(r.written.extra) for r in computed.repeats)))
    known = set(digests.values()) | built_digests
    part: dict[str, Any] = {
        "lock_file": f"{CONFIG_DIR}/{IMAGES_LOCK}" if lock.exists() else None,
        "built_file": f"{CONFIG_DIR}/{BUILT_COPY}" if built.exists() else None,
        "digests": digests,
        "ran": ran,
        "unlisted": [d for d in ran if d not in known],
    }
    if not lock.exists():
        part["note"] = "no images.lock at release"
    return part


# --------------------------------------------------------------------------------------------
# Config files


def config_sources(
    repo_root: Path, sessions: Iterable[dict[str, Any]], frameworks: Iterable[str]
) -> list[Path]:
    """The config files a release copies: references, peaks, images.lock, the driver's pins,
    the case matrices the sessions name, the frameworks' CPU requirements."""
    from driver.frameworks.base import FRAMEWORKS
    from driver.plugins import load

    load("frameworks")
    wanted = [
        repo_root / "reports" / "references.yaml",
        repo_root / "reports" / "peaks.yaml",
        repo_root / IMAGES_LOCK,
        repo_root / BUILT_RECORDS,
        repo_root / "pyproject.toml",
    ]
    for meta in sessions:
        for matrix in meta.get("matrix_files", []) or []:
            path = Path(matrix)
            wanted.append(path if path.is_absolute() else repo_root / path)
    for name in sorted(set(frameworks)):
        if name in FRAMEWORKS:
            wanted.append(FRAMEWORKS.get(name).cpu_requirements)
    seen: list[Path] = []
    for path in wanted:
        if path.is_file() and path.resolve() not in [p.resolve() for p in seen]:
            seen.append(path)
    return seen


def config_destination(repo_root: Path, source: Path) -> str:
    try:
        rel = source.resolve().relative_to(repo_root.resolve())
    except ValueError:
        rel = Path("external") / source.name
    if rel.as_posix() == BUILT_RECORDS:
        rel = Path(BUILT_COPY)
    return f"{CONFIG_DIR}/{rel.as_posix()}"


# --------------------------------------------------------------------------------------------
# Parts recomputed from the raw data


def _sessions_part(dataset: Dataset) -> list[dict[str, Any]]:
    out = []
    for name, meta in sorted(dataset.sessions.items()):
        members = [m for m in dataset.members if m.startswith(name + "/")]
        out.append(
            {
                "name": name,
                "archive": f"raw/{name}.tar.gz",
                "files": len(members),
                "created": meta.get("created"),
                "head_node": meta.get("head_node"),
                "profile": meta.get("profile"),
                "runtime": meta.get("runtime"),
                "kit": meta.get("kit"),
                "argv": meta.get("argv"),
                "provenance_files": sorted(
                    m[len(name) + 1 :]
                    for m in members
                    if (m.count("/") == 1 and not m.endswith("/session.json"))
                    or m.startswith(f"{name}/provenance/")
                ),
            }
        )
    return out


def _nodes_part(computed: Computed) -> dict[str, Any]:
    nodes: dict[str, dict[str, Any]] = {}
    for repeat in computed.repeats:
        for header in repeat.parsed.rank_headers():
            host = str(header.get("hostname") or f"{session_of(repeat)}:node?")
            node = nodes.setdefault(
                host,
                {"devices": [], "versions": {}, "frameworks": [], "node_ranks": [], "ranks": 0},
            )
            for device in header.get("devices", []) or []:
                if device not in node["devices"]:
                    node["devices"].append(str(device))
            for key, value in (header.get("versions") or {}).items():
                seen = node["versions"].get(key)
                if seen is None:
                    node["versions"][key] = str(value)
                elif str(value) not in seen.split(" | "):
                    node["versions"][key] = f"{seen} | {value}"
            for field, key in (("frameworks", "framework"), ("node_ranks", "node_rank")):
                value = header.get(key)
                if value is not None and value not in node[field]:
                    node[field].append(value)
            node["ranks"] += 1
    for node in nodes.values():
        node["devices"].sort()
        node["frameworks"].sort(key=str)
        node["node_ranks"].sort(key=str)
    return dict(sorted(nodes.items()))


def _probes_part(dataset: Dataset) -> list[dict[str, Any]]:
    keys = ("session", "topology", "backend", "world_size", "nodes", "device", "torch")
    return [
        {**{k: p.get(k) for k in keys}, "log": p["log"], "busbw_gbps": p["busbw_gbps"],
         "busbw_at_bytes": p["busbw_at_bytes"], "sizes": p["sizes"]}
        for p in sorted(dataset.probes, key=lambda p: (p["session"], p["topology"]))
    ]  # fmt: skip


def derived_parts(dataset: Dataset, computed: Computed, version_dir: Path) -> dict[str, Any]:
    """The manifest fields that follow from the raw data and the config copies alone."""
    return {
        "sessions": _sessions_part(dataset),
        "nodes": _nodes_part(computed),
        "probes": _probes_part(dataset),
        "images": images_part(version_dir, computed),
        "counts": {
            "sessions": len(dataset.sessions),
            "cases": len(computed.summaries),
            "repeats": sum(1 for r in computed.repeats if r.measurement is not None),
            "raw_files": len(dataset.members),
        },
    }


def manifest_text(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"
