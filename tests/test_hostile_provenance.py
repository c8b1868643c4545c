"""Hostile corpus: who a number is said to have run on, and text that would rewrite a table.

Three groups, each case named, run through the real commands on copies of a real calibration
session (``tests/synth.py``) and the harness of ``tests/hostile.py``:

- ``facts/...``: a log header's hardware fingerprint edited (re-hashed into the record, as a
  forger with the kit's own functions would): facts outside their schema (``schema: 99``, wrong
  types, control and format characters, 1e308), ranks whose facts differ, devices the facts do
  not list are refused by ``report`` and ``release``, naming the repeat and the fact; an edited
  label, or GPUs claimed in the facts of a run whose ranks ran on the CPU, are accepted and
  change nothing a table shows (checked in report.md, report.csv and a release's README.md and
  results.csv);
- ``text/...``: free text in an import file (a ``|`` label, U+202E, a 10,000-character label,
  raw ``<script>``), in import-logs facts, attestations, session.json, titles and changelogs:
  refused at input where it holds control or format characters or is too long, and escaped in
  every Markdown cell and CSV cell where it is accepted (no split row, no live HTML);
- the summary line ``hostile provenance corpus: N cases, T tracebacks, S silent``, and every
  case's name with its verdict.

0 tracebacks, 0 silent acceptances, 0 injections.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from driver.release.release import release
from tests.hostile import ACCEPTED, CLEAR, CliRefusal, HostileCase, run_corpus
from tests.session_edits import rewrite_headers
from tests.synth import cached_session
from tests.test_hostile_records import Refused, refusing, run_cli

CASE_1N2G = "calibration/calibration/1n2g/bs8/fp32/synthetic"
PUBLISHED = Path(__file__).parent / "fixtures" / "published" / "dlperf-v1.0-resnet50.yaml"
H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "max_sm_clock_mhz": 1980,
        "max_memory_clock_mhz": 2619, "power_limit_w": 700.0, "default_power_limit_w": 700.0,
        "pcie_gen_max": 5, "pcie_width_max": 16, "sm_count": 132}  # fmt: skip
RLO, ZWSP, LS = "\u202e", "\u200b", "\u2028"
SCRIPT = "<script>alert(1)</script>"
LONG = "x" * 10_000


def editable_copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    for path in target.rglob("*"):
        if path.is_file():
            path.chmod(0o644)
    return target


def repeat_dir(root: Path, repeat: int = 1) -> Path:
    return root / "cases" / CASE_1N2G / f"repeat-{repeat:02d}"


# --------------------------------------------------------------------------------------------
# What the tables show: no split row, no live HTML, no control or format character


def table_rows_split(markdown: str) -> list[str]:
    """Table lines with another number of (unescaped) cell bars than their table's header."""
    bad, expected = [], None
    for line in markdown.split("\n"):
        if not line.startswith("|"):
            expected = None
            continue
        bars = len(re.findall(r"(?<!\\)\|", line))
        if expected is None:
            expected = bars
        elif bars != expected:
            bad.append(line)
    return bad


def injections(text: str, raw: str, markup: bool = True) -> list[str]:
    """What of ``raw`` (free text given to the kit) reached ``text`` unescaped: its HTML tag
    (``markup``: a file a browser renders), a format character, a control character."""
    found = []
    tag = re.search(r"<[A-Za-z]+", raw)
    if markup and tag and tag[0].lower() in text.lower():
        found.append(f"the HTML tag {tag[0]}>")
    if re.search(r"[\u202a-\u202e\u2066-\u2069\u200b\u2028\u2029]", text):
        found.append("a format character or line separator")
    if any(c < " " and c not in "\n" for c in text):
        found.append("a control character")
    return found


