"""What a publisher hands an auditor, as the README says: the kit commit, the reports folder and
its allowed_signers, each pushed to a git repository; the auditor's three commands from fresh
clones. Real git, real ssh-keygen keys, real `make release` / `make audit` with the Makefile's
SIGNING_KEY, RELEASE_ARGS and AUDIT_ARGS."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from driver.model.drift import seal_session
from tests.synth import cached_session
from tests.test_signing import allow, new_key

REPO_ROOT = Path(__file__).resolve().parents[1]
VENV = REPO_ROOT / ".venv"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "lab", "GIT_AUTHOR_EMAIL": "lab@example.org",
    "GIT_COMMITTER_NAME": "lab", "GIT_COMMITTER_EMAIL": "lab@example.org",
}  # fmt: skip


def sh(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        argv, cwd=cwd, env={**os.environ, **GIT_ENV, **env}, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done


def repository_of(folder: Path) -> None:
    """``folder`` committed as a git repository (what a publisher pushes)."""
    sh(["git", "init", "-q", "-b", "main"], folder)
    sh(["git", "add", "-A"], folder)
    sh(["git", "commit", "-q", "-m", "published"], folder)


def make(target: str, kit: Path, *variables: str) -> subprocess.CompletedProcess:
    """``make TARGET`` in the checkout ``kit`` with the kit's installed venv, the checkout's own
    ``driver`` first on the path (so the commit recorded and audited is the checkout's)."""
    stamp = VENV / ".dlperf-installed"  # installed already: never rebuilt from the copy
    argv = ["make", "-s", "-o", str(stamp), target, f"VENV={VENV}", *variables]
    return sh(argv, kit, PYTHONPATH=str(kit))


def test_an_auditor_checks_a_signed_version_from_fresh_clones(tmp_path: Path) -> None:
    # The publisher: the kit at a commit of its own, a sealed session, a reports folder whose
    # allowed_signers lists the lab's key, a version released with `make release`.
    kit = tmp_path / "publisher" / "dlperf"
    tracked = sh(["git", "ls-files", "-z"], REPO_ROOT).stdout.split("\0")
    for name in filter(None, tracked):
        if (REPO_ROOT / name).is_file():
            (kit / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, kit / name)
    repository_of(kit)
    key = new_key(tmp_path, "lab")
    session = Path(shutil.copytree(cached_session(), kit / "results" / "h100-rn50"))
    assert seal_session(session, key).written
    reports = tmp_path / "publisher" / "dlperf-reports"
    reports.mkdir()
    allow(reports / "allowed_signers", "lab@example.org", key)
    make("release", kit, "VERSION=v1.0-lab", f"SESSIONS={session}", f"REPORTS={reports}",
         f"SIGNING_KEY={key}", "RELEASE_ARGS=--no-flops")  # fmt: skip
    assert (reports / "v1.0-lab" / "manifest.json.sig").is_file()
    repository_of(reports)

    # The auditor: two clones and one command, nothing else from the publisher.
    auditor = tmp_path / "auditor"
    auditor.mkdir()
    sh(["git", "clone", "-q", str(kit), "dlperf"], auditor)
    sh(["git", "clone", "-q", str(reports), "dlperf-reports"], auditor)
    audited = make("audit", auditor / "dlperf", "REPORTS=../dlperf-reports",
                   "AUDIT_ARGS=--kit released")  # fmt: skip
    out = audited.stdout + audited.stderr
    assert "v1.0-lab" in out and "lab@example.org" in out
    released = sh(["git", "rev-parse", "HEAD"], kit).stdout.strip()
    assert f"with the kit at {released[:12]}" in out  # the publisher's commit, from the clone
