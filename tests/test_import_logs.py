"""``dlperf import-logs``: logs the kit did not launch, re-measured from facts given by the user.

The real log is the one tf-models-official 2.20.0 printed when the kit ran its ResNet-50 on CPU
(``fixtures/upstream/real``), with the kit's run-header line removed: exactly the release's own
output. Its 'Run stats' line holds the release's unrounded step timestamps, the figure it implies.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from driver.analysis.compare import compare_sides, load_side
from driver.analysis.factor import factor_report
from driver.core.importlogs import IMPORTED, WORKER0
from driver.core.runner import evaluate
from driver.core.summary import summarize
from driver.frontend.cli import main
from driver.model.results import RepeatLogs, Session
from driver.sources.logfacts import ImportLogsError, load_facts

FIXTURES = Path(__file__).parent / "fixtures"
REAL = FIXTURES / "upstream" / "real" / "tensorflow-models-pypi"
GLUON = Path(__file__).parent / "fixtures" / "upstream" / "real" / "gluon-nlp" / "bert.log"
PADDLE = Path(__file__).parent / "fixtures" / "upstream" / "paddle-models"
STAMP = re.compile(r"batch_index: (\d+), timestamp: (\d+\.\d+)")


def upstream_output(tmp_path: Path) -> Path:
    """The release's own log: the fixture without the kit's header line."""
    lines = (REAL / "resnet50.log").read_text().splitlines(keepends=True)
    assert lines[0].startswith("DLPERF-UPSTREAM ")
    path = tmp_path / "published" / "resnet50.log"
    path.parent.mkdir(exist_ok=True)
    path.write_text("".join(lines[1:]))
    assert "DLPERF" not in path.read_text()
    return path


def records(session: Path) -> list:
    return [record for _case, record, _folder in Session(session).records()]


def test_real_log_without_header_matches_the_figure_the_source_implies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = upstream_output(tmp_path)
    session = tmp_path / "imported"
    argv = ["import-logs", "--source", "tensorflow-models-pypi", "--logs", str(log),
            "--model", "resnet50", "--batch", "2", "--warmup-steps", "10",
            "--measured-steps", "20",
            "--results", str(session.parent), "--session", session.name]  # fmt: skip
    assert main(argv) == 0
    assert IMPORTED in capsys.readouterr().out
    (record,) = records(session)
    stamps = {int(step): float(t) for step, t in STAMP.findall(log.read_text())}
    implied = 20 * 2 / (stamps[30] - stamps[10])  # the release's own unrounded timestamps
    assert record.throughput == pytest.approx(implied, rel=1e-3)
    assert record.runtime == "imported" and record.extra["imported"] == IMPORTED
    stored = Session(session).repeat_dir(next(Session(session).cases()), 1) / "node0.log"
    original = log.read_bytes()
    assert stored.read_bytes().endswith(original)  # the original bytes, after the header
    assert record.extra["imported_from"][0]["sha256"] == hashlib.sha256(original).hexdigest()
    case_json = json.loads(next(session.rglob("case.json")).read_text())
    assert case_json["variant"] == "imported" and case_json["source"] == "tensorflow-models-pypi"

    # report, compare and factor read it like any session; the report marks it.
    assert main(["report", str(session)]) == 0
    report = capsys.readouterr().out
    assert "(i)" in report and f"{IMPORTED} (dlperf import-logs)" in report
    side = load_side(str(session), tmp_path, tmp_path)
    rows, _text = compare_sides(side, side)
    assert [row["case_id"] for row in rows] == [record.case_id]

    # The same log as the kit ran it (header and all) beside it: factor variant default/imported.
    kit = tmp_path / "kit"
    kit_case = next(Session(session).cases())
    kit_case = type(kit_case).from_dict({**kit_case.to_dict(), "variant": "default"})
    kit_session = Session.open(kit)
    kit_session.save_case(kit_case)
    folder = kit_session.fresh_repeat_dir(kit_case, 1)
    (folder / "node0.log").write_text((REAL / "resnet50.log").read_text())
    measurement, parsed = evaluate(kit_case, "tf-timehistory", RepeatLogs.read(folder).texts, 2)
    header = parsed.header
    kit_record = record.model_copy(
        update={"case_id": kit_case.id, "extra": {}, "measurement": measurement,
                "header": header, "runtime": "local"}
    )  # fmt: skip
    kit_session.write_record(folder, kit_record)
    data, _text = factor_report(
        [load_side(str(kit), tmp_path, tmp_path), side], "variant", "default", "imported"
    )
    assert len(data["pairs"]) == 1 and data["pairs"][0]["ratio"] == pytest.approx(1.0, rel=1e-9)


def test_real_gluon_nlp_log_without_header(tmp_path: Path) -> None:
    # gluon-nlp's pinned script printed "[step N] ... time=T, latency=L ms/batch" at N = 9, 19,
    # 29 (steps finished; (N + 1) % 10 == 0): the window is 9 warm-up + 20 measured steps.
    text = GLUON.read_text()
    assert "DLPERF" not in text
    session = tmp_path / "s"
    argv = ["import-logs", "--source", "gluon-nlp", "--logs", str(GLUON), "--model", "bert",
            "--batch", "4", "--dataset", "synthetic", "--warmup-steps", "9",
            "--measured-steps", "20",
            "--results", str(session.parent), "--session", session.name]  # fmt: skip
    assert main(argv) == 0
    (record,) = records(session)
    latency = {int(n): float(ms) / 1000 for n, ms in re.findall(
        r"\[step (\d+)\].*latency=(\d+\.\d+) ms/batch", text)}  # fmt: skip
    implied = 20 * 4 / (10 * latency[19] + 10 * latency[29])  # the source's own per-batch times
    assert record.throughput == pytest.approx(implied, rel=1e-3)
    assert record.measurement.samples == 80
    # A window whose boundaries the log never prints is refused, not guessed.
    argv[argv.index("9")] = "10"
    assert main([*argv[:-1], "t"]) == 2
    assert not (session.parent / "t").exists()


def test_real_paddle_models_log_without_header(tmp_path: Path) -> None:
    # PaddleCV train.py at the pinned commit, as it ran on CPU (2 trainers, batch 2; trainer 0's
    # workerlog.0 after the launcher's output): one "elapse T sec" per batch, batch B ending
    # step B + 1, so 4 warm-up + 8 measured steps are batches 4..11.
    lines = (PADDLE / "real-cpu.node0.log").read_text().splitlines(keepends=True)
    assert lines[0].startswith("DLPERF-UPSTREAM ")
    log = tmp_path / "workerlog.0"
    log.write_text("".join(lines[1:]))
    session = tmp_path / "s"
    argv = ["import-logs", "--source", "paddle-models", "--logs", str(log), "--model",
            "resnet50", "--topology", "1n2g", "--batch", "2", "--dataset", "real",
            "--warmup-steps", "4", "--measured-steps", "8",
            "--results", str(session.parent), "--session", session.name]  # fmt: skip
    assert main(argv) == 0
    (record,) = records(session)
    batch_line = r"train batch \d+\].*elapse (\d+\.\d+) sec"
    elapse = [float(t) for t in re.findall(batch_line, log.read_text())]
    assert len(elapse) == 12
    implied = 8 * 2 * 2 / sum(elapse[4:12])  # both trainers' samples over trainer 0's batch times
    assert record.throughput == pytest.approx(implied, rel=1e-3)
    assert record.measurement.samples == 32


def test_real_paddle_bert_log_without_header(tmp_path: Path) -> None:
    # PaddleNLP BERT train.py at the pinned commit, as it ran on CPU (one trainer over 2 CPU
    # places, batch 2 each): "speed: X steps/s" at steps 10, 20, 30, the source's own rate.
    lines = (PADDLE / "real-cpu-bert.node0.log").read_text().splitlines(keepends=True)
    assert lines[0].startswith("DLPERF-UPSTREAM ")
    log = tmp_path / "bert.log"
    log.write_text("".join(lines[1:]))
    session = tmp_path / "s"
    argv = ["import-logs", "--source", "paddle-models", "--logs", str(log), "--model", "bert",
            "--topology", "1n2g", "--batch", "2", "--dataset", "real",
            "--warmup-steps", "10", "--measured-steps", "20",
            "--results", str(session.parent), "--session", session.name]  # fmt: skip
    assert main(argv) == 0
    (record,) = records(session)
    speeds = {int(n): float(x) for n, x in re.findall(
        r"step: (\d+),.*speed: (\d+\.\d+) steps/s", log.read_text())}  # fmt: skip
    implied = 20 * 2 * 2 / (10 / speeds[20] + 10 / speeds[30])
    assert record.throughput == pytest.approx(implied, rel=1e-3)
    assert record.measurement.reported_by_source


def _dllogger_plain(
    path: Path, step_s: float, iterations: int, every: int = 1, batch: int = 256
) -> Path:
    """DLLogger StdOutBackend lines as DeepLearningExamples ConvNets print them (rank 0)."""
    lines = [f"DLL 2020-09-15 14:29:10.000000 - PARAMETER arch : resnet50  batch_size : {batch}"]
    for i in range(every, iterations + 1, every):
        seconds = 10 + i * step_s
        stamp = f"2020-09-15 14:{29 + int(seconds // 60):02d}:{seconds % 60:09.6f}"
        lines.append(
            f"DLL {stamp} - Epoch: 0 Iteration: {i}  train.loss : 6.80420  "
            f"train.total_ips : 11124.52 img/s"
        )
        if i % 20 == 0:  # a validation line in between is not a training step
            lines.append(f"DLL {stamp} - Epoch: 0 Iteration: {i} Validation Iteration: 1  v : 1")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_worker0_only_dllogger_plain_text(tmp_path: Path) -> None:
    # 2 nodes x 8 GPUs, batch 256, only worker 0's log kept; one step every 0.25 s.
    log = _dllogger_plain(tmp_path / "worker0.log", 0.25, 60)
    facts = tmp_path / "facts.yaml"
    facts.write_text(
        "model: resnet50\ntopology: 2n16g\nbatch: 256\nprecision: amp\nwarmup_steps: 20\n"
        "measured_steps: 40\nworker0_only: true\nnote: NGC 20.06 published log\n"
    )
    session = tmp_path / "s"
    argv = ["import-logs", "--source", "ngc-pytorch", "--logs", str(log), "--facts", str(facts),
            "--results", str(session.parent), "--session", session.name]  # fmt: skip
    assert main(argv) == 0
    (record,) = records(session)
    assert record.throughput == pytest.approx(40 * 256 * 16 / (40 * 0.25), rel=1e-9)
    assert record.extra["imported"] == f"{IMPORTED}, every figure {WORKER0}"
    assert record.extra["facts"]["note"] == "NGC 20.06 published log"
    (summary,) = summarize((c, r) for c, r, _ in Session(session).records())
    assert WORKER0 in summary.imported and summary.case.topology.label == "2n16g"


def test_worker0_only_per_node_logging_scales_by_the_nodes(tmp_path: Path) -> None:
    # tensorflow/models logs one timeline per node: worker 0's stands for the 2 nodes.
    log = upstream_output(tmp_path)
    session = tmp_path / "s"
    argv = ["import-logs", "--source", "tensorflow-models-pypi", "--logs", str(log),
            "--model", "resnet50", "--topology", "2n2g", "--batch", "2", "--warmup-steps", "10",
            "--measured-steps", "20", "--worker0-only",
            "--results", str(session.parent), "--session", session.name]  # fmt: skip
    assert main(argv) == 0
    (record,) = records(session)
    seconds = [float(s) for s in re.findall(r"TimeHistory: (\d+\.\d+) seconds", log.read_text())]
    assert record.measurement.samples == 2 * 20 * 2
    assert record.throughput == pytest.approx(80 / (seconds[1] + seconds[2]), rel=1e-12)


def test_logs_every_100_steps_import(tmp_path: Path) -> None:
    # A published log printing every 100 steps: the window is given in hundreds.
    log = _dllogger_plain(tmp_path / "every100.log", 0.2, 1200, every=100, batch=128)
    session = tmp_path / "s"
    argv = ["import-logs", "--source", "ngc-pytorch", "--logs", str(log), "--model", "resnet50",
            "--batch", "128", "--warmup-steps", "200", "--measured-steps", "1000",
            "--results", str(session.parent), "--session", session.name]  # fmt: skip
    assert main(argv) == 0
    (record,) = records(session)
    assert record.throughput == pytest.approx(1000 * 128 / (1000 * 0.2), rel=1e-9)
    # The interval-stability check has its slices at the logged steps: a steady run, CV 0.
    assert record.measurement.interval_cv == pytest.approx(0.0, abs=1e-9)


def test_several_runs_become_repeats(tmp_path: Path) -> None:
    a = _dllogger_plain(tmp_path / "a.log", 0.25, 30, batch=64)
    b = _dllogger_plain(tmp_path / "b.log", 0.20, 30, batch=64)
    session = tmp_path / "s"
    argv = ["import-logs", "--source", "ngc-pytorch", "--logs", str(a), "--logs", str(b),
            "--model", "resnet50", "--batch", "64", "--warmup-steps", "10",
            "--measured-steps", "20",
            "--results", str(session.parent), "--session", session.name]  # fmt: skip
    assert main(argv) == 0
    got = sorted((r.repeat, round(r.throughput, 6)) for r in records(session))
    assert got == [(1, 256.0), (2, 320.0)]


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (
            [],
            "the command line: batch: missing; this key is required (set it in the facts file or "
            "with --batch)",
        ),
        (["--batch", "2", "--topology", "3n4g"], "total devices must be a positive multiple"),
        (["--batch", "2", "--worker0-only"], "--worker0-only is for multi-node runs"),
        (["--batch", "2", "--topology", "2n2g"], "2n2g needs 2 log(s)"),
        (["--batch", "2", "--measured-steps", "30"], "cannot measure it with these facts"),
    ],
)
def test_bad_facts_exit_2_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], fragment: str
) -> None:
    log = upstream_output(tmp_path)
    session = tmp_path / "s"
    argv = ["import-logs", "--source", "tensorflow-models-pypi", "--logs", str(log),
            "--model", "resnet50", "--warmup-steps", "10", "--measured-steps", "20",
            "--results", str(session.parent), "--session", session.name, *extra]  # fmt: skip
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err
    assert not session.exists()  # nothing half-imported


def test_facts_file_errors_name_file_and_field(tmp_path: Path) -> None:
    facts = tmp_path / "facts.yaml"
    facts.write_text("model: resnet50\nbatch: 2\nwarmup_steps: 10\nmeasured_steps: 20\ngpus: 8\n")
    with pytest.raises(ImportLogsError, match=r"facts.yaml: gpus: unknown key; allowed keys: b"):
        load_facts(facts, {})
    facts.write_text("- a list\n")
    with pytest.raises(ImportLogsError, match="must be a mapping"):
        load_facts(facts, {})


def test_a_kit_log_is_not_imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["import-logs", "--source", "tensorflow-models-pypi",
            "--logs", str(REAL / "resnet50.log"), "--model", "resnet50", "--batch", "2",
            "--warmup-steps", "10", "--measured-steps", "20",
            "--results", str(tmp_path), "--session", "s"]  # fmt: skip
    assert main(argv) == 2
    assert "already has a DLPERF-UPSTREAM run header" in capsys.readouterr().err


def test_a_release_of_imported_logs_audits_from_them(tmp_path: Path) -> None:
    from driver.release.audit import audit
    from driver.release.release import release

    session = tmp_path / "imported"
    argv = ["import-logs", "--source", "gluon-nlp", "--logs", str(GLUON), "--model", "bert",
            "--batch", "4", "--dataset", "synthetic", "--warmup-steps", "9",
            "--measured-steps", "20",
            "--results", str(session.parent), "--session", session.name]  # fmt: skip
    assert main(argv) == 0
    version = release(
        "v0.0-imported", [session], reports_root=tmp_path / "reports", printer=lambda _l: None,
        compute_flops=False,
    )  # fmt: skip
    readme = (version / "README.md").read_text()
    assert "(i)" in readme and IMPORTED in readme
    report = audit(version, recompute_flops=False)
    assert report.ok, report.text()


def test_worker0_only_per_process_logging_scales_by_the_nodes(tmp_path: Path) -> None:
    # pytorch/examples under torchrun --tee: every process of node 0 logs with its prefix; with
    # worker 0's log only, node 0's 2 processes stand for the 2 nodes' 4 (samples x 2).
    lines = []
    for index in range(9, 40, 10):  # "[i/N]" is 0-based: steps 10, 20, 30, 40 finished
        for local in (0, 1):
            avg = 0.5 + 0.1 * local  # running mean batch time: process 1 is the slower one
            lines.append(f"[default{local}]:Epoch: [0][{index:4d}/5005]\tTime  {avg:.3f} "
                         f"({avg:6.3f})\tData  0.001 ( 0.001)\tLoss 6.9 (6.9)")  # fmt: skip
    log = tmp_path / "node0.log"
    log.write_text("\n".join(lines) + "\n")
    session = tmp_path / "s"
    argv = ["import-logs", "--source", "pytorch-examples", "--logs", str(log), "--model",
            "resnet50", "--topology", "2n4g", "--batch", "32", "--warmup-steps", "10",
            "--measured-steps", "20", "--worker0-only",
            "--results", str(session.parent), "--session", session.name]  # fmt: skip
    assert main(argv) == 0
    (record,) = records(session)
    assert record.measurement.ranks == 2 and record.measurement.world_size == 4
    # 20 steps x 32 x 4 devices over the slowest process's 20 x 0.6 s.
    assert record.throughput == pytest.approx(20 * 32 * 4 / (20 * 0.6), rel=1e-9)


# --------------------------------------------------------------------------------------------
# Conflicting facts: the command line, the facts file and the log's own printed parameters must
# agree; a conflict is refused naming both values and where each came from.


def without_header(source: Path, target: Path) -> Path:
    lines = source.read_text().splitlines(keepends=True)
    assert lines[0].startswith("DLPERF-UPSTREAM ")
    target.write_text("".join(lines[1:]))
    return target


@pytest.mark.parametrize(
    "fact, cli, in_file",
    [(["--batch", "8"], "--batch 8", "256"),
     (["--topology", "1n8g"], "--topology '1n8g'", "'1n1g'"),
     (["--precision", "amp"], "--precision 'amp'", "'fp32'"),
     (["--measured-steps", "40"], "--measured-steps 40", "20"),
     (["--xla"], "--xla True", "False")],
)  # fmt: skip
def test_a_fact_given_twice_with_two_values_is_refused(
    tmp_path: Path, fact: list[str], cli: str, in_file: str
) -> None:
    facts = tmp_path / "facts.yaml"
    facts.write_text(
        "model: resnet50\ntopology: 1n1g\nbatch: 256\nprecision: fp32\nxla: false\n"
        "warmup_steps: 10\nmeasured_steps: 20\n"
    )
    overrides = {flag: None for flag in ("batch", "topology", "precision", "measured_steps", "xla")}
    name = fact[0][2:].replace("-", "_")
    overrides[name] = True if len(fact) == 1 else fact[1]
    if name in ("batch", "measured_steps"):
        overrides[name] = int(fact[1])
    with pytest.raises(ImportLogsError) as error:
        load_facts(facts, overrides)
    assert str(error.value) == (
        f"{name}: {cli} on the command line but {in_file} in {facts}; give each fact once "
        f"(drop {fact[0]} or change the facts file)"
    )
    # the same value twice (another spelling of the same topology included) is one fact
    same = {**dict.fromkeys(overrides), "batch": 256, "topology": "1n1g", "measured_steps": 20}
    loaded = load_facts(facts, same)
    assert loaded.batch == 256 and loaded.origin("batch") == "--batch on the command line"
    assert loaded.origin("warmup_steps") == f"{facts}: warmup_steps"
    assert loaded.origin("dataset") == "the default"


def test_the_logs_printed_batch_is_not_overridden(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the review's case: --batch 8 against the facts file's and the log's own batch_size : 256
    log = _dllogger_plain(tmp_path / "w.log", 0.25, 30)
    facts = tmp_path / "facts.yaml"
    facts.write_text("model: resnet50\nbatch: 256\nwarmup_steps: 10\nmeasured_steps: 20\n")
    session = tmp_path / "s"
    base = ["import-logs", "--source", "ngc-pytorch", "--logs", str(log),
            "--results", str(tmp_path), "--session", "s"]  # fmt: skip
    assert main([*base, "--facts", str(facts), "--batch", "8"]) == 2
    assert "batch: --batch 8 on the command line but 256 in" in capsys.readouterr().err
    window = ["--warmup-steps", "10", "--measured-steps", "20", "--model", "resnet50"]
    assert main([*base, *window, "--batch", "8"]) == 2
    assert capsys.readouterr().err == (
        f"error: {log}:1: the log prints batch_size : 256 (a per-device batch of 256), but batch "
        "is 8 (--batch on the command line); give the facts the run had (or check that this is "
        "the log of that run)\n"
    )
    facts.write_text("model: resnet50\nbatch: 8\nwarmup_steps: 10\nmeasured_steps: 20\n")
    assert main([*base, "--facts", str(facts)]) == 2
    assert f"but batch is 8 ({facts}: batch)" in capsys.readouterr().err
    assert not session.exists()  # nothing half-imported
    assert main([*base, *window, "--batch", "256"]) == 0
    (record,) = records(session)
    assert record.throughput == pytest.approx(20 * 256 / (20 * 0.25), rel=1e-9)  # 1024


PADDLE_CV = ["--source", "paddle-models", "--model", "resnet50", "--topology", "1n2g",
             "--batch", "2", "--dataset", "real", "--warmup-steps", "4",
             "--measured-steps", "8"]  # fmt: skip
PADDLE_BERT = ["--source", "paddle-models", "--model", "bert", "--topology", "1n2g",
               "--batch", "2", "--dataset", "real", "--warmup-steps", "10",
               "--measured-steps", "20"]  # fmt: skip
GLUON_BERT = ["--source", "gluon-nlp", "--model", "bert", "--batch", "4", "--warmup-steps", "9",
              "--measured-steps", "20"]  # fmt: skip


def swap(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


@pytest.mark.parametrize(
    "log, argv, printed",
    [
        ("paddle-cv", swap(PADDLE_CV, "--batch", "4"),
         ":14: the log prints batch_size : 2 (a per-device batch of 2), but batch is 4"),
        ("paddle-cv", swap(swap(PADDLE_CV, "--model", "bert"), "--warmup-steps", "10"),
         ":40: the log prints model : ResNet50 (the model resnet50), but model is 'bert'"),
        ("paddle-cv", [*PADDLE_CV, "--precision", "amp"],
         ":63: the log prints use_fp16 : False (fp32), but precision is 'amp' (--precision on"),
        ("paddle-bert", swap(PADDLE_BERT, "--batch", "3"),
         ":2: the log prints batch_size: 2 (a per-device batch of 2), but batch is 3"),
        ("gluon", swap(GLUON_BERT, "--batch", "2"),
         ":7: the log prints total_batch_size=4 (a per-device batch of 4 (4 over 1 devices)), "
         "but batch is 2"),
        ("gluon", [*GLUON_BERT, "--precision", "amp"],
         ":7: the log prints dtype='float32' (fp32), but precision is 'amp'"),
        ("ngc-json", ["--source", "ngc-pytorch", "--model", "resnet50", "--batch", "32",
                      "--warmup-steps", "2", "--measured-steps", "4"],
         ':4: the log prints "batch_size": 64 (a per-device batch of 64), but batch is 32'),
    ],
)  # fmt: skip
def test_a_fact_the_logs_own_parameters_contradict_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], log: str, argv: list[str], printed: str
) -> None:
    path = {
        "paddle-cv": lambda: without_header(PADDLE / "real-cpu.node0.log", tmp_path / "w.0"),
        "paddle-bert": lambda: without_header(PADDLE / "real-cpu-bert.node0.log", tmp_path / "b"),
        "gluon": lambda: GLUON,
        "ngc-json": lambda: without_header(
            Path(__file__).parent / "fixtures" / "upstream" / "ngc-pytorch" / "ok.node0.log",
            tmp_path / "ngc.log",
        ),
    }[log]()
    common = ["--logs", str(path), "--results", str(tmp_path), "--session", "s"]
    assert main(["import-logs", *argv, *common]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}{printed}"), err
    assert not (tmp_path / "s").exists()


def test_nested_configuration_dumps_are_not_read_as_the_runs_parameters(tmp_path: Path) -> None:
    from driver.sources.logfacts import printed_parameters

    # tf-models prints its default params ('batch_size': 128 under train_dataset) and then the
    # overridden ones: neither is a flat parameter of the run, so neither is compared
    text = upstream_output(tmp_path).read_text()
    assert "'batch_size': 128" in text
    assert printed_parameters(text, 1) == []
    # a batch counted in tokens is not a batch of samples
    tokens = "batch_size: 4096\nin_tokens: True\n"
    assert printed_parameters(tokens, 1) == []


def test_the_same_log_is_imported_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _dllogger_plain(tmp_path / "a.log", 0.25, 30, batch=64)
    copy = tmp_path / "copy-of-a.log"
    copy.write_bytes(a.read_bytes())
    b = _dllogger_plain(tmp_path / "b.log", 0.20, 30, batch=64)
    argv = ["import-logs", "--source", "ngc-pytorch", "--model", "resnet50", "--batch", "64",
            "--warmup-steps", "10", "--measured-steps", "20",
            "--results", str(tmp_path)]  # fmt: skip
    assert main([*argv, "--session", "s", "--logs", str(a)]) == 0
    capsys.readouterr()
    # again, under another name, into the same session: refused, naming the repeat holding it
    assert main([*argv, "--session", "s", "--logs", str(copy)]) == 2
    digest = hashlib.sha256(a.read_bytes()).hexdigest()
    err = capsys.readouterr().err
    assert err.startswith(f"error: {copy}: this log (SHA-256 {digest[:16]}...) is already ")
    assert f"repeat 1 (imported from {a.resolve()}); a log is one run: import it once" in err
    assert len(records(tmp_path / "s")) == 1
    # twice in one call: refused before the first is imported
    assert main([*argv, "--session", "t", "--logs", str(a), "--logs", str(b), str(copy)]) == 2
    assert f"{copy}: the same bytes as {a}" in capsys.readouterr().err
    assert main([*argv, "--session", "t", "--logs", str(a), "--logs", str(a)]) == 2
    assert f"{a}: given twice" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()
    # the same bytes as two nodes' logs of one run
    two = [*swap(argv, "--batch", "64"), "--topology", "2n2g", "--session", "u"]
    assert main([*two, "--logs", str(a), str(copy)]) == 2
    assert f"{copy}: the same bytes as {a}" in capsys.readouterr().err
    # another log is another run
    assert main([*argv, "--session", "s", "--logs", str(b)]) == 0
    assert sorted(r.repeat for r in records(tmp_path / "s")) == [1, 2]


def test_a_note_with_a_control_character_is_refused(tmp_path: Path) -> None:
    facts = tmp_path / "facts.yaml"
    facts.write_text(
        'model: resnet50\nbatch: 2\nwarmup_steps: 10\nmeasured_steps: 20\nnote: "a\\nb"\n'
    )
    with pytest.raises(ImportLogsError, match=r"facts.yaml: note: holds U\+000A LINE FEED"):
        load_facts(facts, {})


def test_imported_logs_sit_on_the_hardware_they_are_given_and_never_beside_others(
    tmp_path: Path,
) -> None:
    """`--hardware` puts imported logs on their machine: a 1n1g and a 1n8g (worker 0) run of
    V100s sit beside DLPerf's published V100 figures, speedup against their own 1n1g; without
    it, the same logs stay on "unknown device", apart from everything."""
    from driver.release.imported import figure_summaries
    from driver.verify.folder import verify_sessions

    one = _dllogger_plain(tmp_path / "1n1g.log", 0.25, 30, batch=128)  # 512 samples/s
    eight = _dllogger_plain(tmp_path / "1n8g.log", 0.28, 30, batch=128)  # 8 x 457.14
    v100 = "NVIDIA V100-SXM2-16GB"
    common = ["--source", "ngc-pytorch", "--model", "resnet50", "--batch", "128",
              "--warmup-steps", "10", "--measured-steps", "20", "--results", str(tmp_path)]
    assert main(["import-logs", *common, "--logs", str(one), "--session", "on",
                 "--hardware", v100]) == 0
    assert main(["import-logs", *common, "--logs", str(eight), "--topology", "1n8g",
                 "--session", "on", "--hardware", v100]) == 0
    assert main(["import-logs", *common, "--logs", str(one), "--session", "off"]) == 0
    published = figure_summaries(FIXTURES / "published" / "dlperf-v1.0-resnet50.yaml")
    verified = verify_sessions([tmp_path / "on", tmp_path / "off"])
    assert verified.refused == []
    summaries = summarize(verified.records, published=published)
    measured = {(s.case.topology.label, s.identity): s for s in summaries if not s.published_by}
    assert set(measured) == {("1n1g", v100), ("1n8g", v100), ("1n1g", "unknown device")}
    assert {s.identity for s in summaries if s.published_by} == {v100}
    scaled = measured[("1n8g", v100)]
    assert scaled.speedup == pytest.approx(8 * 0.25 / 0.28, rel=1e-6)  # against its own 1n1g
    assert measured[("1n1g", "unknown device")].speedup == pytest.approx(1.0)
    # the report sets them in one machine group with the published V100 rows
    out = tmp_path / "report"
    assert main(["report", str(tmp_path / "on"), str(FIXTURES / "published" /
                 "dlperf-v1.0-resnet50.yaml"), "--out", str(out)]) == 0  # fmt: skip
    rows = [line for line in (out / "report.md").read_text().splitlines()
            if line.startswith(f"| {v100} ")]  # fmt: skip
    assert any("(i)" in line for line in rows) and any("published by" in line for line in rows)