def clean_outputs(*paths: Path, raw: str) -> list[str]:
    """Every injection ``raw`` made into the Markdown and CSV files ``paths`` (none: [])."""
    problems = []
    for path in paths:
        text = path.read_text()
        # A CSV is data, never rendered: a tag there is text (csvsafe keeps formulas inert).
        found = injections(text, raw, markup=path.suffix == ".md")
        problems += [f"{path.name}: {what}" for what in found]
        if path.suffix == ".md":
            problems += [f"{path.name}: split row {line[:80]!r}" for line in table_rows_split(text)]
        if path.suffix == ".csv":
            rows = list(csv.reader(io.StringIO(text)))
            if any(len(row) != len(rows[0]) for row in rows):
                problems.append(f"{path.name}: a row of another width")
    return problems


# --------------------------------------------------------------------------------------------
# facts/: the fingerprint of every rank's header


def set_fact(dotted: str, value: Any) -> Callable[[dict], None]:
    def edit(header: dict) -> None:
        target = header["fingerprint"]
        *parents, last = dotted.split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        if value is ...:
            del target[last]
        else:
            target[last] = value

    return edit


def with_gpus(gpus: list[dict], link: str | None = "NVLink") -> Callable[[dict], None]:
    def edit(header: dict) -> None:
        header["fingerprint"].update(gpus=gpus, devices_per_node=len(gpus), gpu_link=link,
                                     interconnect=link)  # fmt: skip

    return edit


def on_rank(rank: int, edit: Callable[[dict], None]) -> Callable[[dict], None]:
    return lambda header: edit(header) if header.get("rank") == rank else None


def both(*edits: Callable[[dict], None]) -> Callable[[dict], None]:
    def edit(header: dict) -> None:
        for one in edits:
            one(header)

    return edit


# (name, edit of every rank's header, what the refusal names besides the repeat folder)
REFUSED_FACTS: list[tuple[str, Callable[[dict], None], str]] = [
    ("schema-99", set_fact("schema", 99), "fingerprint.schema"),
    ("schema-text", set_fact("schema", "1"), "fingerprint.schema"),
    ("schema-missing", set_fact("schema", ...), "fingerprint.schema"),
    ("cores-text", set_fact("physical_cores", "2"), "fingerprint.physical_cores"),
    ("cores-bool", set_fact("physical_cores", True), "fingerprint.physical_cores"),
    ("cores-zero", set_fact("physical_cores", 0), "fingerprint.physical_cores"),
    ("cores-negative", set_fact("physical_cores", -2), "fingerprint.physical_cores"),
    ("memory-1e308", set_fact("memory_gib", 1e308), "fingerprint.memory_gib"),
    ("memory-huge-int", set_fact("memory_gib", 10**30), "fingerprint.memory_gib"),
    ("memory-list", set_fact("memory_gib", [24]), "fingerprint.memory_gib"),
    ("cpu-newline", set_fact("cpu_model", "AMD\nEPYC"), "fingerprint.cpu_model"),
    ("cpu-rlo", set_fact("cpu_model", f"AMD {RLO}CYPE"), "fingerprint.cpu_model"),
    ("cpu-zwsp", set_fact("cpu_model", f"AMD{ZWSP} EPYC"), "fingerprint.cpu_model"),
    ("cpu-line-separator", set_fact("cpu_model", f"AMD{LS}EPYC"), "fingerprint.cpu_model"),
    ("cpu-escape", set_fact("cpu_model", "AMD \x1b[31mEPYC"), "fingerprint.cpu_model"),
    ("cpu-10000", set_fact("cpu_model", LONG), "fingerprint.cpu_model"),
    ("cpu-empty", set_fact("cpu_model", ""), "fingerprint.cpu_model"),
    ("cpu-missing", set_fact("cpu_model", ...), "fingerprint.cpu_model"),
    ("unknown-fact", set_fact("rdma", True), "fingerprint.rdma"),
    ("isa-unknown", set_fact("isa", ["avx2", "sse9"]), "fingerprint.isa"),
    ("isa-text", set_fact("isa", "avx2"), "fingerprint.isa"),
    ("gpus-text", set_fact("gpus", "8x H100"), "fingerprint.gpus"),
    ("gpus-count-disagrees", both(with_gpus([H100] * 8), set_fact("devices_per_node", 4)),
     "devices_per_node is 4 but 8 GPU(s)"),
    ("gpu-power-1e308", with_gpus([dict(H100, power_limit_w=1e308)] * 8),
     "fingerprint.gpus[0].power_limit_w"),
    ("gpu-power-negative", with_gpus([dict(H100, power_limit_w=-700.0)] * 8),
     "fingerprint.gpus[0].power_limit_w"),
    ("gpu-name-rlo", with_gpus([dict(H100, name=f"H100{RLO}")] * 8), "fingerprint.gpus[0].name"),
    ("gpu-name-table-row", with_gpus([dict(H100, name="H100\n| 1 | 2 |")] * 8),
     "fingerprint.gpus[0].name"),
    ("gpu-unknown-fact", with_gpus([dict(H100, tflops=989)] * 8), "fingerprint.gpus[0].tflops"),
    ("gpu-link-invented", with_gpus([H100] * 8, "warp drive"), "fingerprint.gpu_link"),
    ("interconnect-disagrees", set_fact("interconnect", "ib 400Gb/s x8"), "interconnect is"),
    ("fingerprint-list", lambda h: h.update(fingerprint=[1]), "'fingerprint' must be a JSON"),
    ("fingerprint-text", lambda h: h.update(fingerprint="AMD EPYC"), "'fingerprint' must be"),
    ("devices-name-a-gpu-not-listed", lambda h: h.update(devices=["NVIDIA H100 80GB HBM3"]),
     "names 'NVIDIA H100 80GB HBM3', which is neither"),
    ("devices-gpus-and-cpu", both(with_gpus([H100] * 8),
                                  lambda h: h.update(devices=["none", H100["name"]])),
     "CPU and GPU devices at once"),
    ("rank-1-other-memory", on_rank(1, set_fact("memory_gib", 999)),
     "ran on 2 machines by their hardware facts"),
    ("rank-1-other-cpu", on_rank(1, set_fact("cpu_model", "Intel Xeon")),
     "ran on 2 machines by their hardware facts"),
    ("rank-1-eight-h100", on_rank(1, with_gpus([H100] * 8)),
     "ran on 2 machines by their hardware facts"),
    ("rank-1-no-fingerprint", on_rank(1, lambda h: h.pop("fingerprint")),
     "ran on 2 machines by their hardware facts"),
    ("gpus-1000-on-one-node", with_gpus([H100] * 1000), "fingerprint.gpus"),
    ("rank-1-on-another-host", on_rank(1, lambda h: h.update(hostname="dgx-h100-07")),
     "one node's log names 2 hosts (rank 0 on"),
]  # fmt: skip

