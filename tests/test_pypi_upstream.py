"""Upstream sources from their PyPI release, run unchanged on CPU (``driver/sources/pypi.py``).

The real runs train tf-models-official's ResNet-50 (``classifier_trainer.py``) and BERT
(``run_pretraining.py``) at tiny shapes through the kit (case -> source plug-in -> local
runtime -> the source's parser -> window measurement), in ``.venvs/tensorflow-models`` made
from its pinned requirements (CI installs it from PyPI; a failure to make it fails there).
The logs they produced once are kept in ``fixtures/upstream/real/`` and parsed here too.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from driver.bench.host import cpu_model_name
from driver.core.runner import run_cases
from driver.launchers.base import NodeRank
from driver.model.case import Case, Topology
from driver.model.measure import Window, measure_repeat
from driver.model.results import Session
from driver.parsers.base import PARSERS
from driver.plugins import load_all
from driver.runtimes.local import LocalRuntime
from driver.sources.base import SOURCES
from driver.sources.pypi import SECTIONS, PypiSection, PypiSource, ensure_source_env, load_section
from driver.sources.spec import SourceError, load_spec
from driver.sources.upstream import SPECS
from tests.conftest import require_real

REAL = Path(__file__).parent / "fixtures" / "upstream" / "real" / "tensorflow-models-pypi"
SOURCE = "tensorflow-models-pypi"
ONE = NodeRank(node_rank=0, nodes=1, procs_per_node=1, master_addr="127.0.0.1", master_port=1)
TIME_HISTORY = re.compile(r"TimeHistory: (\d+\.\d+) seconds, (\d+\.\d+) examples/second")
BATCH_STAMP = re.compile(r"batch_index: (\d+), timestamp: (\d+\.\d+)")


def case(model: str, batch: int, warmup: int = 10, measured: int = 20, **changes: object) -> Case:
    base = Case(
        model=model,
        framework="tensorflow",
        topology=Topology(1, 1),
        batch_size=batch,
        precision="fp32",
        dataset="synthetic",
        source=SOURCE,
        warmup_steps=warmup,
        measured_steps=measured,
        total_steps=warmup + measured,
        repeats=1,
        timeout_s=900,
        profile="cpu-smoke",
    )
    return replace(base, **changes)


def source() -> PypiSource:
    load_all()
    return SOURCES.get(SOURCE)()


def stamps_figure(text: str, batch: int, first: int, last: int) -> float:
    """The figure the source's own 'Run stats' imply: its unrounded step timestamps."""
    stamps = {int(step): float(t) for step, t in BATCH_STAMP.findall(text)}
    return (last - first) * batch / (stamps[last] - stamps[first])


# --- the pypi: sections --------------------------------------------------------------------------


def test_sections_say_what_runs_and_why_not() -> None:
    load_all()
    assert SECTIONS["tensorflow-models"].runs
    assert SOURCE in SOURCES.names()
    for name in ("paddle-models", "gluon-nlp"):
        section = SECTIONS[name]
        assert not section.runs and "no" in section.why_not and section.differs
        assert f"{name}-pypi" not in SOURCES.names()
    tfm = source()
    assert tfm.models == ("resnet50", "bert")
    assert tfm.parser == "tf-timehistory" and tfm.commit == SPECS["tensorflow-models"].commit
    assert "2.20.0" in SECTIONS["tensorflow-models"].differs  # which one ran
    pins = tfm.env.cpu_requirements.read_text().splitlines()
    assert SECTIONS["tensorflow-models"].package in pins  # the release named is the one pinned


def _spec_with(tmp_path: Path, pypi: dict) -> object:
    spec = SPECS["tensorflow-models"]
    data = yaml.safe_load(spec.path.read_text())
    data["pypi"] = pypi
    path = tmp_path / "source.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_spec(path)


@pytest.mark.parametrize(
    "pypi, where, fragment",
    [
        ({"package": "x", "runs": False, "differs": "d"}, "pypi.why_not", "say why"),
        ({"package": "x", "runs": True, "differs": "d"}, "pypi.requirements", "requirements"),
        ({"package": "x", "runs": False, "differs": "d", "colour": 1}, "pypi.colour", "unknown"),
        (
            {"package": "x", "runs": False, "differs": "d", "why_not": "w",
             "models": {"resnet50": {"argv": ["{pyhton}"], "log_every": 1}}},
            "pypi.models.resnet50.argv[0]", "unknown placeholder {pyhton}",
        ),
        (
            {"package": "x", "runs": False, "differs": "d", "why_not": "w",
             "models": {"vgg": {"argv": ["a"], "log_every": 1}}},
            "pypi.models.vgg", "not a model",
        ),
    ],
)  # fmt: skip
def test_bad_sections_name_the_field(tmp_path: Path, pypi: dict, where: str, fragment: str) -> None:
    with pytest.raises(SourceError) as caught:
        load_section(_spec_with(tmp_path, pypi))
    assert where in str(caught.value) and fragment in str(caught.value)


def test_refuses_what_the_release_does_not_run() -> None:
    tfm = source()
    for bad, fragment in (
        (case("resnet50", 2, topology=Topology(1, 2)), "topology 1n2g"),
        (case("resnet50", 2, precision="amp"), "precision amp"),
        (case("resnet50", 2, dataset="real"), "dataset real"),
        (case("resnet50", 2, warmup=5), "warm-up steps 5 must be a positive multiple of"),
        (case("inception3", 2), "has no inception3"),
    ):
        with pytest.raises(ValueError, match=re.escape(fragment)):
            tfm.command(bad, ONE, 2)


