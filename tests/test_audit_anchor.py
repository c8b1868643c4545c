"""``dlperf audit --kit released`` keeps the auditor's trust anchor (issue #48, item 2).

The kit that released a version recomputes its numbers; this kit checks every seal and
signature against the auditor's allowed-signers file (``--allowed-signers``,
``$DLPERF_ALLOWED_SIGNERS``, the per-user file), whatever that older kit knows of it, and
``--require-signed`` needs a signature that a file outside the reports folder trusts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.frameworks.base import REPO_ROOT
from driver.frontend.cli import main
from driver.model.drift import seal_session
from driver.release.audit import audit
from driver.release.readme import README_LAYOUT
from driver.release.release import release
from driver.release.signatures import VERSION_SIGNATURE
from tests.synth import cached_session
from tests.test_audit import skip_beyond_a_shallow_clone
from tests.test_signing import allow, new_key

# The last kit before the trust anchor came from outside the data (1813422): it signs versions
# (README layout 5) but its audit reads neither $DLPERF_ALLOWED_SIGNERS nor the per-user file.
OLDER_KIT = "9beb029b3e0c142ffdbfba2c88c5f48b7203bdc6"

# Run inside the older kit's own tree: a calibration session of that kit, sealed and the version
# released with the stranger's key, which the reports folder's allowed_signers names the lab.
_STRANGER_RELEASES = """
import sys
from pathlib import Path
from tests.synth import real_session
from tests.test_signing import allow, new_key
from driver.model.seal import seal_session
from driver.frontend.cli import main
scratch = Path(sys.argv[1])
stranger = new_key(scratch, "stranger")
session = real_session(scratch / "results" / "run")
assert seal_session(session, stranger).written
(scratch / "reports").mkdir()
allow(scratch / "reports" / "allowed_signers", "lab@example.org", stranger)
sys.exit(main(["release", "v1.0", str(session), "--reports", str(scratch / "reports"),
               "--no-flops", "--signing-key", str(stranger)]))