# Also refused by release, with and without --accept-remeasured (every door refuses alike).
RELEASED_TOO = ("schema-99", "memory-1e308", "cpu-rlo", "gpu-power-1e308", "rank-1-other-memory",
                "devices-name-a-gpu-not-listed")  # fmt: skip

# (name, edit of every rank's header, whether every table stays as it was): accepted, and no
# table shows the edit: an edited label changes nothing; GPUs claimed in the facts of a run
# whose ranks ran on the CPU are other facts (a machine of its own, apart by its digest), and
# the label still names the CPU the ranks ran on, never the GPUs.
SHOWN_AS_THE_FACTS_SAY: list[tuple[str, Callable[[dict], None], bool]] = [
    ("label-8x-h100", lambda h: h.update(hardware="8x H100 80GB HBM3 700W NVLink"), True),
    ("label-table-row", lambda h: h.update(hardware="AMD | 1 | 2 |\n| x"), True),
    ("label-script", lambda h: h.update(hardware=SCRIPT), True),
    ("label-rlo", lambda h: h.update(hardware=f"AMD {RLO}CYPE"), True),
    ("label-10000", lambda h: h.update(hardware=LONG), True),
    ("label-removed", lambda h: h.pop("hardware"), True),
    ("facts-claim-8x-h100-on-a-cpu-run", both(
        with_gpus([H100] * 8), lambda h: h.update(hardware="8x H100 80GB HBM3 700W NVLink")),
     False),
]  # fmt: skip


