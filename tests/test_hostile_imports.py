"""The hostile corpus, imports side: published figures (``dlperf import FILE``, CSV and YAML) and
logs the kit did not launch (``dlperf import-logs``).

Every case must end in a clear refusal: a ConfigError naming the import file and the row or
figure and field, or ``import-logs`` exiting 2 (ImportLogsError) naming the log or facts file and
the conflicting values. The harness (tests/hostile.py) counts tracebacks and silent acceptances;
both must be 0. :func:`test_log_plausibility_cases` holds the logs whose numbers are implausible
(a timestamp of 1e308, a step going back, a duplicated last step): the one-door verification
(``driver/verify/``) refuses those, so that test passes once it is merged.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from driver.core.importlogs import import_run
from driver.frontend.cli import main
from driver.release.imported import load_import
from driver.schema import ConfigError
from driver.sources.logfacts import Facts, ImportLogsError
from tests.hostile import ACCEPTED, CLEAR, CliRefusal, HostileCase, run_corpus
from tests.test_hostile_config import Files, file_level_cases
from tests.test_import_logs import _dllogger_plain, without_header

PUBLISHED = Path(__file__).parent / "fixtures" / "published"
SHEET = (PUBLISHED / "dle-pytorch-resnet50-a100-v100.csv").read_text()
TABLE = (PUBLISHED / "dlperf-v1.0-resnet50.yaml").read_text()
UPSTREAM = Path(__file__).parent / "fixtures" / "upstream"
CONTROL = {"nl": "\n", "tab": "\t", "cr": "\r", "vt": "\x0b", "ff": "\x0c", "esc": "\x1b",
           "nul": "\x00", "del": "\x7f", "nel": "\x85", "ls": "\u2028"}  # fmt: skip
IMPORT_ERRORS = (ConfigError, CliRefusal)
LOG_ERRORS = (ImportLogsError, CliRefusal)


def replaced(text: str, old: str, new: str) -> str:
    assert old in text, old  # a case that edits nothing would test nothing
    return text.replace(old, new, 1)


# --------------------------------------------------------------------------------------------
# dlperf import: the file, each figure, the figures together


def import_case(files: Files, name: str, filename: str, content: str, *expect: str) -> HostileCase:
    path = files.write(filename, content)
    return HostileCase(f"import/{name}", lambda: load_import(path), (str(path), *expect))


def throughput_cases(files: Files) -> Iterator[HostileCase]:
    # row 1: the A100's 1n1g figure (per device = total)
    for value in ("1e308", "1e-300", "0", "-938", "nan", "inf", "-inf", "1e400", "true",
                  "fast", "0.0009", "1000001", "0x3aa"):  # fmt: skip
        content = replaced(SHEET, ",938,", f",{value},")
        yield import_case(files, f"csv/throughput/{value}", "f.csv", content, "row 1.throughput")
    # 32 devices: 1e6 x 32 + 32 is over the bound per device; YAML floats need a dot
    for value in ("1.0e+308", "1.0e-300", "32000032.0", "0.03", ".nan", "-.inf", "'12411.97'"):
        content = replaced(TABLE, "throughput: 12411.97", f"throughput: {value}")
        yield import_case(
            files, f"yaml/throughput/{value}", "f.yaml", content, "figures[0].throughput"
        )


def efficiency_cases(files: Files) -> Iterator[HostileCase]:
    derived = replaced(SHEET, ",7248,", ",93800,")  # 1250% against row 1's 938
    yield import_case(files, "csv/efficiency-1250", "f.csv", derived, "row 2.throughput", "1250")
    barely = replaced(SHEET, ",7248,", ",7730,")  # 103.0%
    yield import_case(files, "csv/efficiency-103", "f.csv", barely, "row 2.throughput")
    printed = replaced(TABLE, "speedup: 31.21", "speedup: 400")
    yield import_case(files, "yaml/efficiency-1250", "f.yaml", printed, "figures[0].speedup")
    over = replaced(TABLE, "speedup: 31.21", "speedup: 33")  # 103% of 32
    yield import_case(files, "yaml/efficiency-103", "f.yaml", over, "figures[0].speedup")
    unexplained = replaced(TABLE, "speedup: 31.21}", "speedup: 33, superlinear: true}")
    yield import_case(files, "yaml/superlinear-no-note", "f.yaml", unexplained, "figures[0].note")
    blank = replaced(TABLE, "speedup: 31.21}", "speedup: 33, superlinear: true, note: ''}")
    yield import_case(files, "yaml/superlinear-blank-note", "f.yaml", blank, "figures[0].note")
    mark = replaced(TABLE, "speedup: 31.21}", "speedup: 33, superlinear: 'true', note: x}")
    yield import_case(files, "yaml/superlinear-not-bool", "f.yaml", mark, "superlinear")


def duplicate_cases(files: Files) -> Iterator[HostileCase]:
    lines = SHEET.splitlines()
    twice = "\n".join([*lines, lines[-1]]) + "\n"
    yield import_case(files, "csv/duplicate-row", "f.csv", twice, "row 9", "row 8")
    other_rate = "\n".join([*lines, lines[-1].replace(",8322,", ",8000,")]) + "\n"
    yield import_case(files, "csv/duplicate-case", "f.csv", other_rate, "row 9", "row 8")
    other_machine = "\n".join([*lines, lines[-1].replace(",DGX-1,", ",DGX-2,")]) + "\n"
    yield import_case(files, "csv/duplicate-other-machine", "f.csv", other_machine, "row 9")
    first = TABLE.splitlines()[-13]
    respellings = {
        "same": first,
        "framework": first.replace("framework: oneflow", "framework: OneFlow"),
        "source": first.replace("OneFlow-Benchmark", "oneflow benchmark"),
        "rate": first.replace("12411.97", "12000.0"),
    }
    for name, line in respellings.items():
        content = TABLE + line + "\n"
        yield import_case(files, f"yaml/duplicate-{name}", "f.yaml", content, "figures[13]")


def model_cases(files: Files) -> Iterator[HostileCase]:
    for value in ("gpt2", "GPT2", "ResNet50", "resnet-50", "vgg16", "calibration"):
        content = replaced(SHEET, ",resnet50,", f",{value},")
        yield import_case(files, f"csv/model/{value}", "f.csv", content, "row 1.model")
    for value in ("gpt2", "''", "5", "[resnet50]", "null"):
        content = replaced(TABLE, "model: resnet50", f"model: {value}")
        yield import_case(files, f"yaml/model/{value}", "f.yaml", content, "figures[0].model")


def column_cases(files: Files) -> Iterator[HostileCase]:
    header = SHEET.splitlines()[5]
    assert header.startswith("framework,")
    for column in ("framework", "model", "throughput", "publisher", "url"):
        content = replaced(SHEET, header, f"{header},{column}")
        yield import_case(files, f"csv/column-twice/{column}", "f.csv", content, "header", column)
    spaced = replaced(SHEET, ",throughput,", ",throughput, throughput ,")
    yield import_case(files, "csv/column-twice/spaced", "f.csv", spaced, "header", "throughput")
    unnamed = replaced(SHEET, ",machine,", ",,")
    yield import_case(files, "csv/column-unnamed", "f.csv", unnamed, "header, column 12")
    trailing = replaced(SHEET, header, header + ",")
    yield import_case(files, "csv/column-trailing-comma", "f.csv", trailing, "header")
    extra = replaced(SHEET, ",DGX A100,", ",DGX A100,extra,")
    yield import_case(files, "csv/row-extra-cell", "f.csv", extra, "row 1")
    unknown = replaced(SHEET, ",machine,", ",gpus,")
    yield import_case(files, "csv/column-unknown", "f.csv", unknown, "gpus")
    for name, char in CONTROL.items():
        content = replaced(SHEET, ",machine,", f',"mach{char}ine",')
        yield import_case(files, f"csv/header-control/{name}", "f.csv", content, "header")


def control_character_cases(files: Files) -> Iterator[HostileCase]:
    csv_cells = {"source": "DeepLearningExamples", "hardware": "NVIDIA A100-SXM4-80GB",
                 "machine": "DGX A100", "publisher": "NVIDIA DeepLearningExamples",
                 "framework": "pytorch", "precision": "fp32"}  # fmt: skip
    for field, old in csv_cells.items():
        for name, char in CONTROL.items():
            # quoted: the CSV reader keeps the character inside the cell
            before, after = ("\n", ",") if field == "framework" else (",", ",")  # 1st column
            content = replaced(
                SHEET, f"{before}{old}{after}", f'{before}"{old[:3]}{char}{old[3:]}"{after}'
            )
            yield import_case(
                files, f"csv/control/{field}/{name}", "f.csv", content, f"row 1.{field}"
            )
    for field in ("source", "hardware", "machine", "publisher", "note", "url"):
        for name, char in CONTROL.items():
            escaped = char.encode("unicode_escape").decode().replace("\\x", "\\x")
            value = "https://e.org/a" if field == "url" else "DLPerf"
            value = f"{value}{escaped}b"
            if field in ("source", "hardware"):
                given = {"source": "OneFlow-Benchmark", "hardware": "NVIDIA V100-SXM2-16GB"}
                content = replaced(TABLE, f"{field}: {given[field]}", f'{field}: "{value}"')
            else:
                content = replaced(
                    TABLE, "speedup: 31.21}", f'speedup: 31.21, {field}: "{value}"}}'
                )
            yield import_case(files, f"yaml/control/{field}/{name}", "f.yaml", content, field)
    for field in ("publisher", "url", "machine"):  # file-level defaults every figure takes
        line = next(line for line in TABLE.splitlines() if line.startswith(f"{field}: "))
        content = replaced(TABLE, line, f'{line[: len(field) + 2]}"{line[len(field) + 2 :]}\\nx"')
        yield import_case(files, f"yaml/control/default-{field}", "f.yaml", content, field)


def csv_file_cases(files: Files) -> Iterator[HostileCase]:
    header_only = "\n".join(SHEET.splitlines()[:6]) + "\n"
    texts: dict[str, str | bytes | None] = {
        "directory": None,
        "empty": "",
        "no-schema": replaced(SHEET, "# schema: 1\n", ""),
        "schema-2": replaced(SHEET, "# schema: 1", "# schema: 2"),
        "header-only": header_only,
        "non-utf8": SHEET.encode() + b"pytorch,caf\xe9\n",
        "nul": replaced(SHEET, ",DGX A100,", ",DGX\x00A100,"),
        "unterminated-quote": replaced(SHEET, ",DGX A100,", ',"DGX A100,'),
        "utf16": b"\xff\xfe" + SHEET.encode("utf-16-le"),
        "wrong-suffix": SHEET,
    }
    for name, content in texts.items():
        filename = "f.txt" if name == "wrong-suffix" else "f.csv"
        path = files.write(filename, content)
        yield HostileCase(f"import/csv/file/{name}", lambda p=path: load_import(p), (str(path),))
    missing = files.root / "missing" / "f.csv"
    yield HostileCase("import/csv/file/missing", lambda: load_import(missing), (str(missing),))


def import_file_cases(root: Path) -> list[HostileCase]:
    files = Files(root / "import")
    table = "\n".join(line for line in TABLE.splitlines() if not line.startswith("#")) + "\n"
    return [
        *throughput_cases(files),
        *efficiency_cases(files),
        *duplicate_cases(files),
        *model_cases(files),
        *column_cases(files),
        *control_character_cases(files),
        *csv_file_cases(files),
        *file_level_cases("import/yaml", files, "f.yaml", table, load_import),
    ]


# --------------------------------------------------------------------------------------------
# dlperf import-logs: facts against facts, facts against the log, a log twice


def cli(argv: list[str]) -> Callable[[], object]:
    """``dlperf ARGV`` in this process: exit 2 raises CliRefusal with what it printed."""

    def run() -> object:
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = main(argv)
        if code == 2:
            raise CliRefusal(err.getvalue().strip())
        return code, out.getvalue(), err.getvalue()

    return run


def import_logs_cases(root: Path) -> list[HostileCase]:
    work = root / "logs"
    results = root / "results"
    work.mkdir(parents=True)
    log = _dllogger_plain(work / "w.log", 0.25, 30)
    facts = work / "facts.yaml"
    facts.write_text(
        "model: resnet50\ntopology: 1n1g\nbatch: 256\nprecision: fp32\ndataset: synthetic\n"
        "warmup_steps: 10\nmeasured_steps: 20\n"
    )
    ngc = ["import-logs", "--source", "ngc-pytorch", "--results", str(results)]
    cases: list[HostileCase] = []

    def add(name: str, argv: list[str], *expect: str) -> None:
        session = ["--session", name.replace("/", "-")]
        cases.append(HostileCase(f"import-logs/{name}", cli([*argv, *session]), expect, LOG_ERRORS))

    # the command line against the facts file: neither wins silently
    conflicts = {"batch": ["--batch", "8"], "topology": ["--topology", "1n8g"],
                 "precision": ["--precision", "amp"], "dataset": ["--dataset", "real"],
                 "warmup": ["--warmup-steps", "20"], "measured": ["--measured-steps", "10"],
                 "model": ["--model", "inception3"]}  # fmt: skip
    for name, flag in conflicts.items():
        add(f"cli-vs-facts/{name}", [*ngc, "--logs", str(log), "--facts", str(facts), *flag],
            str(facts), flag[0], flag[1])  # fmt: skip
    # the facts against the log's own printed parameters
    window = ["--warmup-steps", "10", "--measured-steps", "20"]
    add("printed/plain-batch", [*ngc, "--logs", str(log), "--model", "resnet50", "--batch", "8",
        *window], str(log), "batch_size : 256", "--batch")  # fmt: skip
    wrong_facts = work / "facts-8.yaml"
    wrong_facts.write_text(facts.read_text().replace("batch: 256", "batch: 8"))
    add("printed/plain-batch-facts", [*ngc, "--logs", str(log), "--facts", str(wrong_facts)],
        str(log), "batch_size : 256", str(wrong_facts))  # fmt: skip
    add("printed/plain-arch", [*ngc, "--logs", str(log), "--model", "bert", "--batch", "256",
        *window], str(log), "arch : resnet50")  # fmt: skip
    json_log = without_header(UPSTREAM / "ngc-pytorch" / "ok.node0.log", work / "ngc.json.log")
    add("printed/json-batch", [*ngc, "--logs", str(json_log), "--model", "resnet50", "--batch",
        "32", "--warmup-steps", "2", "--measured-steps", "4"], str(json_log),
        '"batch_size": 64')  # fmt: skip
    paddle = without_header(UPSTREAM / "paddle-models" / "real-cpu.node0.log", work / "pd.log")
    paddle_argv = ["import-logs", "--source", "paddle-models", "--logs", str(paddle),
                   "--topology", "1n2g", "--dataset", "real", "--warmup-steps", "4",
                   "--measured-steps", "8", "--results", str(results)]  # fmt: skip
    add("printed/paddle-batch", [*paddle_argv, "--model", "resnet50", "--batch", "4"],
        str(paddle), "batch_size : 2")  # fmt: skip
    add("printed/paddle-precision", [*paddle_argv, "--model", "resnet50", "--batch", "2",
        "--precision", "amp"], str(paddle), "use_fp16 : False")  # fmt: skip
    add("printed/paddle-model", [*paddle_argv, "--model", "bert", "--batch", "2"], str(paddle),
        "model : ResNet50")  # fmt: skip
    gluon = UPSTREAM / "real" / "gluon-nlp" / "bert.log"
    gluon_argv = ["import-logs", "--source", "gluon-nlp", "--logs", str(gluon), "--model", "bert",
                  "--warmup-steps", "9", "--measured-steps", "20",
                  "--results", str(results)]  # fmt: skip
    add("printed/gluon-total-batch", [*gluon_argv, "--batch", "2"], str(gluon),
        "total_batch_size=4")  # fmt: skip
    add("printed/gluon-dtype", [*gluon_argv, "--batch", "4", "--precision", "amp"], str(gluon),
        "dtype='float32'")  # fmt: skip
    # a log twice: already in the session, twice in one call, as two nodes of one run
    held = cli([*ngc, "--logs", str(log), "--facts", str(facts), "--session", "held"])()
    assert held[0] == 0, held  # type: ignore[index]
    copy = work / "copy-of-w.log"
    shutil.copyfile(log, copy)
    other = _dllogger_plain(work / "other.log", 0.2, 30)
    cases.append(HostileCase(
        "import-logs/twice/into-the-session",
        cli([*ngc, "--logs", str(copy), "--facts", str(facts), "--session", "held"]),
        (str(copy), "already imported", "held"), LOG_ERRORS))  # fmt: skip
    cases.append(HostileCase(
        "import-logs/twice/same-file-into-the-session",
        cli([*ngc, "--logs", str(log), "--facts", str(facts), "--session", "held"]),
        (str(log), "already imported"), LOG_ERRORS))  # fmt: skip
    add("twice/one-call", [*ngc, "--logs", str(log), "--logs", str(other), str(copy),
        "--facts", str(facts)], str(copy), "the same bytes as")  # fmt: skip
    two_nodes = ["--model", "resnet50", "--batch", "256", "--topology", "2n2g", *window]
    add("twice/one-group", [*ngc, "--logs", str(log), str(log), *two_nodes], str(log),
        "given twice")  # fmt: skip
    add("twice/two-nodes", [*ngc, "--logs", str(log), str(copy), *two_nodes], str(copy),
        "the same bytes as")  # fmt: skip
    # notes and facts with control characters; other bad facts
    for name, char in CONTROL.items():
        if char == "\x00":
            continue  # no NUL in a command-line argument
        add(f"note/cli/{name}", [*ngc, "--logs", str(log), "--facts", str(facts), "--note",
            f"a{char}b"], "note")  # fmt: skip
        noted = work / f"facts-note-{name}.yaml"
        escaped = char.encode("unicode_escape").decode()
        noted.write_text(facts.read_text() + f'note: "a{escaped}b"\n')
        add(f"note/facts/{name}", [*ngc, "--logs", str(log), "--facts", str(noted)], str(noted),
            "note")  # fmt: skip
    add("bad/topology", [*ngc, "--logs", str(log), "--model", "resnet50", "--batch", "256",
        "--topology", "2n3g", *window], "topology")  # fmt: skip
    add("bad/source", ["import-logs", "--source", "ngc-pytorch2", "--logs", str(log), "--facts",
        str(facts), "--results", str(results)], "ngc-pytorch2")  # fmt: skip
    add("bad/model", [*ngc, "--logs", str(log), "--model", "gpt2", "--batch", "256", *window],
        "gpt2")  # fmt: skip
    add("bad/missing-log", [*ngc, "--logs", str(work / "nope.log"), "--facts", str(facts)],
        str(work / "nope.log"))  # fmt: skip
    return cases


def test_hostile_imports_corpus(tmp_path: Path) -> None:
    cases = [*import_file_cases(tmp_path), *import_logs_cases(tmp_path)]
    kinds = run_corpus(cases).print_summary("imports")
    assert len(cases) >= 250
    assert kinds["traceback"] == 0 and kinds["silent"] == 0 and kinds["vague"] == 0
    assert kinds[CLEAR] == len(cases) and kinds[ACCEPTED] == 0
    # nothing was imported by a refused case: only the session the corpus set up holds a run
    sessions = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert sessions == ["held"]


def test_the_good_files_import(tmp_path: Path) -> None:
    """The corpus's starting points are accepted: each refusal above is the edit's doing."""
    assert len(load_import(PUBLISHED / "dle-pytorch-resnet50-a100-v100.csv").figures) == 8
    path = tmp_path / "t.yaml"
    path.write_text("\n".join(line for line in TABLE.splitlines() if not line.startswith("#")))
    assert len(load_import(path).figures) == 13


# --------------------------------------------------------------------------------------------
# Implausible numbers inside a log: refused by the one-door verification (driver/verify/)


def dllogger_json(stamps: list[str], steps: list[int]) -> str:
    lines = ['DLLL {"timestamp": "1700000000.0", "type": "LOG", "step": "PARAMETER", '
             '"data": {"arch": "resnet50", "batch_size": 64}}']  # fmt: skip
    for step, stamp in zip(steps, stamps, strict=True):
        record = {"timestamp": stamp, "type": "LOG", "step": [0, step], "data": {"loss": 7.0}}
        lines.append("DLLL " + json.dumps(record))
    return "\n".join(lines) + "\n"


def oneflow_cnn(stamps: list[str], steps: list[int]) -> str:
    return "".join(
        f"train: epoch 0, iter {step}, loss: 6.9, top_1: 0.0, top_k: 0.0, samples/s: 512.000 "
        f"{stamp}\n"
        for step, stamp in zip(steps, stamps, strict=True)
    )


def dllogger_plain(steps: list[int]) -> str:
    """DLLogger's StdOutBackend lines, one step each 0.25 s."""
    return "".join(
        f"DLL 2020-09-15 14:{29 + i // 240:02d}:{(i % 240) * 0.25:09.6f} - Epoch: 0 "
        f"Iteration: {step}  train.loss : 6.80420\n"
        for i, step in enumerate(steps)
    )