"""


@pytest.fixture(autouse=True)
def no_trust_anchor_of_the_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests name their own allowed-signers files: none from the user's environment."""
    monkeypatch.delenv("DLPERF_ALLOWED_SIGNERS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture(scope="module")
def stranger_version(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A version released by the older kit, signed by a stranger's key that the version's own
    allowed_signers names "lab@example.org"."""
    skip_beyond_a_shallow_clone(OLDER_KIT, "the older kit")
    scratch = tmp_path_factory.mktemp("stranger")
    tree = Path(tempfile.mkdtemp(prefix="dlperf-older-kit-")) / "kit"
    git = ["git", "-C", str(REPO_ROOT), "worktree"]
    subprocess.run([*git, "add", "--detach", "--quiet", str(tree), OLDER_KIT], check=True)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _STRANGER_RELEASES, str(scratch)],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            capture_output=True,
            text=True,
        )
    finally:
        subprocess.run([*git, "remove", "--force", str(tree)])
        shutil.rmtree(tree.parent, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    yield scratch / "reports" / "v1.0"


def audit_released(version: Path, capfd: pytest.CaptureFixture, *extra: str) -> tuple[int, str]:
    capfd.readouterr()
    argv = ["audit", str(version), "--reports", str(version.parent), "--kit", "released"]
    code = main([*argv, *extra])
    out = capfd.readouterr()
    return code, out.out + out.err


def test_a_stranger_signed_version_of_an_older_kit_fails_against_your_file(
    stranger_version: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture,
) -> None:
    """The issue's attack: with the older kit alone it PASSes "version signed by lab" against
    the version's own allowed_signers; the auditor's file, however named, fails it by key."""
    lab = new_key(tmp_path, "lab")
    mine = tmp_path / "my_signers"
    allow(mine, "lab@example.org", lab)

    def refused(code: int, text: str, anchor: Path = mine) -> None:
        stranger = f"signed by a key that {anchor} does not list"
        assert code == 1, text
        assert f"checked by this kit: trusted by {anchor}" in text, text
        assert f"manifest.json.sig: signature: published 'manifest.json.sig: {stranger}" in text
        assert f"run/session-manifest.json.sig: seal: published '{stranger}" in text
        assert f"version NOT verified against {anchor}" in text
        assert text.rstrip().splitlines()[-1].startswith("verdict of v1.0: FAIL"), text

    monkeypatch.setenv("DLPERF_ALLOWED_SIGNERS", str(mine))
    refused(*audit_released(stranger_version, capfd))
    monkeypatch.delenv("DLPERF_ALLOWED_SIGNERS")
    per_user = tmp_path / "config" / "dlperf" / "allowed_signers"
    per_user.parent.mkdir(parents=True)
    shutil.copyfile(mine, per_user)
    refused(*audit_released(stranger_version, capfd), per_user)
    refused(*audit_released(stranger_version, capfd, "--allowed-signers", str(mine)))


def test_require_signed_needs_a_file_outside_the_version_whatever_kit_recomputes(
    stranger_version: Path, capfd: pytest.CaptureFixture
) -> None:
    """Without a file of the auditor's own, the version's allowed_signers is all there is: the
    verdict names it, and --require-signed fails, naming the file and the fix."""
    own = stranger_version.parent / "allowed_signers"
    code, text = audit_released(stranger_version, capfd, "--require-signed")
    assert code == 1, text
    assert f"{own}: --require-signed: published \"the only allowed-signers file is the " in text
    assert "a file of keys you hold yourself: name it with --allowed-signers FILE" in text
    code, text = audit_released(stranger_version, capfd)
    assert code == 0, text
    assert "signatures verdict: PASS (signatures trusted by the version's own" in text, text


def test_require_signed_is_passed_on_to_the_kit_that_released_a_version(
    tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    """A version whose session is sealed but not signed PASSes without --require-signed; with
    it, the audit fails the session as unsigned, whichever kit recomputes the numbers."""
    lab = new_key(tmp_path, "lab")
    mine = tmp_path / "my_signers"
    allow(mine, "lab@example.org", lab)
    session = Path(shutil.copytree(cached_session(), tmp_path / "results" / "run"))
    assert seal_session(session, None).written
    version = release("v1.0", [session], reports_root=tmp_path / "reports", compute_flops=False,
                      printer=lambda _line: None, signing_key=lab,
                      allowed_signers=mine)  # fmt: skip
    code, text = audit_released(version, capfd, "--allowed-signers", str(mine))
    assert code == 0, text
    code, text = audit_released(version, capfd, "--allowed-signers", str(mine), "--require-signed")
    assert code == 1, text
    assert "run/session-manifest.json: signature: published 'unsigned', recomputed 'signed" in text


def test_require_signed_refuses_a_signature_only_the_reports_folder_trusts(
    tmp_path: Path,
) -> None:
    """Plain `dlperf audit --require-signed` (this kit): a version signed by a key the reports
    folder's own allowed_signers lists is not signed by anyone the auditor trusts."""
    lab = new_key(tmp_path, "lab")
    reports = tmp_path / "reports"
    reports.mkdir()
    allow(reports / "allowed_signers", "lab@example.org", lab)
    session = Path(shutil.copytree(cached_session(), tmp_path / "results" / "run"))
    assert seal_session(session, lab).written
    version = release("v1.0", [session], reports_root=reports, compute_flops=False,
                      printer=lambda _line: None, signing_key=lab)  # fmt: skip
    assert (version / VERSION_SIGNATURE).is_file()
    assert audit(version).ok
    required = audit(version, require_signed=True)
    assert not required.ok
    assert [(f.file, f.cell) for f in required.findings] == [
        (str(reports / "allowed_signers"), "--require-signed")
    ], required.text()
    mine = tmp_path / "my_signers"
    allow(mine, "lab@example.org", lab)
    assert audit(version, require_signed=True, allowed_signers=mine).ok


def test_a_readme_of_layout_5_is_re_rendered_by_the_kit_that_released_it(
    stranger_version: Path,
) -> None:
    """This kit escapes every free-text cell and line (README layout 6 on): a layout-5 README,
    whose notes, machines and node versions an older kit escaped otherwise, is held byte for
    byte to what its own kit re-renders, not to this kit's rendering."""
    report = audit(stranger_version)
    assert report.ok, report.text()
    assert any(
        f"README layout 5 (this kit writes {README_LAYOUT}): re-rendered byte for byte by the "
        "kit that released it: identical" in note
        for note in report.notes
    ), report.notes


def test_a_layout_its_kit_does_not_write_is_refused_not_audited_without_end(
    tmp_path: Path,
) -> None:
    """A manifest naming an older README layout than its kit commit writes (an edit, or a
    release from a tree with uncommitted changes): the audit once handed the README to that
    kit, which handed it to itself again, a new worktree and process each time, without end.
    Now the check is skipped, said so (INCOMPLETE), within seconds."""
    import json
    import signal

    session = Path(shutil.copytree(cached_session(), tmp_path / "results" / "run"))
    version = release("v1.0", [session], reports_root=tmp_path / "reports", compute_flops=False,
                      printer=lambda _line: None)  # fmt: skip
    manifest = json.loads((version / "manifest.json").read_text())
    manifest["readme_layout"] = 5
    (version / "manifest.json").write_text(json.dumps(manifest))
    argv = [sys.executable, "-m", "driver.frontend.cli", "audit", str(version), "--cached-flops"]
    child = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
                             stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        out, _ = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the whole chain of kits it started
        child.communicate()
        subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "prune"])
        pytest.fail("the audit handed the README from kit to kit without end")
    assert child.returncode == 1, out
    assert "readme_layout is 5, but the kit commit it names" in out, out
    assert f"writes README layout {README_LAYOUT}" in out, out
    assert "skipped: README.md is of README layout 5" in out, out