def facts_cases(session: Path, scratch: Path) -> list[HostileCase]:
    cases = []
    for index, (name, edit, named) in enumerate(REFUSED_FACTS):
        targets = ("report", "release", "release+accept") if name in RELEASED_TOO else ("report",)
        for target in targets:
            root = editable_copy(session, scratch / f"f{index}-{target}" / "s")
            rewrite_headers(repeat_dir(root), edit)
            if target == "report":
                argv = ["report", str(root), "--out", str(root.parent / "out")]
            else:
                argv = ["release", "v0.9", str(root), "--reports", str(root.parent / "r"),
                        "--no-flops", *(["--accept-remeasured"] if "+" in target else [])]
            cases.append(HostileCase(
                f"facts/{target}/{name}", refusing(lambda a=argv: run_cli(a)),
                (str(repeat_dir(root)), named), (Refused,)))  # fmt: skip
    for index, (name, edit, same) in enumerate(SHOWN_AS_THE_FACTS_SAY):
        root = editable_copy(session, scratch / f"s{index}" / session.name)
        rewrite_headers(repeat_dir(root), edit)
        out, reports = root.parent / "out", root.parent / "r"

        def both_commands(
            a: Path = root, o: Path = out, r: Path = reports, release_too: bool = same
        ) -> object:
            code, text = run_cli(["report", str(a), "--out", str(o)])
            if code != 0:
                raise Refused(text)
            if not release_too:  # a case on two machines: a version refuses it (below)
                return text
            code, text = run_cli(["release", "v0.9", str(a), "--reports", str(r), "--no-flops"])
            if code != 0:
                raise Refused(text)
            return text

        cases.append(HostileCase(
            f"facts/shown-as-the-facts-say/{name}", both_commands, (), (),
            accepted=lambda _out, o=out, r=reports, s=same: shown_as_before(
                session, o, r / "v0.9", s)))
    # the version of that session: one case on two machines, refused
    root = editable_copy(session, scratch / "claim-release" / session.name)
    rewrite_headers(repeat_dir(root), SHOWN_AS_THE_FACTS_SAY[-1][1])
    argv = ["release", "v0.9", str(root), "--reports", str(root.parent / "r"), "--no-flops"]
    cases.append(HostileCase(
        "facts/release/facts-claim-8x-h100-on-a-cpu-run", refusing(lambda: run_cli(argv)),
        (CASE_1N2G, "on several"), (Refused,)))
    return cases  # fmt: skip


_BASELINE: dict[Path, tuple[str, str, str, str]] = {}


def baseline(session: Path) -> tuple[str, str, str, str]:
    """report.md, report.csv, README.md's tables, results.csv of the unedited session."""
    if session not in _BASELINE:
        scratch = session.parent / "baseline"
        shutil.rmtree(scratch, ignore_errors=True)
        assert run_cli(["report", str(session), "--out", str(scratch / "out")])[0] == 0
        version = release("v0.9", [session], reports_root=scratch / "r", compute_flops=False,
                          printer=lambda _line: None)  # fmt: skip
        _BASELINE[session] = shown(scratch / "out", version)
    return _BASELINE[session]


def shown(out: Path, version: Path) -> tuple[str, str, str, str]:
    """What the tables show, with the numbers of each run taken out (the edited copy is
    another run of the same logs only in its file names and paths)."""

    def tables(text: str) -> str:
        return "\n".join(line for line in text.split("\n") if line.startswith("|"))

    readme = (version / "README.md").read_text()
    readme = readme.split("## Summary")[1].split("## Provenance")[0]
    return (
        tables((out / "report.md").read_text()),
        (out / "report.csv").read_text(),
        tables(readme),
        re.sub(r"/tmp/[^,\"]*", "", (version / "results.csv").read_text()),
    )