def plain_iteration_cases(root: Path) -> list[HostileCase]:
    """A StdOutBackend log of 20 warm-up and 100 measured steps with one line edited: each is
    refused naming the log and the line (node0.log: the log under a header line), never
    measured."""
    steps = list(range(1, 121))
    broken = {
        "iteration-60-again-after-20": (steps[:20] + [60] + steps[20:], "node0.log:23"),
        "iteration--5-between-4-and-6": (steps[:4] + [-5] + steps[5:], "node0.log:6"),
    }
    cases = []
    for name, (numbers, line) in broken.items():
        log = root / "plain" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(dllogger_plain(numbers))
        facts = Facts(model="resnet50", batch=64, warmup_steps=20, measured_steps=100)
        session = root / "plain-results" / name
        cases.append(HostileCase(
            f"import-logs/plausibility/ngc-pytorch-plain/{name}",
            lambda s=session, f=facts, p=log: import_run(s, "ngc-pytorch", f, [p]),
            (str(log), line), (ImportLogsError,)))  # fmt: skip
    return cases


def plausibility_cases(root: Path) -> list[HostileCase]:
    """One run of 4 warm-up and 8 measured steps of batch 64, every step logged, each log
    broken in one way; ``import_run`` must refuse it with an ImportLogsError naming the log."""
    steps = list(range(1, 13))
    stamps = [f"{1_700_000_000 + 0.25 * step:.6f}" for step in steps]
    later = f"{1_700_000_000 + 0.25 * 13:.6f}"
    broken = {
        "timestamp-1e308-last": (stamps[:-1] + ["1e308"], steps),
        "timestamp-1e308-inside": (stamps[:8] + ["1e308"] + stamps[9:], steps),
        "step-going-back": (stamps, steps[:5] + [-5] + steps[6:]),  # -5 between 5 and 7
        "last-step-twice": (stamps + [later], steps + [12]),
        "last-step-twice-same-time": (stamps + [stamps[-1]], steps + [12]),
        # an iteration no source counts: a negative one first, or one repeated inside
        "negative-iteration-first": ([f"{1_700_000_000:.6f}", *stamps], [-1, *steps]),
        "negative-iteration-before-the-window": (
            [*stamps[:2], stamps[2], *stamps[2:]], [*steps[:2], -3, *steps[2:]]),
        "iteration-repeated-inside": (
            [*stamps[:6], f"{1_700_000_000 + 0.25 * 6 + 0.1:.6f}", *stamps[6:]],
            [*steps[:6], 6, *steps[6:]]),
    }
    cases = []
    for source, write in (("ngc-pytorch", dllogger_json), ("oneflow-benchmark", oneflow_cnn)):
        for name, (times, numbers) in broken.items():
            if source == "ngc-pytorch" and name == "last-step-twice-same-time":
                # DLLogger writes one record per verbosity level: a step twice in a row within
                # a moment is how real logs look (tests/fixtures/upstream/ngc-pytorch/ok.node0.log)
                continue
            log = root / "plausibility" / source / f"{name}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(write(times, numbers))
            facts = Facts(model="resnet50", batch=64, warmup_steps=4, measured_steps=8)
            session = root / "plausibility-results" / f"{source}-{name}"
            cases.append(HostileCase(
                f"import-logs/plausibility/{source}/{name}",
                lambda s=session, src=source, f=facts, p=log: import_run(s, src, f, [p]),
                (str(log),), (ImportLogsError,)))  # fmt: skip
    return cases


