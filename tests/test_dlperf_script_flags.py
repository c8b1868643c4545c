"""DLPerf's own launch scripts (a recorded copy under tests/fixtures/dlperf-scripts) against the
commands the kit renders for the same entries: every flag and environment variable a script
sets for a precision is in the kit's command with the same value, so a case the kit pairs with
a DLPerf figure runs as DLPerf ran it."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
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


# Every other entry DLPerf's figures pair with (docs/dlperf-compare.md), and the ones the kit
# changed to run DLPerf's command: DLPerf's script (recorded unchanged), the lines of it that
# build the command, what that run set its branch variables to, and the flags of the command
# that bear on throughput. A flag the kit's command lacks is compared with the pinned script's
# default (PINNED_DEFAULTS); a difference the entry keeps is named, with its reason, in the
# model's ``notes`` in source.yaml (checked: the note names the flag and DLPerf).
@dataclass(frozen=True)
class Recorded:
    script: str
    lines: tuple[int, int]  # 1-based, inclusive
    source: str
    model: str
    precision: str
    dataset: str
    compared: tuple[str, ...]
    variables: tuple[tuple[str, str], ...] = ()  # what the run's branch set (not read from lines)
    xla: bool = False
    exports: tuple[int, int] | None = None  # lines of ``export NAME=VALUE`` the run set
    procs: int = 8  # GPUs of the node the kit's command is rendered for


NGC = "NVIDIADeepLearningExamples"
RECORDED = (
    Recorded(f"{NGC}/PyTorch/BERT/scripts/single_node_train.sh", (86, 108), "ngc-pytorch", "bert",
             "amp", "real", ("--fp16", "--max_seq_length", "--max_predictions_per_seq"),
             (("PREC", "--fp16"),)),  # line 52
    Recorded(f"{NGC}/PyTorch/BERT/scripts/single_node_train.sh", (86, 108), "ngc-pytorch", "bert",
             "fp32", "real", ("--fp16", "--max_seq_length", "--max_predictions_per_seq"),
             (("PREC", ""),)),  # line 54
    Recorded(f"{NGC}/TensorFlow/LanguageModeling/BERT/scripts/run_pretraining_adam.sh", (79, 97),
             "ngc-tf1", "bert", "amp", "real",
             ("--use_fp16", "--use_xla", "--horovod", "--optimizer_type",
              "--num_accumulation_steps", "--allreduce_post_accumulation", "--max_seq_length",
              "--max_predictions_per_seq"),
             (("PREC", "--use_fp16"), ("horovod_str", "--horovod"))),  # lines 41, 76
    Recorded(f"{NGC}/TensorFlow/LanguageModeling/BERT/scripts/run_pretraining_adam.sh", (79, 97),
             "ngc-tf1", "bert", "amp", "real",
             ("--use_fp16", "--use_xla", "--optimizer_type"),
             (("PREC", "--use_fp16 --use_xla"), ("horovod_str", "--horovod")), xla=True),  # 52
    Recorded(f"{NGC}/TensorFlow/LanguageModeling/BERT/scripts/run_pretraining_adam.sh", (79, 97),
             "ngc-tf1", "bert", "fp32", "real",
             ("--use_fp16", "--use_xla", "--horovod", "--optimizer_type",
              "--num_accumulation_steps", "--allreduce_post_accumulation"),
             (("PREC", ""), ("horovod_str", "--horovod"))),  # lines 43, 76
    Recorded("MxNet/BERT/pretrain.sh", (38, 58), "gluon-nlp", "bert", "amp", "real",
             ("--dtype", "--comm_backend", "--accumulate", "--no_compute_acc", "--max_seq_length",
              "--max_predictions_per_seq"), (("PRECISION", "float16"),)),  # line 16
    Recorded("MxNet/BERT/pretrain.sh", (38, 58), "gluon-nlp", "bert", "fp32", "real",
             ("--dtype", "--comm_backend", "--accumulate", "--no_compute_acc"),
             (("PRECISION", "float32"),)),  # line 18
    Recorded("OneFlow/LanguageModeling/BERT/scripts/bert_base_pretrain.sh", (19, 42),
             "oneflow-benchmark", "bert", "fp32", "real",
             ("--seq_length", "--max_predictions_per_seq", "--num_hidden_layers",
              "--num_attention_heads", "--hidden_size_per_head", "--vocab_size",
              "--max_position_embeddings", "--type_vocab_size")),
    Recorded("OneFlow/Classification/ConvNets/resnet50v1.5/scripts/rn50_train.sh", (26, 50),
             "oneflow-benchmark", "resnet50", "amp", "real",
             ("--use_fp16", "--channel_last", "--pad_output", "--fuse_bn_relu",
              "--fuse_bn_add_relu", "--nccl_fusion_threshold_mb", "--nccl_fusion_max_ops",
              "--gpu_image_decoder"), exports=(23, 23)),  # NCCL_LAUNCH_MODE=PARALLEL
    Recorded("OneFlow/Classification/ConvNets/resnet50v1.5/scripts/rn50_train.sh", (26, 50),
             "oneflow-benchmark", "resnet50", "fp32", "real",
             ("--gpu_image_decoder", "--channel_last", "--pad_output", "--fuse_bn_relu",
              "--fuse_bn_add_relu", "--nccl_fusion_threshold_mb", "--nccl_fusion_max_ops"),
             exports=(23, 23)),
    Recorded(f"{NGC}/MxNet/Classification/RN50v1.5/runner.sh", (41, 41), "ngc-mxnet", "resnet50",
             "fp32", "synthetic", ("--dtype", "--input-layout", "--fuse-bn-relu",
             "--fuse-bn-add-relu"), exports=(70, 81)),
    Recorded(f"{NGC}/MxNet/Classification/RN50v1.5/runner.sh", (42, 44), "ngc-mxnet", "resnet50",
             "amp", "synthetic", ("--dtype", "--amp", "--fuse-bn-relu", "--fuse-bn-add-relu",
             "--input-layout", "--conv-layout", "--batchnorm-layout", "--pooling-layout"),
             exports=(70, 81)),
    Recorded(f"{NGC}/TensorFlow/Classification/ConvNets/resnet50v1.5/scripts/single_node_train.sh",
             (30, 30), "ngc-tf1", "resnet50", "amp", "real",
             ("--use_tf_amp", "--loss_scale", "--use_xla")),
    Recorded(f"{NGC}/TensorFlow/Classification/ConvNets/resnet50v1.5/scripts/single_node_train.sh",
             (33, 38), "ngc-tf1", "resnet50", "amp", "real", ("--use_xla",),
             (("USE_XLA", "--use_xla"),), xla=True),  # line 23
    # --label_smoothing 0.1 in every precision (line 34); 0.0 by default at the pin
    # (33110132 utils/cmdline_helper.py:87)
    Recorded(f"{NGC}/TensorFlow/Classification/ConvNets/resnet50v1.5/scripts/single_node_train.sh",
             (33, 38), "ngc-tf1", "resnet50", "fp32", "real", ("--label_smoothing",)),
    Recorded(f"{NGC}/TensorFlow/Classification/ConvNets/resnet50v1.5/scripts/single_node_train.sh",
             (33, 38), "ngc-tf1", "resnet50", "amp", "real", ("--label_smoothing",)),
    # paddle-models ResNet-50, both precisions: the command (lines 60-83) with label smoothing
    # and 8 reader threads (THREAD at 8 GPUs, lines 22-28), and the memory fraction line 50
    # exports without DALI
    Recorded("PaddlePaddle/resnet50v1.5/scripts/single_node_train.sh", (60, 83), "paddle-models",
             "resnet50", "fp32", "real",
             ("--use_label_smoothing", "--label_smoothing_epsilon", "--reader_thread"),
             (("THREAD", "8"),), exports=(50, 50)),
    Recorded("PaddlePaddle/resnet50v1.5/scripts/single_node_train.sh", (60, 83), "paddle-models",
             "resnet50", "amp", "real",
             ("--use_label_smoothing", "--label_smoothing_epsilon", "--reader_thread"),
             (("THREAD", "8"),), exports=(50, 50)),
    # ... and 12 reader threads on one node of 3 or 4 GPUs (lines 22-28)
    Recorded("PaddlePaddle/resnet50v1.5/scripts/single_node_train.sh", (60, 83), "paddle-models",
             "resnet50", "fp32", "real", ("--reader_thread",), (("THREAD", "12"),), procs=4),
    Recorded("PaddlePaddle/resnet50v1.5/scripts/single_node_train.sh", (60, 83), "paddle-models",
             "resnet50", "amp", "real", ("--reader_thread",), (("THREAD", "12"),), procs=4),
    Recorded(f"{NGC}/PyTorch/resnet50v1.5/scripts/single_node_train.sh", (33, 45), "ngc-pytorch",
             "resnet50", "amp", "real", ("--amp", "--dynamic-loss-scale", "--memory-format",
             "--data-backend"), (("PREC", "--amp --dynamic-loss-scale"),)),  # line 16
    Recorded("PyTorch/resnet50v1.5/scripts/single_node_train.sh", (24, 35), "pytorch-examples",
             "resnet50", "fp32", "real", ("--workers", "--dist-backend")),
    Recorded("TensorFlow/bert/scripts/single_node_train.sh", (42, 58), "tensorflow-models", "bert",
             "amp", "real",
             ("--dtype", "--optimizer_type", "--use_next_sentence_label", "--max_seq_length",
              "--max_predictions_per_seq", "--datasets_num_private_threads", "--enable_xla",
              "--steps_per_loop"),
             (("DTYPE", "fp16"), ("enable_xla", "false"))),  # run_single_node.sh's arguments
    Recorded("TensorFlow/bert/scripts/single_node_train.sh", (42, 58), "tensorflow-models", "bert",
             "fp32", "real",
             ("--dtype", "--optimizer_type", "--use_next_sentence_label",
              "--datasets_num_private_threads", "--enable_xla", "--steps_per_loop"),
             (("DTYPE", "fp32"), ("enable_xla", "false"))),
)  # fmt: skip
# The kit's short spelling of a flag DLPerf spells long (the same argparse option).
# DeepLearningExamples TensorFlow ConvNets renamed DLPerf's flags by the pin (33110132
# utils/cmdline_helper.py:111, 124, 140; --use_static_loss_scaling is kept there, hidden, :145).
ALIASES = {
    ("pytorch-examples", "resnet50", "--workers"): "-j",
    ("ngc-tf1", "resnet50", "--use_tf_amp"): "--amp",
    ("ngc-tf1", "resnet50", "--loss_scale"): "--static_loss_scale",
    ("ngc-tf1", "resnet50", "--use_xla"): "--xla",
}
# What the pinned script does with a flag the kit does not pass: its default (file:line at the
# kit's pin), or None where the pinned script defines the flag but never reads it for this model
# (so DLPerf's value changes nothing there).
PINNED_DEFAULTS: dict[tuple[str, str], str | None] = {
    # NVIDIA DeepLearningExamples e5428044, TensorFlow/LanguageModeling/BERT/run_pretraining.py
    ("ngc-tf1", "--use_xla"): "false",  # :115 (and ConvNets' --xla, cmdline_helper.py:111)
    ("ngc-tf1", "--use_fp16"): "false",  # :117
    ("ngc-tf1", "--num_accumulation_steps"): "1",  # :98
    ("ngc-tf1", "--allreduce_post_accumulation"): "false",  # :102
    ("ngc-pytorch", "--fp16"): "false",  # PyTorch/LanguageModeling/BERT/run_pretraining.py
    # 0107cf27 PyTorch/Classification/ConvNets/main.py:269 (a switch), :334 (nchw)
    ("ngc-pytorch", "--dynamic-loss-scale"): "false",
    ("ngc-pytorch", "--memory-format"): "nchw",
    # e470c215 MxNet/Classification/RN50v1.5/fit.py:76 (a switch)
    ("ngc-mxnet", "--amp"): "false",
    # gluon-nlp 7b7bf602 scripts/bert/run_pretraining.py: --accumulate defaults to 1 (:78); the
    # sequence lengths are read only with --raw (:112-127, 422-435), the kit reads npz files.
    ("gluon-nlp", "--accumulate"): "1",
    ("gluon-nlp", "--max_seq_length"): None,
    ("gluon-nlp", "--max_predictions_per_seq"): None,
    # OneFlow-Benchmark 1f9d55f7 LanguageModeling/BERT/config.py:86
    ("oneflow-benchmark", "--hidden_size_per_head"): "64",
    # tf-models-official 2.3.0: official/nlp/bert/common_flags.py:61 (adamw) and
    # run_pretraining.py:50 (True); --datasets_num_private_threads and --enable_xla are defined
    # by common_flags.py:95-96 but read only by run_classifier.py / run_squad_helper.py, never
    # by official/nlp/bert/run_pretraining.py.
    # paddle-models b71cf632 PaddleCV/image_classification/utils/utility.py:133, :150
    ("paddle-models", "--reader_thread"): "8",
    ("paddle-models", "--label_smoothing_epsilon"): "0.1",
    ("tensorflow-models", "--dtype"): "fp32",  # official/utils/flags/_performance.py:144
    ("tensorflow-models", "--optimizer_type"): "adamw",
    ("tensorflow-models", "--use_next_sentence_label"): "true",
    # DLPerf passes no --steps_per_loop (common_flags.py:51, default None): on a GPU the loop
    # then runs one step per host loop, reading the loss after each (model_training_utils.py:
    # 220-226, 480)
    ("tensorflow-models", "--steps_per_loop"): "1",
    ("tensorflow-models", "--datasets_num_private_threads"): None,
    ("tensorflow-models", "--enable_xla"): None,
}
NOT_READ = object()


def recorded_flags(entry: Recorded) -> dict[str, str]:
    """The ``--name value`` / ``--name=value`` / bare ``--name`` (``true``) words of the recorded
    lines, with the script's own ``name=value`` assignments and the entry's branch variables
    filled in."""
    text = (SCRIPTS / entry.script).read_text()
    variables = dict(re.findall(r"^\s*(\w+)=([\w.-]+)\s*$", text, re.M)) | dict(entry.variables)
    first, last = entry.lines
    excerpt = "\n".join(text.splitlines()[first - 1 : last])
    excerpt = re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m[1], m[0]), excerpt)
    words = [w.strip("\"'\\;") for w in excerpt.replace('CMD+="', " ").split()]
    words = [w for w in words if w]
    flags: dict[str, str] = {}
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name, _, value = word.partition("=")
        following = words[i + 1] if i + 1 < len(words) else ""
        if not value and following and not following.startswith(("-", "$", "2>", "|", "python")):
            value = following
        flags[name] = value or "true"
    return flags


def kit_flag(argv: list[str], source: str, flag: str, model: str = "") -> str | object | None:
    """The kit's value for ``flag`` (``true`` for a bare switch), the pinned default where the
    command leaves it out, NOT_READ where the pinned script ignores it, None if unknown."""
    spelled = ALIASES.get((source, model, flag), flag)
    if spelled in argv:
        i = argv.index(spelled)
        following = argv[i + 1] if i + 1 < len(argv) else "--"
        return "true" if following.startswith("-") else following
    if (source, flag) in PINNED_DEFAULTS:
        default = PINNED_DEFAULTS[(source, flag)]
        return NOT_READ if default is None else default
    return None


def rendered_case(entry: Recorded, nodes: int = 1, procs: int = 8) -> list[str]:
    spec = SPECS[entry.source]
    cases = apply_overrides(
        load_matrix(spec.matrix_file).cases, Overrides(topologies=(f"{nodes}n{nodes * procs}g",))
    )
    # the matrix's case of the model, set to the entry's precision and data (a matrix need not
    # hold every variant the source runs)
    case = next(c for c in cases if c.model == entry.model)
    case = replace(case, precision=entry.precision, dataset=entry.dataset, xla=entry.xla)
    addrs = tuple(f"10.0.0.{11 + i}" for i in range(nodes))
    rank = NodeRank(0, nodes, procs, addrs[0], 29500, addrs)
    return UpstreamSource(spec).launch_argv(replace(case, data_dir="/data/x"), rank, 64)


def exported_by_kit(argv: list[str]) -> dict[str, str]:
    """The environment the kit's command sets: ``env NAME=VALUE ...`` before the argv (a flag
    block's ``env``) and mpirun's ``-x NAME=VALUE``."""
    ours: dict[str, str] = {}
    if argv and argv[0] == "env":
        for word in argv[1:]:
            if "=" not in word or word.startswith("-"):
                break
            name, _, value = word.partition("=")
            ours[name] = value
    for i, word in enumerate(argv[:-1]):
        if word == "-x" and "=" in argv[i + 1]:
            name, _, value = argv[i + 1].partition("=")
            ours[name] = value
    return ours


def differences(entry: Recorded) -> list[str]:
    """The compared flags whose value in the kit's command is not DLPerf's (unstated or not)."""
    theirs = recorded_flags(entry)
    argv = rendered_case(entry, procs=entry.procs)
    found = []
    for flag in entry.compared:
        dlperf = theirs.get(flag, PINNED_DEFAULTS.get((entry.source, flag), "false"))
        ours = kit_flag(argv, entry.source, flag, entry.model)
        if ours is NOT_READ:
            continue  # the pinned script never reads it: DLPerf's value changes nothing
        if dlperf is None or ours is None or not same(str(ours), str(dlperf)):
            found.append(f"{flag}: DLPerf {dlperf}, the kit {ours}")
    return found


@pytest.mark.parametrize(
    "entry",
    RECORDED,
    ids=lambda e: f"{e.source}-{e.model}-{e.precision}{'-xla' if e.xla else ''}-{e.procs}g",
)
def test_the_kit_passes_dlperf_s_flags_or_states_why_not(entry: Recorded) -> None:
    theirs = recorded_flags(entry)
    assert theirs, f"{entry.script}:{entry.lines}: no flags read"
    for flag in entry.compared:  # a flag DLPerf does not pass is compared with the default
        assert (
            flag in theirs
            or (entry.source, flag) in PINNED_DEFAULTS
            or flag.startswith(("--use_fp16", "--use_xla", "--fp16"))
        ), f"{entry.script}:{entry.lines} passes no {flag} and no default is recorded"
    notes = SPECS[entry.source].launches[entry.model].notes
    if entry.exports:
        text = (SCRIPTS / entry.script).read_text().splitlines()
        lines = "\n".join(text[entry.exports[0] - 1 : entry.exports[1]])
        exported = dict(EXPORT.findall(lines))
        assert exported, f"{entry.script}:{entry.exports}: no export read"
        ours = exported_by_kit(rendered_case(entry))
        for name, value in exported.items():
            assert name in ours and same(ours[name], value), f"{name}={value}: the kit {ours}"
    for difference in differences(entry):
        flag = difference.split(":")[0]
        stated = "DLPerf" in notes and re.search(rf"{re.escape(flag)}\b", notes)
        assert stated, f"{entry.source} {entry.model} {entry.precision}: {difference} (unstated)"


def test_a_difference_nobody_stated_is_found() -> None:
    """The check fails where it should: ngc-tf1 BERT without --optimizer_type adam runs LAMB."""
    entry = RECORDED[2]
    assert recorded_flags(entry)["--optimizer_type"] == "adam"
    spec = SPECS[entry.source]
    launch = spec.launches["bert"]
    i = launch.argv.index("--optimizer_type")
    lamb = launch.model_copy(update={"argv": launch.argv[:i] + launch.argv[i + 2 :]})
    original = spec.launches
    try:
        object.__setattr__(spec, "launches", {**original, "bert": lamb})
        assert differences(entry) == ["--optimizer_type: DLPerf adam, the kit None"]
    finally:
        object.__setattr__(spec, "launches", original)


def flattened(tree: dict, prefix: str = "") -> dict[str, str]:
    """A YAML mapping as the ``a.b=value`` keys --config_file takes (null leaves dropped)."""
    flat: dict[str, str] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat |= flattened(value, f"{prefix}{key}.")
        elif value is not None:
            flat[f"{prefix}{key}"] = str(value)
    return flat


# DLPerf's classifier_trainer.py config per precision and node count (single_node_train.sh:19-23,
# multi_node_train.sh); runtime.num_gpus is passed by both as --params_override.
TF_CONFIGS = {
    ("fp32", 1): "gpu.yaml",
    ("amp", 1): "gpu_fp16.yaml",
    ("fp32", 2): "multi_node_gpu.yaml",
    ("amp", 2): "multi_node_gpu_fp16.yaml",
}


@pytest.mark.parametrize(("precision", "nodes"), sorted(TF_CONFIGS))
def test_tensorflow_models_resnet50_passes_dlperf_s_config_file(precision: str, nodes: int) -> None:
    import yaml

    path = SCRIPTS / "TensorFlow/resnet50v1.5/scripts" / TF_CONFIGS[(precision, nodes)]
    theirs = flattened(yaml.safe_load(path.read_text()))
    theirs.pop("runtime.num_gpus", None)
    entry = Recorded("", (0, 0), "tensorflow-models", "resnet50", precision, "real", ())
    argv = rendered_case(entry, nodes=nodes)
    ours = dict(item.split("=", 1) for item in argv[argv.index("--config_file") + 1].split(","))
    notes = SPECS["tensorflow-models"].launches["resnet50"].notes
    assert theirs and "DLPerf" in notes
    for key in set(ours) ^ set(theirs):  # a key added or left out is named, with why, in notes
        assert key.rsplit(".", 1)[-1] in notes, f"{path.name} {key}: differs, not stated"
    for key in set(ours) & set(theirs):
        assert same(ours[key], theirs[key]), (
            f"{path.name} {key}: DLPerf {theirs[key]}, the kit {ours[key]}"
        )


def test_gluon_nlp_s_line_without_accuracy_is_still_a_step() -> None:
    """With --no_compute_acc the pin logs through log_noacc (scripts/bert/pretraining_utils.py:274
    at 7b7bf602): no mlm_acc/nsp_acc fields; the parser still reads the step and its time."""
    from driver.parsers.gluon_nlp import LINE

    line = (
        "[1,0]<stderr>:INFO:root:[step 19]\tmlm_loss=7.20000\tnsp_loss= 0.69\t"
        "throughput=40.3K tks/s\tlr=0.0000100 time=3.25, latency=162.5 ms/batch"
    )
    found = LINE.search(line)
    assert found is not None and (found["step"], found["secs"]) == ("19", "3.25")