def shown_as_before(session: Path, out: Path, version: Path, same: bool) -> bool:
    """No table of the edited copy names an H100 or holds an injection; with ``same``, its
    report's and its release's tables are the unedited session's; without, its report sets
    the edited repeat apart from the case's others (two machines, two rows)."""
    if not same:
        report = (out / "report.md").read_text() if (out / "report.md").exists() else "H100"
        rows = [line for line in report.split("\n") if line.startswith("| AMD") or
                line.startswith("| Intel")]  # fmt: skip
        split = len({line.split("|")[1] for line in rows}) > 1
        return split and "H100" not in report and not clean_outputs(out / "report.md", raw="")
    if not (out / "report.md").exists() or not (version / "README.md").exists():
        return False
    edited = shown(out, version)
    problems = clean_outputs(out / "report.md", out / "report.csv", version / "README.md",
                             version / "results.csv", raw=SCRIPT)  # fmt: skip
    return edited[:3] == baseline(session)[:3] and "H100" not in "".join(edited) and not problems


# --------------------------------------------------------------------------------------------
# text/: free text at every input, and where it is accepted, in every table


def import_file(folder: Path, **figure: str) -> Path:
    """The published figures' file with the first figure's fields replaced."""
    text = PUBLISHED.read_text()
    first = next(line for line in text.split("\n") if line.startswith("  - {"))
    changed = first
    for key, value in figure.items():
        given = f"{key}: {json.dumps(value)}"  # JSON's string form is a YAML flow scalar
        changed = re.sub(rf"{key}: [^,}}]+", lambda _match, g=given: g, changed, count=1)
        if f"{key}: " not in first:
            changed = changed.replace(", throughput:", f", {given}, throughput:")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "figures.yaml"
    path.write_text(text.replace(first, changed))
    return path


# free text an import file may hold, and whether it is refused at input
IMPORT_TEXT: list[tuple[str, str, str, bool]] = [
    ("hardware-table-row", "hardware", "A100 | 1 | 2", False),
    ("hardware-script", "hardware", SCRIPT, False),
    ("hardware-rlo", "hardware", f"NVIDIA {RLO}001A", True),
    ("hardware-zwsp", "hardware", f"A100{ZWSP}", True),
    ("hardware-newline", "hardware", "A100\n| x |", True),
    ("hardware-10000", "hardware", LONG, True),
    ("publisher-script", "publisher", SCRIPT, False),
    ("publisher-rlo", "publisher", f"DLPerf {RLO}0.1v", True),
    ("publisher-10000", "publisher", LONG, True),
    ("machine-table-row", "machine", "DGX | x", False),
    ("machine-rlo", "machine", f"DGX{RLO}", True),
    ("note-script", "note", f"see {SCRIPT}", False),
    ("note-rlo", "note", f"note{RLO}", True),
    ("note-10000", "note", "y" * 2001, True),
    ("source-table-row", "source", "NGC | x", False),
    ("source-rlo", "source", f"NGC{RLO}", True),
    ("url-rlo", "url", f"https://example.org/{RLO}x", True),
    ("url-long", "url", "https://example.org/" + "a" * 3000, True),
]