def test_log_plausibility_cases(tmp_path: Path) -> None:
    # the same logs, unbroken, import: each case below fails by its one edit
    steps = list(range(1, 13))
    stamps = [f"{1_700_000_000 + 0.25 * step:.6f}" for step in steps]
    facts = Facts(model="resnet50", batch=64, warmup_steps=4, measured_steps=8)
    for source, write in (("ngc-pytorch", dllogger_json), ("oneflow-benchmark", oneflow_cnn)):
        log = tmp_path / f"good-{source}.log"
        log.write_text(write(stamps, steps))
        record = import_run(tmp_path / f"good-{source}", source, facts, [log])
        assert record.throughput == pytest.approx(8 * 64 / (8 * 0.25), rel=1e-9)
    good = tmp_path / "good-plain.log"
    good.write_text(dllogger_plain(list(range(1, 121))))
    facts = Facts(model="resnet50", batch=64, warmup_steps=20, measured_steps=100)
    assert import_run(tmp_path / "good-plain", "ngc-pytorch", facts, [good]).throughput == (
        pytest.approx(100 * 64 / (100 * 0.25), rel=1e-9)
    )
    cases = plausibility_cases(tmp_path) + plain_iteration_cases(tmp_path)
    counts = run_corpus(cases)
    kinds = counts.print_summary("import-logs plausibility")
    assert kinds[CLEAR] == len(cases), [v.case.name for v in counts.failures()]


