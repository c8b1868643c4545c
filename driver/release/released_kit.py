"""Audit a version with the kit that released it (``dlperf audit --kit released``).

The audit re-renders a version's README and tables with the kit that runs it, so a later change
to the renderer (a reworded footnote, a new column) makes older versions differ although no
number changed. This runs the audit of the kit at the version's ``manifest.json`` ``kit.commit``
instead: a temporary ``git worktree`` of that commit, its own ``driver`` package first on the
path, the same Python and dependencies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from driver.frameworks.base import REPO_ROOT


class ReleasedKitError(RuntimeError):
    pass


def released_commit(version: Path) -> tuple[str, bool]:
    """(commit, dirty) of the kit that released ``version``."""
    try:
        kit = json.loads((version / "manifest.json").read_text())["kit"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ReleasedKitError(f"{version}/manifest.json: no kit commit ({error})") from None
    commit = kit.get("commit") if isinstance(kit, dict) else None
    if not commit:
        raise ReleasedKitError(f"{version}/manifest.json: kit.commit is empty")
    return str(commit), bool(kit.get("dirty"))


def _git(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def kit_knows(version: Path, text: str) -> bool:
    """Whether the command-line code of the kit that released ``version`` holds ``text`` (an
    option it knows), False where that kit is not here to ask."""
    try:
        commit, _dirty = released_commit(version)
    except ReleasedKitError:
        return False
    found = _git("grep", "-q", "-F", "-e", text, commit, "--", "driver/frontend")
    return found.returncode == 0


def audit_with_released_kit(version: Path, reports: Path, extra_args: list[str]) -> int:
    """Run ``dlperf audit`` of the releasing kit on ``version``; returns its exit code."""
    with released_tree(version) as (tree, commit):
        print(f"auditing {version.name} with the kit at {commit[:12]} (its release)", flush=True)
        return subprocess.run(_audit_argv(version, reports, extra_args), cwd=tree,
                              env=_env(tree)).returncode  # fmt: skip


def released_kit_output(version: Path, reports: Path, extra_args: list[str]) -> tuple[int, str]:
    """:func:`audit_with_released_kit`, quietly: its exit code and its output."""
    with released_tree(version, quiet=True) as (tree, _commit):
        done = subprocess.run(_audit_argv(version, reports, extra_args), cwd=tree,
                              env=_env(tree), capture_output=True, text=True)  # fmt: skip
        return done.returncode, done.stdout + done.stderr


def _audit_argv(version: Path, reports: Path, extra_args: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "driver.frontend.cli", "audit", str(version.resolve()),
        "--reports", str(reports.resolve()), *extra_args,
    ]  # fmt: skip


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


_LAYOUT_LINE = re.compile(r"^README_LAYOUT = (\d+)$", re.MULTILINE)


def _check_layout(version: Path, commit: str) -> None:
    """ReleasedKitError where the kit at ``commit`` writes another README layout than the
    version's manifest names (a release from a tree with uncommitted changes, or an edited
    manifest): that kit would hand the README to "the kit that released it", itself, without
    end. A kit from before layouts were numbered in its code is run as it is."""
    shown = _git("show", f"{commit}:driver/release/readme.py")
    match = _LAYOUT_LINE.search(shown.stdout) if shown.returncode == 0 else None
    if match is None:
        return
    try:
        named = int(json.loads((version / "manifest.json").read_text()).get("readme_layout", 1))
    except (OSError, ValueError, TypeError, AttributeError) as error:
        raise ReleasedKitError(
            f"{version}/manifest.json: readme_layout unreadable ({error})"
        ) from None
    if named != int(match[1]):
        raise ReleasedKitError(
            f"{version}/manifest.json: readme_layout is {named}, but the kit commit it names "
            f"({commit[:12]}) writes README layout {match[1]}: released from a tree with "
            "uncommitted changes, or the manifest was edited; that kit cannot re-render this "
            "README (audit with the current kit: drop --kit released)"
        )


@contextmanager
def released_tree(version: Path, quiet: bool = False) -> Iterator[tuple[Path, str]]:
    """A temporary ``git worktree`` of the kit commit that released ``version``, and the
    commit; removed on leaving."""
    commit, dirty = released_commit(version)
    if _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        raise ReleasedKitError(
            f"{version}: released by kit commit {commit[:12]}, which this repository does not "
            "hold (fetch it, or audit with the current kit: drop --kit released)"
        )
    _check_layout(version, commit)
    if dirty and not quiet:
        print(
            f"note: {version.name} was released from a tree with uncommitted changes; auditing "
            f"with its commit {commit[:12]} as the nearest kit"
        )
    scratch = Path(tempfile.mkdtemp(prefix="dlperf-kit-"))
    tree = scratch / "kit"
    try:
        added = _git("worktree", "add", "--detach", "--quiet", str(tree), commit)
        if added.returncode != 0:
            raise ReleasedKitError(f"git worktree add {commit[:12]}: {added.stderr.strip()}")
        yield tree, commit
    finally:
        _git("worktree", "remove", "--force", str(tree))
        shutil.rmtree(scratch, ignore_errors=True)
