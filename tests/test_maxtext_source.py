"""The maxtext upstream source (JAX/upstream/maxtext): MaxText's pre-training trainer from the
maxtext 0.2.4 release, its rendered commands, their key=value overrides against the release's
base.yml, its parser and its CPU run from PyPI.

MaxText's command line is a config file and then key=value overrides, which the kit's generic
flag check (tests/test_upstream_flags.py, ``--flags``) does not see: here every rendered key must
be recorded in flags.yaml, and where the pinned wheel is in a local folder (``DLPERF_WHEELS``)
each recorded line of base.yml must define its key. Where ``.venvs/maxtext`` is present, the
release's own config parser (pyconfig, whose pydantic model forbids unknown keys) reads every
rendered command. The parser is held to the real log the release printed on the kit's CPU
(tests/fixtures/upstream/real/maxtext-pypi/llama.log); training through the kit again takes
about a minute on a 2-core machine and runs with DLPERF_SLOW_TESTS=1.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
from dataclasses import replace
from datetime import datetime
from functools import cache
from pathlib import Path
from zipfile import ZipFile

import pytest
import yaml

from driver.frameworks.base import REPO_ROOT
from driver.model.measure import Window, measure_repeat
from driver.parsers._runheader import header_line
from driver.parsers.base import PARSERS, LogParseError
from driver.plugins import load_all
from driver.sources.base import run_header
from driver.sources.pypi import SECTIONS
from driver.sources.upstream import SPECS
from tests.llm_sources import SourceCases, node_rank, source_python
from tests.test_upstream_flags import wheel_for

load_all()

SPEC = SPECS["maxtext"]
FLAGS = yaml.safe_load((SPEC.folder / "flags.yaml").read_text())["models"]["llama"]
TRAINER = next(p for p in FLAGS["programs"] if p["argv0"] == "maxtext.trainers.pre_train.train")
MODULE = "maxtext.trainers.pre_train.train"
CONFIG = "src/maxtext/configs/base.yml"
REAL_LOG = REPO_ROOT / "tests" / "fixtures" / "upstream" / "real" / "maxtext-pypi" / "llama.log"
ABSL_STEP = re.compile(
    r"^I(\d{4} \d\d:\d\d:\d\d\.\d{6}) .*completed step: (\d+), seconds: ([\d.]+)"
)

SOURCE = SourceCases(SPEC)
cases, case_of, argv_of = SOURCE.cases, SOURCE.case_of, SOURCE.argv_of


def overrides(argv: list[str]) -> dict[str, str]:
    """The key=value pairs after the config file of a rendered trainer command."""
    start = argv.index(MODULE)
    assert argv[start + 1] == CONFIG, argv[start : start + 2]
    pairs = [item.split("=", 1) for item in argv[start + 2 :]]
    assert all(len(pair) == 2 for pair in pairs), argv
    keys = [key for key, _value in pairs]
    assert len(keys) == len(set(keys)), f"a key passed twice: {keys}"
    return dict(pairs)  # type: ignore[arg-type]


def environment(argv: list[str]) -> dict[str, str]:
    """The ``env NAME=VALUE`` words before python3."""
    assert argv[0] == "env"
    return dict(item.split("=", 1) for item in argv[1 : argv.index("python3")])


def cpu_argv(steps: int = 15, batch: int = 2) -> list[str]:
    """The pypi section's argv with its placeholders filled as the kit fills them."""
    context = {"python": "python", "config_dir": "", "batch": batch, "global_batch": batch,
               "steps": steps, "warmup": 5, "measured": 10, "log_every": 1}  # fmt: skip
    section = SECTIONS["maxtext"]
    return [item.format_map(context) for item in section.models["llama"].argv]


