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
# Scripts that set shell variables in the branch and pass them on the command line
# (``--use_fp16 ${use_fp16}``): (script, DTYPE) -> (source, model, precision, topology, the
# flags of the command to compare; the rest are paths, steps and logging the kit sets itself)
COMMANDS = {
    ("PaddlePaddle/bert/scripts/single_node_train.sh", "fp16"): (
        "paddle-models", "bert", "amp", (1, 8),
        ("--use_fp16", "--use_dynamic_loss_scaling", "--init_loss_scaling", "--use_fast_executor",
         "--weight_sharing", "--use_cuda"),
    ),
    ("PaddlePaddle/bert/scripts/single_node_train.sh", "fp32"): (
        "paddle-models", "bert", "fp32", (1, 8),
        ("--use_fp16", "--use_fast_executor", "--weight_sharing", "--use_cuda"),
    ),
}  # fmt: skip
# Flags the kit leaves at the pinned script's default, with that default (where it is defined):
# DLPerf's value must equal it. paddle-models BERT at b71cf632, PaddleNLP/.../BERT/train.py.
DEFAULTS = {
    "paddle-models": {
        "--weight_sharing": "true",  # train.py:47
        "--use_fp16": "false",  # train.py:60
    },
}
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


def command_flags(text: str, dtype: str) -> dict[str, str]:
    """The ``--name value`` pairs of the script's ``python ... train.py`` command, with the
    variables the ``if [ "$DTYPE" == ... ]`` branch (or its else) sets filled in."""
    branches = re.search(
        r'if\s+\[\s+"\$DTYPE"\s*==\s*"(\w+)"\s*\]\s*;\s*then(.*?)\nelse(.*?)\nfi', text, re.S
    )
    assert branches is not None
    body = branches[2] if branches[1] == dtype else branches[3]
    variables = dict(re.findall(r"^\s*(\w+)=(\S+)", body, re.M))
    command = text[text.index("train.py") :].split("2>&1")[0].replace("\\\n", " ")
    words = [
        re.sub(r"\$\{(\w+)\}", lambda m: variables.get(m[1], m[0]), w) for w in command.split()
    ]
    return {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}


@pytest.mark.parametrize("entry", sorted(COMMANDS), ids=lambda e: f"{e[0]}:{e[1]}")
def test_dlperf_s_command_flags_are_in_the_rendered_command(entry: tuple[str, str]) -> None:
    script, dtype = entry
    source, model, precision, (nodes, procs), checked = COMMANDS[entry]
    theirs = command_flags((SCRIPTS / script).read_text(), dtype)
    argv = rendered(source, model, precision, nodes, procs)
    for flag in checked:
        assert flag in theirs, f"{script} passes no {flag}: fix the entry"
        if flag in argv:
            ours = argv[argv.index(flag) + 1]
        else:  # the kit leaves it at the script's default
            ours = DEFAULTS.get(source, {}).get(flag, "(not passed, no default recorded)")
        assert same(ours, theirs[flag]), f"{flag}: DLPerf {theirs[flag]}, the kit {ours}"


def test_the_reader_sees_a_flag_the_kit_does_not_pass() -> None:
    """The check fails where it should: a DLPerf flag missing from a command is named."""
    text = (SCRIPTS / "PaddlePaddle/resnet50v1.5/scripts/single_node_train.sh").read_text()
    flags, env = script_facts(text, "fp16", "FP16_PARAMS")
    assert flags["--fuse_bn_act_ops"] == "true" and env["FLAGS_cudnn_exhaustive_search"] == "1"
    assert "--fuse_bn_act_ops" not in rendered("paddle-models", "resnet50", "fp32", 1, 8)
