"""A local git copy as the code of an upstream source's image (air-gapped clusters).

An upstream source's Dockerfile clones its repository (``ARG REPO=https://github.com/...``)
and checks out the pinned commit. Where GitHub is out of reach, the user names a local copy of
the repository instead, a bare mirror (``git clone --mirror``) or a working checkout::

    dlperf images build src-pytorch-examples --source-checkout pytorch-examples=/srv/examples.git

Before anything is built, every commit the source pins must be in the copy with every object
of its history (a clone needs them all). During that image's build only, ``git daemon`` serves,
on 127.0.0.1, a repository whose only branches are the pinned commits and whose objects are the
copy's (git alternates: the copy is only read), and the build gets
``REPO=git://127.0.0.1:<port>/<source>.git``. Builds use host networking, so the build container
reaches it. No Dockerfile changes: its own ``git checkout <commit>`` still checks each commit
inside the build. The build record says where the code came from.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.bench import supervisor
from driver.images.lock import LockError
from driver.schema import did_you_mean

if TYPE_CHECKING:
    from driver.sources.spec import SourceSpec

OPTION = "--source-checkout"
READY_TIMEOUT_S = 10.0
PORT_ATTEMPTS = 3  # another process may take the free port between our probe and the daemon
READY_LINE = "Ready to rumble"  # what `git daemon --verbose` logs once it listens
REPO_ARG = re.compile(r"^\s*ARG\s+REPO(\s*=|\s*$)", re.MULTILINE)


class LocalCopyError(LockError):
    """A local copy that cannot stand in for its source: what is wrong and the fix."""


@dataclass(frozen=True)
class LocalCopy:
    source: str  # the source's name (source.yaml `name`)
    image: str  # the image built from it (source.yaml `image`)
    path: Path  # the copy the user named (absolute)
    git_dir: Path  # its repository (a checkout's .git, or the bare mirror): objects read from
    repository: str  # the upstream repository it stands in for
    commits: tuple[str, ...]  # every pinned commit, each with its whole history in the copy

    def provenance(self) -> dict[str, Any]:
        """What the build record keeps: the code came from this copy, not from the repository."""
        return {
            "from": "local copy",
            "source": self.source,
            "path": str(self.path),
            "stands_for": self.repository,
            "commits": list(self.commits),
            "verified": "each commit and every object of its history are in the copy (checked "
            "before the build); the Dockerfile checked each one out from its clone of the copy",
        }


def _git(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None):
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **(env or {}), "LC_ALL": "C"},
        capture_output=True,
        text=True,
        check=False,
    )


def require_git_daemon() -> None:
    """``git daemon`` ships with git (no Debian package of its own is needed)."""
    if not shutil.which("git"):
        raise LocalCopyError(f"{OPTION}: git is not installed here (apt-get install git)")
    exec_path = _git("--exec-path").stdout.strip()
    if not os.access(Path(exec_path) / "git-daemon", os.X_OK):
        raise LocalCopyError(
            f"{OPTION}: `git daemon` is missing from {exec_path} (it ships with git: install "
            "the distribution's full git package)"
        )


def parse_assignment(text: str) -> tuple[str, Path]:
    """``SOURCE=PATH`` as given to ``--source-checkout``."""
    name, sep, path = text.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise LocalCopyError(
            f"{OPTION} {text!r}: write SOURCE=PATH, e.g. "
            f"{OPTION} pytorch-examples=/srv/mirrors/examples.git"
        )
    return name.strip(), Path(path.strip()).expanduser()


def _git_dir(label: str, path: Path) -> Path:
    """The repository at ``path`` itself (a bare mirror, or a checkout's ``.git``)."""
    if not path.is_dir():
        raise LocalCopyError(
            f"{label}: {path}: no such directory; make it on a machine that reaches the "
            "repository (git clone --mirror URL PATH) and copy it here"
        )
    # An explicit --git-dir: git never looks in the folders above (a folder inside another
    # repository is not that repository) and does not refuse a mirror another user owns.
    candidate = path / ".git" if (path / ".git").exists() else path
    found = _git(f"--git-dir={candidate}", "rev-parse", "--git-common-dir")
    if found.returncode != 0:
        raise LocalCopyError(
            f"{label}: {path} is not a git repository ({found.stderr.strip()}); name a bare "
            "mirror (git clone --mirror URL PATH) or the top folder of a checkout"
        )
    return (Path.cwd() / found.stdout.strip()).resolve()


def _missing_history(git_dir: Path, commit: str) -> str | None:
    """What of ``commit``'s history (commits, trees, blobs) the copy lacks, or None."""
    walk = _git(f"--git-dir={git_dir}", "rev-list", "--objects", "--missing=print", commit)
    missing = [line[1:] for line in walk.stdout.splitlines() if line.startswith("?")]
    if walk.returncode != 0:
        return walk.stderr.strip().splitlines()[-1] if walk.stderr.strip() else "unreadable"
    if missing:
        return f"{len(missing)} object(s) missing, e.g. {missing[0]}"
    return None


def check_copy(
    source: str, image: str, path: Path, repository: str, commits: set[str] | list[str]
) -> LocalCopy:
    """The copy at ``path`` if it holds every commit and all of its history; else the fix."""
    path = path.resolve()
    label = f"{OPTION} {source}={path}"
    git_dir = _git_dir(label, path)
    for commit in sorted(commits):
        present = _git(f"--git-dir={git_dir}", "cat-file", "-e", f"{commit}^{{commit}}")
        if present.returncode != 0:
            raise LocalCopyError(
                f"{label}: commit {commit} (pinned by {source}) is not in this copy; update it "
                f"on a machine that reaches {repository}: `git -C {path} fetch origin` (a "
                f"commit on no branch: `git -C {path} fetch origin {commit}`), then copy it "
                "here again"
            )
        # A clone of the commit needs every object of its history, not only the commit.
        missing = _missing_history(git_dir, commit)
        if missing:
            raise LocalCopyError(
                f"{label}: the history of commit {commit} (pinned by {source}) is incomplete in "
                f"this copy ({missing}), so a clone of it would fail; make a complete copy "
                f"where {repository} is reachable (git clone --mirror {repository} PATH; not "
                "--depth, not --filter)"
            )
    return LocalCopy(source, image, path, git_dir, repository, tuple(sorted(commits)))


def local_copies(assignments: list[str], specs: Mapping[str, SourceSpec]) -> dict[str, LocalCopy]:
    """``--source-checkout`` values, each checked, by the name of the image they are for;
    ``specs``: the upstream sources by name (``driver.sources.upstream.SPECS``)."""
    if not assignments:
        return {}
    require_git_daemon()
    copies: dict[str, LocalCopy] = {}
    for text in assignments:
        name, path = parse_assignment(text)
        spec = specs.get(name)
        if spec is None:
            raise LocalCopyError(
                f"{OPTION} {text}: no upstream source {name!r}{did_you_mean(name, specs)}; "
                f"known: {', '.join(sorted(specs))}"
            )
        if spec.image in copies:
            raise LocalCopyError(f"{OPTION}: {name} is given twice")
        check_dockerfile(name, spec.dockerfile)
        copies[spec.image] = check_copy(name, spec.image, path, spec.repository, spec.commits)
    return copies


def check_dockerfile(source: str, dockerfile: Path) -> None:
    """A Dockerfile that would ignore ``REPO`` would clone the network repository after all."""
    if not REPO_ARG.search(dockerfile.read_text()):
        raise LocalCopyError(
            f'{dockerfile}: no `ARG REPO=<repository URL>` before its `git clone "${{REPO}}"`, '
            f"so a local copy of {source} cannot be passed to its build"
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_ready(process: subprocess.Popen, log_path: Path) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if READY_LINE in log_path.read_text(errors="replace"):
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def _served_repository(copy: LocalCopy, where: Path) -> Path:
    """A bare repository at ``where`` whose only refs are the pinned commits, its objects the
    copy's (git alternates: nothing is copied, the copy is only read). A clone of it fetches
    the pinned commits' histories only, whatever else the copy holds, on a branch or not."""
    checked = functools.partial(subprocess.run, capture_output=True, text=True, check=True)
    checked(["git", "init", "-q", "--bare", str(where)])
    (where / "objects" / "info" / "alternates").write_text(f"{copy.git_dir / 'objects'}\n")
    if (copy.git_dir / "shallow").exists():  # a shallow copy: its history ends where it says
        shutil.copyfile(copy.git_dir / "shallow", where / "shallow")
    # Branches named by a prefix of the commit: a ref named by a full commit is ambiguous.
    branches = [f"refs/heads/dlperf-{commit[:12]}" for commit in copy.commits]
    for branch, commit in zip(branches, copy.commits, strict=True):
        checked(["git", f"--git-dir={where}", "update-ref", branch, commit])
    checked(["git", f"--git-dir={where}", "symbolic-ref", "HEAD", branches[0]])
    return where


@contextmanager
def serve(copy: LocalCopy, log_path: Path) -> Iterator[str]:
    """``git daemon`` serving ``copy``'s pinned commits read-only on 127.0.0.1 while the block
    runs; their URL.

    It serves one repository only (``--strict-paths`` + its path as the whitelist) and dies
    with this process (the supervisor's parent-death signal); the block's end, an error or
    Ctrl-C stops it and every upload-pack it forked.
    """
    require_git_daemon()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dlperf-local-copy-") as tmp:
        served = _served_repository(copy, Path(tmp) / f"{copy.source}.git")
        for _attempt in range(PORT_ATTEMPTS):
            port = _free_port()
            argv = [
                "git", "daemon", "--listen=127.0.0.1", f"--port={port}", "--export-all",
                "--strict-paths", f"--base-path={tmp}", "--verbose", "--informative-errors",
                str(served),
            ]  # fmt: skip
            with log_path.open("w") as log:
                process = supervisor.start(
                    argv,
                    parent_death_signal=signal.SIGTERM,
                    new_group=True,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if _wait_ready(process, log_path):
                break
            supervisor.stop([process], groups=True, grace_s=1.0)
        else:
            tail = log_path.read_text(errors="replace")[-600:]
            raise LocalCopyError(
                f"git daemon for {copy.path} did not start on 127.0.0.1 ({PORT_ATTEMPTS} ports "
                f"tried): {tail.strip()} (its log: {log_path})"
            )
        try:
            yield f"git://127.0.0.1:{port}/{served.name}"
        finally:
            supervisor.stop([process], groups=True, grace_s=2.0)
