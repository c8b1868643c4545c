"""The kit's code on every node: one content-addressed copy per version, shipped over SFTP.

Images hold frameworks, not the kit: the code a repeat runs (``driver/`` and the framework
folders) is a small tar whose hash names its folder on the node
(``<scratch>/code/<hash>``). A node that already has that hash is not sent anything; the docker
runtime mounts the folder read-only, the process runtime runs in it. The hash goes into the
run's provenance next to the image digest.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import tempfile
import uuid
from dataclasses import dataclass
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


def code_folders() -> list[str]:
    from driver.plugins import load_all
    from driver.registry import FRAMEWORKS

    load_all()
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
    # second head node) never sees a half-written copy.
    staging = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
    upload = f"{staging}.tar"
    made = remote.run_argv(["mkdir", "-p", staging])
    if not made.ok:
        raise CodeSyncError(remote.node.name, f"mkdir {staging}: {made.why()}")
    with tempfile.NamedTemporaryFile(suffix=".tar") as local:
        local.write(bundle.data)
        local.flush()
        remote.put(Path(local.name), upload)
    script = (
        f"tar -xf {shell([upload])} -C {shell([staging])} && rm -f {shell([upload])} && "
        f"touch {shell([staging + '/' + COMPLETE])} && "
        f"{{ mv -T {shell([staging, target])} 2>/dev/null || rm -rf {shell([staging])}; }} && "
        f"test -e {shell([target + '/' + COMPLETE])}"
    )
    result = remote.run(script, timeout=120)
    if not result.ok:
        raise CodeSyncError(remote.node.name, f"unpacking into {target}: {result.why()}")
    return target