# --------------------------------------------------------------------------------------------
# Markdown that a legal value could open in report.md: accepted, and shown as text


def report_markdown(root: Path, name: str, old: str, new: str) -> tuple[Path, Path]:
    path = root / name / "f.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(replaced(TABLE, old, new))
    return path, root / name / "out"


def test_markdown_breakouts_in_report_md_are_escaped(tmp_path: Path) -> None:
    """A URL holding ``)](`` is an http(s) URL, and a publisher's name may hold brackets and
    stars: each is legal input, and each reaches report.md as text, opening no link of its own."""
    rows = {
        "url-breakout": ("url: https://github.com/Oneflow-Inc/DLPerf/tree/master/reports",
                         "url: https://x.org/a)](javascript:alert(1))",
                         "https://x.org/a)\\](javascript:alert(1))"),
        "publisher-link-and-bold": ("publisher: DLPerf v1.0",
                                    "publisher: '[DLPerf](https://evil.example) **v1.0**'",
                                    "\\[DLPerf\\](https://evil.example) \\*\\*v1.0\\*\\*"),
    }  # fmt: skip
    cases = []
    for name, (old, new, shown) in rows.items():
        path, out = report_markdown(tmp_path, name, old, new)

        def escaped(_result: object, out: Path = out, shown: str = shown) -> bool:
            text = (out / "report.md").read_text()
            unescaped = text.replace("\\](", "")
            return shown in text and "](javascript" not in unescaped and "[DLPerf](" not in text

        cases.append(HostileCase(f"report/markdown/{name}",
                                 cli(["report", str(path), "--out", str(out)]), (str(path),),
                                 IMPORT_ERRORS, accepted=escaped))  # fmt: skip
    counts = run_corpus(cases)
    kinds = counts.print_summary("report markdown")
    assert kinds[ACCEPTED] == len(cases), [(v.case.name, v.detail) for v in counts.failures()]
