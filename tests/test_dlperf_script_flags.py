"""DLPerf's own launch scripts (a recorded copy under tests/fixtures/dlperf-scripts) against the
commands the kit renders for the same entries: every flag and environment variable a script
sets for a precision is in the kit's command with the same value, so a case the kit pairs with
a DLPerf figure runs as DLPerf ran it."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from driver.core.matrix import Overrides, apply_overrides, load_matrix
from driver.launchers.base import NodeRank
from driver.plugins import load_all
from driver.sources.upstream import SPECS, UpstreamSource

load_all()

SCRIPTS = Path(__file__).parent / "fixtures" / "dlperf-scripts"
# (script, DLPerf's DTYPE value, its branch's flag variable) -> (source, model, precision)
ENTRIES = {
    ("PaddlePaddle/resnet50v1.5/scripts/single_node_train.sh", "fp16", "FP16_PARAMS"): (
        "paddle-models", "resnet50", "amp", (1, 8),
    ),
    ("PaddlePaddle/resnet50v1.5/scripts/multi_node_train.sh", "fp16", "FP16_PARAMS"): (
        "paddle-models", "resnet50", "amp", (4, 8),
    ),
}  # fmt: skip
BRANCH = re.compile(
    r'if\s+\[\s+"\$DTYPE"\s*==\s*"(?P<dtype>\w+)"\s*\]\s*;\s*then(?P<body>.*?)\n(?:else|fi)', re.S
)  # noqa: E501
EXPORT = re.compile(r"^\s*export\s+(\w+)=(\S+)", re.M)
ASSIGN = re.compile(r'^\s*(\w+)="(.*?)"', re.M)


def script_facts(text: str, dtype: str, variable: str) -> tuple[dict[str, str], dict[str, str]]:
    """(flags, environment) the script's ``if [ "$DTYPE" == "<dtype>" ]`` branch sets: the
    ``--name=value`` words of ``variable`` and the ``export NAME=VALUE`` lines."""
    branch = next(m["body"] for m in BRANCH.finditer(text) if m["dtype"] == dtype)
    env = {name: value.split("#")[0].strip() for name, value in EXPORT.findall(branch)}
    words = dict(ASSIGN.findall(branch))[variable]
    flags = dict(word.split("=", 1) for word in shlex.split(words))
    data_format = dict(ASSIGN.findall(branch)).get("DATA_FORMAT")
    if data_format:  # passed by the script as --data_format=${DATA_FORMAT}
        flags["--data_format"] = data_format
    return flags, env


def rendered(source: str, model: str, precision: str, nodes: int, procs: int) -> list[str]:
    spec = SPECS[source]
    cases = apply_overrides(
        load_matrix(spec.matrix_file).cases, Overrides(topologies=(f"{nodes}n{nodes * procs}g",))
    )
    case = next(c for c in cases if c.model == model and c.precision == precision)
    addrs = tuple(f"10.0.0.{11 + i}" for i in range(nodes))
    rank = NodeRank(0, nodes, procs, addrs[0], 29500, addrs)
    return UpstreamSource(spec).launch_argv(replace(case, data_dir="/data/x"), rank, 64)


def same(a: str, b: str) -> bool:
    lowered = {a.lower(), b.lower()}
    return a == b or lowered <= {"true", "1"} or lowered <= {"false", "0"} or _number(a, b)


def _number(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return False


@pytest.mark.parametrize("entry", sorted(ENTRIES), ids=lambda e: f"{e[0]}:{e[1]}")
def test_dlperf_s_flags_and_environment_are_in_the_rendered_command(
    entry: tuple[str, str, str],
) -> None:
    script, dtype, variable = entry
    source, model, precision, (nodes, procs) = ENTRIES[entry]
    flags, env = script_facts((SCRIPTS / script).read_text(), dtype, variable)
    assert flags and env  # the recorded branch was read
    argv = rendered(source, model, precision, nodes, procs)
    ours_env = {}
    if argv[0] == "env":
        while "=" in argv[1]:
            name, _, value = argv.pop(1).partition("=")
            ours_env[name] = value
    for name, value in env.items():
        assert name in ours_env and same(ours_env[name], value), (name, value, ours_env)
    for flag, value in flags.items():
        assert flag in argv, f"{script}: DLPerf passes {flag}={value}; the kit's command does not"
        ours = argv[argv.index(flag) + 1]
        assert same(ours, value), f"{flag}: DLPerf {value}, the kit {ours}"


def test_the_reader_sees_a_flag_the_kit_does_not_pass() -> None:
    """The check fails where it should: a DLPerf flag missing from a command is named."""
    text = (SCRIPTS / "PaddlePaddle/resnet50v1.5/scripts/single_node_train.sh").read_text()
    flags, env = script_facts(text, "fp16", "FP16_PARAMS")
    assert flags["--fuse_bn_act_ops"] == "true" and env["FLAGS_cudnn_exhaustive_search"] == "1"
    assert "--fuse_bn_act_ops" not in rendered("paddle-models", "resnet50", "fp32", 1, 8)