# --- the commands ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topology", "variant", "node", "model_name", "batch", "remat"),
    [
        ("1n8g", "8b", 0, "llama3.1-8b", "1", "minimal_with_context"),
        ("2n16g", "8b", 1, "llama3.1-8b", "1", "minimal_with_context"),
        ("8n64g", "70b", 7, "llama3.1-70b", "1", "full"),
    ],
)
def test_each_node_starts_one_jax_process_with_maxtext_s_gpu_settings(
    topology: str, variant: str, node: int, model_name: str, batch: str, remat: str
) -> None:
    case = case_of(topology, variant)
    argv = argv_of(case, node)
    nodes, procs = case.topology.nodes, case.topology.devices_per_node
    # max_utils.initialize_jax_for_gpu's variables: node 0 coordinates, each node its rank
    assert environment(argv) == {
        "PYTHONPATH": "/workspace/src/maxtext-0.2.4", "DECOUPLE_GCLOUD": "TRUE",
        "JAX_COORDINATOR_IP": "10.0.0.11", "JAX_COORDINATOR_PORT": "29500",
        "NNODES": str(nodes), "NODE_RANK": str(node),
    }  # fmt: skip
    assert argv[argv.index("python3") : argv.index(MODULE) + 2] == ["python3", "-m", MODULE, CONFIG]
    keys = overrides(argv)
    assert keys["model_name"] == model_name and keys["hardware"] == "gpu"
    assert keys["per_device_batch_size"] == batch and keys["max_target_length"] == "8192"
    assert keys["steps"] == "50"  # 10 warm-up + 40 measured: the trainer runs exactly these
    assert keys["dataset_type"] == "synthetic" and keys["attention"] == "cudnn_flash_te"
    assert keys["remat_policy"] == remat and keys["enable_checkpointing"] == "false"
    # FSDP over the node's GPUs, data parallelism over the nodes, no tensor axis
    assert keys["ici_fsdp_parallelism"] == str(procs)
    assert keys["dcn_data_parallelism"] == str(nodes)
    assert keys["ici_tensor_parallelism"] == "1"


def test_the_run_header_counts_every_device_as_a_replica() -> None:
    """MaxText trains per_device_batch_size x every device a step: the header states no
    model-parallel degree above 1, so the kit counts batch x 16 sequences a step at 2n16g."""
    case = case_of("2n16g", "8b")
    header = run_header("maxtext", case, node_rank(case, 1), 12, "per-node", 1)
    line = json.loads(header_line(header).removeprefix("DLPERF-UPSTREAM "))
    assert line["logging"] == "per-node" and line["step_offset"] == 1
    assert all(line.get(k, 1) == 1 for k in ("tensor_parallel", "pipeline_parallel",
                                             "context_parallel"))  # fmt: skip
    with pytest.raises(ValueError, match=r"option\(s\) tensor_parallel"):
        argv_of(replace(case, options={**case.options, "tensor_parallel": 2}), 0)


# --- the overrides: recorded, and defined in the pinned base.yml ----------------------------


def rendered_keys() -> set[str]:
    return {key for case in cases() for node in (0, case.topology.nodes - 1)
            for key in overrides(argv_of(case, node))}  # fmt: skip


def test_every_rendered_override_is_recorded_and_every_recorded_one_passed() -> None:
    assert rendered_keys() == set(TRAINER["overrides"])
    assert set(overrides(cpu_argv())) == set(TRAINER["cpu_overrides"])
    for key, fact in [*TRAINER["overrides"].items(), *TRAINER["cpu_overrides"].items()]:
        assert fact["defined"] and fact["verdict"] == "ok" and fact["meaning"], key
        assert re.fullmatch(r"maxtext/configs/base\.yml:\d+", fact["where"]), (key, fact)


@cache
def wheel_members() -> dict[str, bytes] | None:
    wheel = wheel_for(SPEC.release)  # type: ignore[arg-type]
    if wheel is None:
        return None
    data = wheel.read_bytes()
    assert hashlib.sha256(data).hexdigest() == SPEC.release.sha256, f"{wheel}: not the pin"  # type: ignore[union-attr]
    with ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_each_recorded_key_is_defined_at_its_line_of_the_pinned_base_yml() -> None:
    members = wheel_members()
    if members is None:
        pytest.skip(f"{SPEC.release.file} is in no local wheel folder; flags.yaml is the record")  # type: ignore[union-attr]
    config = members[TRAINER["config"]["path"]]
    blob = hashlib.sha1(b"blob %d\0" % len(config) + config).hexdigest()  # noqa: S324 (git's id)
    assert blob == TRAINER["config"]["blob"]
    lines = config.decode().splitlines()
    for key, fact in [*TRAINER["overrides"].items(), *TRAINER["cpu_overrides"].items()]:
        number = int(fact["where"].rsplit(":", 1)[1])
        assert lines[number - 1].startswith(f"{key}:"), (key, number, lines[number - 1])


PYCONFIG = """
import json, sys
from maxtext.configs import pyconfig
for argv in json.load(sys.stdin):
    try:
        config = pyconfig.initialize(["train.py", *argv])
    except Exception as error:  # the refusal, by name, for the test to compare
        print("DLPERF-CONFIG", json.dumps(["refused", type(error).__name__]))
        continue
    print("DLPERF-CONFIG", json.dumps([config.model_name, config.num_decoder_layers, config.emb_dim,
                      config.per_device_batch_size, config.max_target_length, config.steps,
                      config.ici_fsdp_parallelism, config.dcn_data_parallelism]))
"""


def maxtext_python() -> Path | None:
    return source_python("DLPERF_MAXTEXT_PYTHON", "maxtext")