def text_cases(session: Path, scratch: Path) -> list[HostileCase]:
    cases: list[HostileCase] = []
    for index, (name, field, value, refused) in enumerate(IMPORT_TEXT):
        folder = scratch / f"t{index}"
        path = import_file(folder, **{field: value})
        out, reports = folder / "out", folder / "r"
        if refused:
            for command, argv in (
                ("import", ["import", str(path), "--out", str(out)]),
                ("report", ["report", str(session), str(path), "--out", str(out)]),
                ("release", ["release", "v0.9", str(session), "--import", str(path),
                             "--reports", str(reports), "--no-flops"]),
            ):  # fmt: skip
                cases.append(HostileCase(
                    f"text/import-file/{command}/{name}", refusing(lambda a=argv: run_cli(a)),
                    (str(path), f"figures[0].{field}"), (Refused,)))  # fmt: skip
            continue

        def report_and_release(p: Path = path, o: Path = out, r: Path = reports) -> object:
            for argv in (["report", str(session), str(p), "--out", str(o)],
                         ["release", "v0.9", str(session), "--import", str(p), "--reports",
                          str(r), "--no-flops"]):  # fmt: skip
                code, text = run_cli(argv)
                if code != 0:
                    raise Refused(text)
            return o

        def escaped(_out: object, o: Path = out, r: Path = reports, raw: str = value) -> bool:
            files = [o / "report.md", o / "report.csv", r / "v0.9" / "README.md",
                     r / "v0.9" / "results.csv"]  # fmt: skip
            return all(f.exists() for f in files) and not clean_outputs(*files, raw=raw)

        cases.append(HostileCase(
            f"text/import-file/escaped/{name}", report_and_release, (), (), accepted=escaped))
    # the command line's free text: titles, changelogs, notes, labels
    for flag, command in (("--title", ["report", str(session)]),
                          ("--title", ["import", str(PUBLISHED)]),
                          ("--title", ["release", "v0.9", str(session)]),
                          ("--changelog", ["release", "v0.9", str(session)])):  # fmt: skip
        for name, value in (("rlo", f"a{RLO}b"), ("script", SCRIPT), ("img", "<img src=x>"),
                            ("newline", "a\n# b"), ("10000", LONG), ("zwsp", f"v{ZWSP}1")):
            argv = [*command, f"{flag}={value}", "--out" if command[0] != "release" else
                    "--reports", str(scratch / "cli-out")]  # fmt: skip
            cases.append(HostileCase(
                f"text/cli/{command[0]} {flag}/{name}", lambda a=argv: cli_refusal(a),
                (flag,), (CliRefusal,)))  # fmt: skip
    cases += import_logs_cases(scratch)
    cases += attestation_cases(session, scratch)
    cases += session_json_cases(session, scratch)
    return cases


def cli_refusal(argv: list[str]) -> object:
    """The command's exit-2 one-line refusal as CliRefusal; otherwise what it returned."""
    code, text = run_cli(argv)
    if code == 2:
        raise CliRefusal(text)
    return code, text


def import_logs_cases(scratch: Path) -> list[HostileCase]:
    from tests.test_import_logs import _dllogger_plain

    log = _dllogger_plain(scratch / "w.log", 0.25, 30, batch=128)
    base = ["import-logs", "--source", "ngc-pytorch", "--logs", str(log), "--model", "resnet50",
            "--batch", "128", "--warmup-steps", "10", "--measured-steps", "20",
            "--results", str(scratch / "imported"), "--session", "s"]  # fmt: skip
    cases = []
    for flag in ("--hardware", "--note"):
        for name, value in (("rlo", f"V100{RLO}"), ("zwsp", f"V100{ZWSP}"),
                            ("line-separator", f"V100{LS}x"), ("newline", "V100\nx"),
                            ("10000", "y" * 2001)):  # fmt: skip
            cases.append(HostileCase(
                f"text/import-logs {flag}/{name}", lambda a=[*base, flag, value]: cli_refusal(a),
                (flag,), (CliRefusal,)))  # fmt: skip
    cases.append(HostileCase(
        "text/import-logs --hardware/no-device-model",
        lambda: cli_refusal([*base, "--hardware", "8x 300W NVLink"]), ("--hardware",),
        (CliRefusal,)))  # fmt: skip
    return cases


def attestation_cases(session: Path, scratch: Path) -> list[HostileCase]:
    from tests.session_edits import drop_fingerprint, rewrite_session_headers

    old = rewrite_session_headers(editable_copy(session, scratch / "old"), drop_fingerprint)
    good = ["--label", "AMD EPYC 2c avx2", "--source", "a note written by the hostile corpus"]
    cases = []
    for name, extra in (
        ("source-rlo", ["--source", f"a note{RLO} of ten characters"]),
        ("source-zwsp", ["--source", f"a note{ZWSP} of ten characters"]),
        ("source-10000", ["--source", "y" * 2001]),
        ("fact-rlo", ["--fact", f"isa=avx2{RLO}"]),
        ("fact-key-zwsp", ["--fact", f"is{ZWSP}a=avx2"]),
        ("fact-10000", ["--fact", f"isa={LONG}"]),
        ("label-rlo", ["--label", f"AMD{RLO}"]),
        ("label-table-row", ["--label", "AMD | x"]),
        ("label-script", ["--label", SCRIPT]),
    ):
        argv = ["attest-hardware", str(old), *good, *extra]
        cases.append(HostileCase(f"text/attest-hardware/{name}", lambda a=argv: cli_refusal(a),
                                 ("attest-hardware",), (CliRefusal,)))  # fmt: skip
    # an attestation written by hand: refused where it is read
    for index, (name, body) in enumerate((
        ("source-rlo", {"schema": 1, "label": "AMD EPYC", "source": f"typed by hand{RLO}"}),
        ("fact-line-separator", {"schema": 1, "label": "AMD EPYC", "source": "typed by hand",
                                 "facts": {"isa": f"avx2{LS}"}}),
    )):  # fmt: skip
        root = editable_copy(old, scratch / f"attested{index}")
        (root / "hardware.json").write_text(json.dumps(body))
        argv = ["report", str(root), "--out", str(scratch / f"attested{index}-out")]
        cases.append(HostileCase(f"text/hardware.json/{name}", refusing(lambda a=argv: run_cli(a)),
                                 (str(root / "hardware.json"),), (Refused,)))  # fmt: skip
    return cases


