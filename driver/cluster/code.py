"""The kit's code on every node: one content-addressed copy per version, sent over SSH.

Images hold frameworks, not the kit: the code a repeat runs (``driver/`` and the framework
folders) is a small tar whose hash names its folder on the node
(``<scratch>/code/<hash>``). A node that already has that hash is not sent anything; the docker
runtime mounts the folder read-only, the process runtime runs in it. The hash goes into the
run's provenance next to the image digest.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
import uuid
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from driver.cluster.remote import Remote, shell
from driver.frameworks.base import REPO_ROOT

MAX_FILE_BYTES = 4 << 20  # data files that big are not code; they never belong in the bundle
SKIP_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
COMPLETE = ".dlperf-complete"


class CodeSyncError(RuntimeError):
    def __init__(self, node: str, detail: str) -> None:
        super().__init__(f"node {node}: copying the kit's code failed: {detail}")
        self.node = node


@dataclass(frozen=True)
class CodeBundle:
    data: bytes  # an uncompressed, deterministic tar
    digest: str  # sha256 of the file list and contents
    files: int

    @property
    def short(self) -> str:
        return self.digest[:16]

    @cached_property
    def compressed(self) -> bytes:
        """The tar gzipped (a quarter of its size): what every node is sent, so that the
        head encrypts a quarter of the bytes per node."""
        return gzip.compress(self.data, compresslevel=6, mtime=0)


def code_folders() -> list[str]:
    from driver.frameworks.base import FRAMEWORKS
    from driver.plugins import load

    load("frameworks")
    folders = {"driver"}
    for name in FRAMEWORKS.names():
        folder = FRAMEWORKS.get(name).folder.split("/")[0]
        folders.add(folder)
    return sorted(folders)


def make_bundle(root: Path = REPO_ROOT, folders: list[str] | None = None) -> CodeBundle:
    paths: list[Path] = []
    for folder in folders or code_folders():
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            relative = path.relative_to(root)
            if any(p in SKIP_PARTS or p.startswith(".") for p in relative.parts):
                continue
            if path.is_file() and path.suffix != ".pyc" and path.stat().st_size <= MAX_FILE_BYTES:
                paths.append(path)
    digest = hashlib.sha256()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in paths:
            relative = str(path.relative_to(root))
            content = path.read_bytes()
            digest.update(relative.encode() + b"\0" + hashlib.sha256(content).digest())
            info = tarfile.TarInfo(relative)
            info.size = len(content)
            info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            info.mtime = 0  # deterministic bytes: the digest alone names the content
            tar.addfile(info, io.BytesIO(content))
    return CodeBundle(buffer.getvalue(), digest.hexdigest(), len(paths))


def code_dir(scratch_dir: str, bundle: CodeBundle) -> str:
    return f"{scratch_dir.rstrip('/')}/code/{bundle.short}"


def sync_code(remote: Remote, bundle: CodeBundle) -> str:
    """The node's folder holding ``bundle``; sent only when the node does not have it yet."""
    target = code_dir(remote.node.scratch_dir, bundle)
    if remote.run(shell(["test", "-e", f"{target}/{COMPLETE}"])).ok:
        return target
    # Unpack beside the target and rename: a node sharing the scratch folder with another (or a
    # second head node) never sees a half-written copy. The gzipped tar goes to the command's
    # stdin: one round trip, where a file transfer and two commands took several.
    staging = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
    script = (
        f"mkdir -p {shell([staging])} && tar -xzf - -C {shell([staging])} && "
        f"touch {shell([staging + '/' + COMPLETE])} && "
        f"{{ mv -T {shell([staging, target])} 2>/dev/null || rm -rf {shell([staging])}; }} && "
        f"test -e {shell([target + '/' + COMPLETE])}"
    )
    code, _, stderr = remote.run_bytes(script, timeout=120, stdin=bundle.compressed)
    if code != 0:
        why = stderr.decode("utf-8", "replace").strip().splitlines()
        raise CodeSyncError(
            remote.node.name, f"unpacking into {target}: {why[-1] if why else f'exit {code}'}"
        )
    return target