@pytest.mark.skipif(
    maxtext_python() is None,
    reason="no .venvs/maxtext (Python 3.12 with maxtext 0.2.4: JAX/upstream/maxtext/"
    "requirements-pypi.txt); flags.yaml is the record",
)
def test_maxtext_s_own_config_parser_accepts_every_rendered_command(tmp_path: Path) -> None:
    """pyconfig.initialize on each rendered command (8B and 70B, one node and several), and on
    the CPU one; a mistyped key is refused by the same parser, so the check can fail. On a
    multi-node GPU job MaxText counts the nodes as slices from the devices (max_utils.
    get_num_slices); this CPU process has one device, so num_slices=<nodes> stands in for it."""
    commands, expected = [], []
    for case in [case_of("1n8g", "8b"), case_of("2n16g", "8b"), case_of("8n64g", "70b")]:
        argv = argv_of(case, 0)
        rendered = argv[argv.index(MODULE) + 1 :]
        nodes = case.topology.nodes
        commands.append(rendered + ([f"num_slices={nodes}"] if nodes > 1 else []))
        big = case.variant == "70b"
        shape = [80, 8192] if big else [32, 4096]
        expected.append([case.options["model_name"], *shape, int(case.batch_size), 8192, 50,
                         case.topology.devices_per_node, nodes])  # fmt: skip
    cpu = cpu_argv()
    commands.append(cpu[cpu.index(MODULE) + 1 :])
    expected.append(["default", 2, 64, 2, 128, 15, -1, -1])
    mistyped = [item.replace("per_device_batch_size=", "per_device_batch=") for item in commands[0]]
    commands.append(mistyped)
    expected.append(["refused", "ValueError"])
    run = subprocess.run(
        [str(maxtext_python()), "-c", PYCONFIG], input=json.dumps(commands), cwd=tmp_path,
        env={**os.environ, "DECOUPLE_GCLOUD": "TRUE", "JAX_PLATFORMS": "cpu"},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    marker = "DLPERF-CONFIG "
    lines = [json.loads(line.removeprefix(marker)) for line in run.stdout.splitlines()
             if line.startswith(marker)]  # fmt: skip
    assert lines == expected


# --- the parser -----------------------------------------------------------------------------


def absl_clock(stamp: str) -> float:
    """Seconds of absl's ``MMDD HH:MM:SS.ffffff`` within one year, for the real log's check."""
    return (
        datetime.strptime("2000" + stamp, "%Y%m%d %H:%M:%S.%f") - datetime(2000, 1, 1)
    ).total_seconds()


def test_the_real_cpu_log_is_measured_from_its_absl_timestamps() -> None:
    """The log the release printed on the kit's CPU: step lines 0..14, the window of 5 warm-up
    and 10 measured steps from the end of step label 4 to the end of label 14."""
    text = REAL_LOG.read_text()
    parsed = PARSERS.get("maxtext")().parse({"node0.log": text})
    assert [point.step for point in parsed.ranks[0].points] == list(range(1, 16))
    stamps = {int(step): absl_clock(stamp) for stamp, step, _s in
              (m.groups() for m in map(ABSL_STEP.match, text.splitlines()) if m)}  # fmt: skip
    measured = measure_repeat(parsed, Window(5, 10))
    assert measured.samples == 20  # 10 steps of batch 2 on one device
    assert measured.throughput == pytest.approx(20 / (stamps[14] - stamps[4]), rel=1e-6)


def test_the_real_log_without_the_kit_s_header_imports_with_the_same_figure(
    tmp_path: Path,
) -> None:
    """``dlperf import-logs`` of MaxText's own output (the fixture less the kit's two lines)
    with the run's facts gives the figure the kit measured from the same lines."""
    from driver.core.importlogs import import_run
    from driver.sources.logfacts import load_facts

    lines = REAL_LOG.read_text().splitlines()
    assert lines[0].startswith("DLPERF-UPSTREAM ") and lines[1].startswith("DLPERF-HOST ")
    bare = tmp_path / "maxtext.log"
    bare.write_text("\n".join(lines[2:]) + "\n")
    facts = tmp_path / "facts.yaml"
    facts.write_text("model: llama\ntopology: 1n1g\nbatch: 2\nprecision: fp32\n"
                     "warmup_steps: 5\nmeasured_steps: 10\n")  # fmt: skip
    record = import_run(tmp_path / "s", "maxtext", load_facts(facts, {}), [bare])
    assert record.verdict == "ok", record.detail
    kit = measure_repeat(PARSERS.get("maxtext")().parse({"node0.log": REAL_LOG.read_text()}),
                         Window(5, 10))  # fmt: skip
    assert record.measurement.throughput == pytest.approx(kit.throughput, rel=1e-12)


def lines_at(stamps: list[str], first_label: int = 0, rampup_at: int | None = None) -> str:
    header = run_header("maxtext", case_of("1n8g", "8b"), node_rank(case_of("1n8g", "8b"), 0), 4,
                        "per-node", 1)  # fmt: skip
    out = [header_line(header)]
    for index, stamp in enumerate(stamps):
        label = first_label + index
        ramp = "[Rampup Batch Size Phase] " if label == rampup_at else ""
        out.append(f"I{stamp} 140512345678 metric_logger.py:230] {ramp}completed step: "
                   f"{label}, seconds: 1.000, TFLOP/s/device: 1.0, Tokens/s/device: 1.0, "
                   "loss: 10.0")  # fmt: skip
    return "\n".join(out) + "\n"


def test_a_run_over_new_year_reads_on_without_a_clock_going_back() -> None:
    stamps = [f"1231 23:59:{s:02d}.000000" for s in range(50, 60)]
    stamps += [f"0101 00:00:{s:02d}.000000" for s in range(0, 40)]
    parsed = PARSERS.get("maxtext")().parse({"node0.log": lines_at(stamps)})
    measured = measure_repeat(parsed, Window(10, 40))
    assert measured.throughput == pytest.approx(40 * 4 * 8 / 40.0)


@pytest.mark.parametrize(
    ("edit", "message"),
    [("rampup", "ramp-up"), ("negative", "negative"), ("restart", "after step")],
)
def test_a_log_the_window_cannot_trust_is_refused_with_its_line(edit: str, message: str) -> None:
    stamps = [f"1207 10:00:{s:02d}.000000" for s in range(50)]
    text = lines_at(stamps, rampup_at=3 if edit == "rampup" else None)
    if edit == "negative":
        text = text.replace("completed step: 0,", "completed step: -1,")
    if edit == "restart":
        text = text.replace("completed step: 20,", "completed step: 2,")
    with pytest.raises(LogParseError, match=message) as caught:
        PARSERS.get("maxtext")().parse({"node0.log": text})
    assert "node0.log:" in str(caught.value)


# --- the release on this machine's CPU, through the kit -------------------------------------


def test_the_cpu_run_is_the_same_release_in_its_own_environment() -> None:
    section = SECTIONS["maxtext"]
    assert section.runs and section.python == "3.12" and section.package == "maxtext==0.2.4"
    pins = (SPEC.folder / str(section.requirements)).read_text().splitlines()
    assert "maxtext==0.2.4" in pins and "jax==0.10.2" in pins and "jaxlib==0.10.2" in pins
    image_pins = (SPEC.folder / "requirements-image.txt").read_text()
    # the image installs the same closure by hash, less jax/jaxlib (the base's CUDA build)
    for line in pins:
        if (
            line
            and not line.startswith("#")
            and not line.startswith(("jax==", "jaxlib==", "maxtext=="))
        ):
            assert f"\n{line} --hash=sha256:" in image_pins, line
    assert "\njax==" not in image_pins and "\njaxlib==" not in image_pins


@pytest.mark.skipif(
    os.environ.get("DLPERF_SLOW_TESTS") != "1" or maxtext_python() is None,
    reason="trains for about a minute on 2 cores (DLPERF_SLOW_TESTS=1, with .venvs/maxtext)",
)
def test_the_release_trains_on_cpu_through_the_kit(tmp_path: Path) -> None:
    from driver.core.runner import run_cases
    from driver.model.case import Case, Topology
    from driver.model.results import Session
    from driver.runtimes.local import LocalRuntime

    case = Case(model="llama", framework="jax", topology=Topology(1, 1), batch_size=2,
                precision="fp32", dataset="synthetic", source="maxtext-pypi", warmup_steps=5,
                measured_steps=10, total_steps=15, repeats=1, timeout_s=600,
                profile="cpu-smoke")  # fmt: skip
    session = Session.open(tmp_path / "session")
    summary = run_cases([case], session, LocalRuntime(), printer=lambda _line: None)
    ((_case, record, folder),) = list(session.records(include_failed=True))
    text = (folder / "node0.log").read_text()
    assert summary.finished == 1 and record.ok, f"{record.detail}\n{text[-3000:]}"
    assert record.parser == "maxtext" and record.measurement.samples == 20
    assert "completed step: 14," in text and "completed step: 15," not in text
    stamps = {int(step): absl_clock(stamp) for stamp, step, _s in
              (m.groups() for m in map(ABSL_STEP.match, text.splitlines()) if m)}  # fmt: skip
    assert record.throughput == pytest.approx(20 / (stamps[14] - stamps[4]), rel=1e-6)
