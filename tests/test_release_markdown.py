"""One escaping for every Markdown cell and line of a release README and of a report (issue #48,
item 5): a machine's label, a signer's name, a device or a report's title holding a link, bold,
an HTML tag or a ``|`` reaches README.md and report.md as text (``driver.text.markdown_inline``),
as the results tables already showed it; a line break is refused where it is read."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from driver.model.drift import seal_session
from driver.release.audit import audit
from driver.release.refusals import ReleaseError
from driver.release.release import release
from tests.session_edits import rewrite_session_headers
from tests.synth import cached_session
from tests.test_release_signatures import cli
from tests.test_signing import new_key

HOSTILE = "[click](http://evil.example) **bold** <b>x</b> | y"
SIGNER = "[click](http://evil.example)**bold**<b>|x"  # a principal holds no space or comma
SHOWN = r"\[click\](http://evil.example) \*\*bold\*\* &lt;b&gt;x&lt;/b&gt; \| y"
TITLE = "[click](http://evil.example) **bold** | y"  # a title refuses HTML tags at input
SIGNER_SHOWN = r"\[click\](http://evil.example)\*\*bold\*\*&lt;b&gt;\|x"

_LINK = re.compile(r"(?<!\\)\[[^\]\n]*(?<!\\)\]\(")  # ``[text](``, neither bracket escaped
_EMPHASIS = re.compile(r"(?<!\\)\*\*|(?<!\\)__")
_PIPE = re.compile(r"(?<!\\)\|")


@pytest.fixture(autouse=True)
def no_trust_anchor_of_the_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DLPERF_ALLOWED_SIGNERS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def inert(markdown: str, where: str) -> None:
    """No link, bold or HTML tag opened by the hostile text, and no table row it widened."""
    for number, line in enumerate(markdown.splitlines(), 1):
        if "evil.example" not in line:
            continue
        assert not _LINK.search(line), f"{where}:{number}: a live link: {line}"
        assert "<b>" not in line, f"{where}:{number}: an HTML tag: {line}"
        assert not _EMPHASIS.search(line.replace("`", "")), f"{where}:{number}: bold: {line}"
        if line.startswith("|"):
            header = next(h for h in reversed(markdown.splitlines()[: number - 1])
                          if h.startswith("|") and not h.startswith("|-"))  # fmt: skip
            cells = len(_PIPE.findall(line))
            assert cells == len(_PIPE.findall(header)), f"{where}:{number}: a new column: {line}"


def hostile_session(tmp_path: Path, key: Path) -> Path:
    """A calibration session whose machine and devices are the hostile label, sealed."""

    def edit(header: dict) -> None:
        header["fingerprint"]["cpu_model"] = HOSTILE
        header["devices"] = [HOSTILE]

    session = Path(shutil.copytree(cached_session(), tmp_path / "results" / "run"))
    rewrite_session_headers(session, edit)
    assert seal_session(session, key).written
    return session


def signers(path: Path, key: Path) -> Path:
    kind, blob = key.with_suffix(".pub").read_text().split()[:2]
    path.write_text(f"{SIGNER} {kind} {blob}\n")
    return path


def test_a_hostile_label_and_signer_reach_the_readme_as_text(tmp_path: Path) -> None:
    key = new_key(tmp_path, "lab")
    reports = tmp_path / "reports"
    reports.mkdir()
    signers(reports / "allowed_signers", key)
    session = hostile_session(tmp_path, key)
    version = release("v1.0", [session], reports_root=reports, compute_flops=False,
                      printer=lambda _line: None, signing_key=key)  # fmt: skip
    readme = (version / "README.md").read_text()
    inert(readme, "README.md")
    assert f"This version is signed by {SIGNER_SHOWN} (" in readme  # the signatures section
    assert f"| signed      | {SIGNER_SHOWN} |" in readme  # its table
    assert f"| `run`     | {SHOWN}" in readme  # the machines table
    assert f"devices {SHOWN};" in readme  # the provenance of each node
    report = audit(version)  # the audit renders the same README, byte for byte
    assert report.ok, report.text()


def test_a_hostile_signer_and_title_reach_the_report_as_text(tmp_path: Path) -> None:
    key = new_key(tmp_path, "lab")
    session = hostile_session(tmp_path, key)
    allowed = signers(tmp_path / "allowed_signers", key)
    out = tmp_path / "out"
    code, text = cli(["report", str(session), "--out", str(out), "--allowed-signers",
                      str(allowed), "--title", TITLE])  # fmt: skip
    assert code == 0, text
    markdown = (out / "report.md").read_text()
    assert f"signed by {SIGNER_SHOWN}" in markdown, markdown  # who vouches for the session
    assert markdown.startswith("# \\[click\\](http://evil.example) \\*\\*bold\\*\\* \\| y\n")
    inert(markdown, "report.md")


def test_a_line_break_in_a_label_is_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    session = Path(shutil.copytree(cached_session(), tmp_path / "results" / "run"))

    def edit(header: dict) -> None:
        header["fingerprint"]["cpu_model"] = "AMD EPYC\n| [click](http://evil.example) |"

    rewrite_session_headers(session, edit)
    assert seal_session(session, None).written
    with pytest.raises(ReleaseError) as refused:
        release("v1.0", [session], reports_root=tmp_path / "reports", compute_flops=False,
                printer=lambda _line: None)  # fmt: skip
    message = str(refused.value)
    assert "node0.log" in message and "header field 'fingerprint.cpu_model'" in message
    assert "U+000A LINE FEED" in message and "remove it" in message


BACKTICKED = "x` [click](evil.example) **bold** `y"  # closes a one-backtick span


def test_a_name_holding_a_backtick_cannot_end_its_code_span(tmp_path: Path) -> None:
    """A session folder and a host named with a backtick: each was shown in a span of one
    backtick, which the name's own backtick closed, so the link after it rendered live (README
    layout 6). Now each span is fenced by one backtick more than the name holds."""

    def edit(header: dict) -> None:
        header["hostname"] = BACKTICKED

    session = Path(shutil.copytree(cached_session(), tmp_path / "results" / f"run{BACKTICKED}"))
    rewrite_session_headers(session, edit)
    assert seal_session(session, None).written
    version = release("v1.0", [session], reports_root=tmp_path / "reports", compute_flops=False,
                      printer=lambda _line: None)  # fmt: skip
    readme = (version / "README.md").read_text()
    fenced = f"``run{BACKTICKED}``"
    assert f"- ``{BACKTICKED}``: devices" in readme  # the node, in the provenance section
    assert f"- {fenced}: created" in readme  # the session, there too
    assert f"| {fenced} |" in readme  # the machines and signatures tables
    spans = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")  # a code span, as CommonMark reads one
    outside = spans.sub("", readme)  # the text that renders as Markdown
    assert "evil.example" not in outside, [s for s in readme.splitlines() if "evil" in s]
    inert(outside, "README.md")  # and no table row widened by a ``|``
    report = audit(version)
    assert report.ok, report.text()