SESSION_JSON = {
    "not-json": "{",
    "a-list": "[]",
    "null": "null",
    "schema-9": '{"schema": 9}',
    "kit-text": '{"schema": 1, "kit": "abc"}',
    "name-rlo": json.dumps({"schema": 1, "name": f"s{RLO}"}),
    "head-node-newline": json.dumps({"schema": 1, "head_node": "vm\n| x |"}),
    "profile-10000": json.dumps({"schema": 1, "profile": LONG}),
    "name-number": '{"schema": 1, "name": 7}',
}


def session_json_cases(session: Path, scratch: Path) -> list[HostileCase]:
    cases = []
    for name, text in SESSION_JSON.items():
        for command in ("report", "release"):
            root = editable_copy(session, scratch / f"sj-{name}-{command}" / "s")
            (root / "session.json").write_text(text)
            argv = (["report", str(root), "--out", str(root.parent / "out")] if command ==
                    "report" else ["release", "v0.9", str(root), "--reports",
                                   str(root.parent / "r"), "--no-flops"])  # fmt: skip
            cases.append(HostileCase(
                f"text/session.json/{command}/{name}", refusing(lambda a=argv: run_cli(a)),
                (str(root / "session.json"),), (Refused,)))  # fmt: skip
    return cases


# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return editable_copy(cached_session(), tmp_path_factory.mktemp("provenance") / "session")


@pytest.mark.slow  # 39 s on the 2-core AVX2 EPYC, in make test
def test_the_provenance_corpus_names_every_case_and_lets_nothing_through(
    session: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cases = [*facts_cases(session, tmp_path / "facts"), *text_cases(session, tmp_path / "text")]
    counts = run_corpus(cases)
    with capsys.disabled():
        print("\n" + counts.summary("provenance"))
        for verdict in counts.verdicts:
            print(f"  {verdict.kind}: {verdict.case.name}")
    failures = [f"{v.case.name}: {v.kind}: {v.detail[-400:]}" for v in counts.failures()]
    assert not failures, failures
    names = {v.case.name for v in counts.verdicts}
    for expected in (
        "facts/report/schema-99", "facts/release/memory-1e308", "facts/report/cpu-rlo",
        "facts/release+accept/cpu-rlo", "facts/report/rank-1-other-cpu",
        "facts/shown-as-the-facts-say/label-8x-h100",
        "facts/shown-as-the-facts-say/facts-claim-8x-h100-on-a-cpu-run",
        "text/import-file/escaped/hardware-table-row", "text/import-file/release/hardware-rlo",
        "text/import-file/report/hardware-10000", "text/import-file/escaped/publisher-script",
        "text/session.json/report/a-list", "text/cli/release --changelog/script",
    ):  # the issue's own cases, each run by name
        assert expected in names, expected
    accepted = sum(1 for v in counts.verdicts if v.kind == ACCEPTED)
    assert accepted == len(SHOWN_AS_THE_FACTS_SAY) + sum(1 for *_, r in IMPORT_TEXT if not r)
    assert counts.by_kind[CLEAR] + accepted == len(cases) >= 150