def test_node_command_quotes_every_value_and_cleans_its_folder(tmp_path: Path) -> None:
    # The same wrapper around a harmless argv: a value with shell syntax stays one word, the
    # prepare step runs first in the same scratch folder, the exit code is the upstream's.
    spec = SPECS["tensorflow-models"]
    section = PypiSection.model_validate(
        {
            "package": "x", "runs": True, "differs": "d", "requirements": "requirements-pypi.txt",
            "models": {"resnet50": {
                "prepare": ["sh", "-c", "echo prepared > made.txt"],
                "argv": ["sh", "-c", 'cat made.txt; printf "[%s]\\n" "$@"; pwd > "$0"; exit 7',
                         str(tmp_path / "where"), "a; touch pwned", "{batch}", "{steps}"],
                "log_every": 10,
            }},
        }
    )  # fmt: skip
    argv = PypiSource(spec, section).command(case("resnet50", 3), ONE, 3)
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=30)
    lines = done.stdout.splitlines()
    assert done.returncode == 7, done.stderr
    assert lines[0].startswith("DLPERF-UPSTREAM ") and '"batch":3' in lines[0]
    assert lines[1].startswith("DLPERF-HOST ")  # the node's hostname and devices
    assert lines[2:] == ["prepared", "[a; touch pwned]", "[3]", "[30]"]
    scratch = Path((tmp_path / "where").read_text().strip())
    assert scratch.name.startswith("dlperf-pypi.") and not scratch.exists()
    assert not (tmp_path / "pwned").exists()


def test_matrix_runs_the_release_from_its_environment(capsys: pytest.CaptureFixture[str]) -> None:
    from driver.frontend.cli import main

    matrix = SPECS["tensorflow-models"].folder / "pypi" / "matrix.yaml"
    argv = ["run", "--matrix", str(matrix), "--profile", "cpu-smoke", "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "resnet50/tensorflow/1n1g/bs2/fp32/synthetic/src-tensorflow-models-pypi  x3" in out
    assert "bert/tensorflow/1n1g/bs4/fp32/synthetic/src-tensorflow-models-pypi  x3" in out
    assert out.count(f"{source().python()} -m official.legacy.") == 2


# --- real logs the release printed (kept fixtures) -----------------------------------------------


def test_real_resnet50_log_parses_and_agrees_with_its_own_timestamps() -> None:
    text = (REAL / "resnet50.log").read_text()
    load_all()
    parsed = PARSERS.get("tf-timehistory")().parse({"node0.log": text})
    measured = measure_repeat(parsed, Window(10, 20))
    seconds = [float(s) for s, _rate in TIME_HISTORY.findall(text)]
    assert len(seconds) == 3 and measured.samples == 40
    assert measured.throughput == pytest.approx(40 / (seconds[1] + seconds[2]), rel=1e-12)
    assert measured.throughput == pytest.approx(stamps_figure(text, 2, 10, 30), rel=1e-3)


def test_real_bert_log_parses_from_train_step_times() -> None:
    text = (REAL / "bert.log").read_text()
    assert "TimeHistory" not in text  # the 2.20 loop has no TimeHistory callback
    load_all()
    parsed = PARSERS.get("tf-timehistory")().parse({"node0.log": text})
    assert [p.step for p in parsed.ranks[0].points] == [10, 20, 30]
    clocks = re.findall(r"^I\d{4} \d\d:(\d\d):(\d\d\.\d{6}) .*Train Step: (\d+)/30", text, re.M)
    at = {int(step): int(m) * 60 + float(s) for m, s, step in clocks}
    measured = measure_repeat(parsed, Window(10, 20))
    assert measured.samples == 80
    assert measured.throughput == pytest.approx(80 / (at[30] - at[10]), rel=1e-9)


# --- real runs through the kit (the release, unchanged, from .venvs/tensorflow-models) -----------


@pytest.fixture(scope="module")
def tfm_env() -> Path:
    try:
        return ensure_source_env(source(), log=lambda _line: None)
    except Exception as error:  # noqa: BLE001 - any install failure: "no release here"
        require_real(f"cannot create .venvs/tensorflow-models from PyPI: {error}")
        raise


@pytest.mark.parametrize("model, batch, measured", [("resnet50", 2, 10), ("bert", 4, 20)])
def test_release_trains_for_real_through_the_kit(
    tfm_env: Path, tmp_path: Path, model: str, batch: int, measured: int
) -> None:
    run = case(model, batch, measured=measured)
    session = Session.open(tmp_path / "session")
    summary = run_cases([run], session, LocalRuntime(), printer=lambda _line: None)
    (found,) = list(session.records(include_failed=True))
    _case, record, folder = found
    text = (folder / "node0.log").read_text()
    assert summary.finished == 1 and record.ok, f"{record.detail}\n{text[-3000:]}"
    assert record.parser == "tf-timehistory" and record.measurement.samples == measured * batch
    assert str(tfm_env) in record.commands[0].argv[2]  # the release's own environment
    # The node printed its own facts: the run is placed on this machine's device like ours.
    assert record.header["devices"] == [cpu_model_name()]
    assert record.header["hostname"] == socket.gethostname()
    if model == "resnet50":  # the source's own Run stats imply the same figure
        assert "classifier_trainer.py" in text and len(TIME_HISTORY.findall(text)) == 2
        # TimeHistory prints seconds to 10 ms and starts an interval at the next batch's begin,
        # the stamps at a batch's end: its window is the stamps' less the callbacks between two
        # batches (a few ms; seen 8 ms on a loaded 2-core CI machine), then rounded.
        window_s = measured * batch / record.throughput
        stamps_s = measured * batch / stamps_figure(text, batch, 10, 20)
        assert -0.005 - 1e-9 <= stamps_s - window_s <= 0.005 + 0.01 * stamps_s
    else:
        assert "Train Step: 30/30" in text and record.throughput > 0
    shutil.rmtree(tmp_path / "session")
