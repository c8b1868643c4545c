"""The hostile corpus, config side: generated malformed matrices, command-line values,
inventories, ``source.yaml`` files, ``images.lock`` files and release manifests.

Every case must end in a clear error (one ConfigError naming the file or the field; exit 2 for
the command line) or, where a value is legitimately accepted, be used verbatim and quoted. The
harness (tests/hostile.py) counts tracebacks and silent acceptances; both must be 0.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from driver.cluster.inventory import load_inventory, parse_inventory
from driver.cluster.remote import env_prefix, shell
from driver.cluster.slurm import load_slurm_config
from driver.core.matrix import load_matrix
from driver.frameworks.base import REPO_ROOT
from driver.images.lock import load_lock
from driver.model.figures import load_peaks, load_references
from driver.release.manifest import validate as validate_manifest
from driver.schema import ConfigError
from driver.sources.spec import load_spec
from tests.config_samples import minimal_source
from tests.hostile import (
    ACCEPTED,
    CLEAR,
    CliRefusal,
    HostileCase,
    cli_subprocess,
    run_corpus,
)

NAN, INF = float("nan"), float("inf")
INJECTIONS = ("-oProxyCommand=touch /tmp/x", "$(touch /tmp/x)", "; rm -rf /", "`id`")
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)

# --------------------------------------------------------------------------------------------
# Building blocks


def set_path(data: Any, path: tuple, value: Any) -> Any:
    """A deep copy of ``data`` with ``path`` set (``...`` as value deletes the key)."""
    out = copy.deepcopy(data)
    target = out
    for part in path[:-1]:
        target = target[part]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


def dotted(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class Files:
    """Writes each case's file into its own folder (the action reads it later)."""

    def __init__(self, root: Path) -> None:
        self.root, self.count = root, 0

    def write(self, name: str, content: str | bytes | None) -> Path:
        self.count += 1
        folder = self.root / f"c{self.count}"
        folder.mkdir(parents=True)
        path = folder / name
        if content is None:
            path.mkdir()  # a directory where a file belongs
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return path


def file_level_cases(
    kind: str, files: Files, filename: str, good_text: str, loader: Callable[[Path], object]
) -> Iterator[HostileCase]:
    """What every file reader must refuse: directories, missing files, bad bytes, duplicate
    keys, alias bombs, NaN, unsafe tags, deep nesting, a non-mapping document."""
    first_line = good_text.splitlines()[0]
    texts: dict[str, str | bytes | None] = {
        "directory": None,
        "non-utf8": good_text.encode() + b"\nnote: caf\xe9\n",
        "latin1-bom": b"\xff\xfe" + good_text.encode("utf-16-le"),
        "duplicate-top-key": good_text + "\n" + first_line + "\n",
        "alias-bomb": BOMB,
        "nan-anywhere": good_text + "\nnote: .nan\n",
        "inf-anywhere": good_text + "\nnote: [1, -.inf]\n",
        "python-tag": "x: !!python/object/apply:os.system ['touch /tmp/x']\n",
        "deep-nesting": "x: " + "[" * 300 + "]" * 300 + "\n",
        "deep-block-nesting": "".join(" " * i + f"k{i}:\n" for i in range(300)),
        "endless-nesting": "x: " + "[" * 1_000_000,
        # closed: libyaml's composer would recurse in C through all of it and crash
        "deep-closed-nesting": "x: " + "[" * 1_000_000 + "]" * 1_000_000 + "\n",
        "scalar-document": "just text\n",
        "list-document": "- a\n- b\n",
        "empty": "",
        "not-yaml": "a: [\n",
        "recursive-alias": "a: &a [*a]\n",
    }
    for mutation, content in texts.items():
        path = files.write(filename, content)
        yield HostileCase(f"{kind}/file/{mutation}", lambda p=path: loader(p), (str(path),))
    missing = files.root / "missing" / filename
    yield HostileCase(f"{kind}/file/missing", lambda: loader(missing), (str(missing),))


# --------------------------------------------------------------------------------------------
# Matrices

MATRIX: dict[str, Any] = {
    "framework": "pytorch",
    "defaults": {"warmup_steps": 2, "measured_steps": 5, "repeats": 3, "timeout_s": 600},
    "suites": [
        {
            "model": "resnet50",
            "topology": ["1n1g", "2n4g"],
            "batch_size": [8, "max"],
            "precision": ["fp32", "amp"],
            "variants": {"default": {"channels_last": True}},
        }
    ],
    "profiles": {
        "smoke": {
            "description": "tiny",
            "defaults": {"measured_steps": 2},
            "suites": [{"model": "bert", "batch_size": 2}],
        }
    },
}

SETTING_VALUES: dict[str, list[Any]] = {
    "warmup_steps": [-1, NAN, 1.5, "ten", True, None, [1], 10**12],
    "measured_steps": [0, -5, NAN, INF, "100", False, 10**12],
    "total_steps": [0, -1, NAN, "x", 3],  # 3 < warm-up + measured
    "repeats": [0, -1, NAN, INF, "7", True, 10**9, 2.5],
    "timeout_s": [0, -1, NAN, INF, -INF, "1h", True, 10**12],
    "epochs": [NAN, 0, -1, "one", 1],  # 1 without epoch_samples
    "epoch_samples": [0, -1, NAN, "many"],
    "loader_workers": [-1, "many", NAN, 1.5, True, 10**6],
    "drop_caches": ["yes", 1, NAN],
    "data_dir": [*INJECTIONS, "/data\n", "", 1, ["/d"], "data", "./data", "~/data"],  # relative
    "source": ["nope", "dlperf\n", 1, "$(touch /tmp/x)"],
}
SUITE_VALUES: dict[str, list[Any]] = {
    "model": ["vgg16", "resnet50\n", ["resnet50"], None, 1, "$(touch /tmp/x)"],
    "topology": ["0n0g", "1n1g\n", "2000n2000g", "1n65g", "3n8g", 1, "-1n1g", [], "1n1g;id"],
    "batch_size": [0, -1, NAN, "big", True, [], [[8]], 1.5, 10**12, "8\n"],
    "precision": ["fp16", [], 1, "FP32", "fp32\n", True],
    "dataset": ["imagenet", "real", 1],  # real: no data_dir
    "xla": ["on", "yes", 1, [True]],  # PyTorch has no XLA
    "variants": [
        {},
        ["a"],
        {"default": [1]},
        {"bad name": {}},
        {"-oProxyCommand=x": {}},
        {"default": {"chanels_last": True}},
        {"default": {"channels_last": "yes"}},
        {"default": {"channels_last": 1}},
        {"default": {"lr": NAN}},
        {"default": {"lr": INF}},
        {"default": {"lr": -1}},
        {"default": {"lr": "1; rm -rf /"}},
        {"default": {"image_size": -1}},
        {"default": {"image_size": True}},
        {"default": {"image_size": 2.5}},
        {"default": {"compile_mode": "$(touch /tmp/x)"}},
        {"default": {"optimizer": "adam"}},
        {"default": {"step_time": 0.1}},  # a calibration option, not PyTorch's
        {"default": {"bad key": 1}},
        {"default": {"num_threads": -1}},
    ],
    "colour": ["red"],  # an unknown key
    "batch": [8],  # a typo of batch_size
}


def matrix_cases(files: Files) -> Iterator[HostileCase]:
    def case(name: str, data: Any, expect: str) -> HostileCase:
        path = files.write("matrix.yaml", yaml.safe_dump(data, sort_keys=False))
        return HostileCase(f"matrix/{name}", lambda: load_matrix(path), (str(path), expect))

    for key, values in SETTING_VALUES.items():
        for i, value in enumerate(values):
            where = ("defaults", key)
            expect = "epochs" if key == "epochs" and value == 1 else key
            yield case(f"defaults.{key}/{i}", set_path(MATRIX, where, value), expect)
    for key, values in SUITE_VALUES.items():
        for i, value in enumerate(values):
            where = ("suites", 0, key)
            expect = "data_dir" if value == "real" else dotted(where)
            yield case(f"suite.{key}/{i}", set_path(MATRIX, where, value), expect)
    # a typo in a suite of a profile that is not the one chosen is still reported
    for i, value in enumerate(["vgg", 0, NAN]):
        key = "model" if i == 0 else "batch_size"
        where = ("profiles", "smoke", "suites", 0, key)
        yield case(f"profile-suite/{i}", set_path(MATRIX, where, value), "profiles.smoke.suites")
    for i, (where, value, expect) in enumerate([
        (("framework",), ["pytorch"], "framework"),
        (("framework",), "caffe", "framework"),
        (("framework",), "pytorch\n", "framework"),
        (("framework",), None, "framework"),
        (("framework",), ..., "framework"),
        (("suites",), [], "suites"),
        (("suites",), {"model": "resnet50"}, "suites"),
        (("suites",), ..., "suites"),
        (("suite",), [], "suite"),  # top-level typo
        (("defaults", "repeat"), 3, "defaults.repeat"),
        (("profiles", "smoke", "default"), {}, "profiles.smoke.default"),
        (("profiles", "smoke", "suites"), [], "profiles.smoke.suites"),
        (("profiles", "bad name"), {}, "profiles"),
        (("defaults",), [1], "defaults"),
        # a profile's description is free text (printed, kept in session.json)
        (("profiles", "smoke", "description"), "tiny\u202e", "profiles.smoke.description"),
        (("profiles", "smoke", "description"), "tiny\n# x", "profiles.smoke.description"),
        (("profiles", "smoke", "description"), "x" * 2001, "profiles.smoke.description"),
        (("profiles", "smoke", "description"), 7, "profiles.smoke.description"),
        # more cases than a matrix may hold: 300 variants x 400 batch sizes
        (("suites", 0), {"model": "resnet50", "batch_size": list(range(1, 401)),
                         "variants": {f"v{i}": {} for i in range(300)}}, "120000 cases"),
    ]):  # fmt: skip
        yield case(f"top/{i}", set_path(MATRIX, where, value), expect)
    good = yaml.safe_dump(MATRIX, sort_keys=False)
    raw = {
        "duplicate-profiles": good + "profiles:\n  other: {description: x}\n",
        "duplicate-suite-key": good.replace(
            "- model: resnet50\n", "- model: resnet50\n  model: bert\n", 1
        ),
        "duplicate-defaults-key": good.replace("  repeats: 3\n", "  repeats: 3\n  repeats: 9\n"),
        "suite-alias-bomb": good + BOMB.replace("a:", "x_a:", 1),
        "epochs-nan-yaml": good.replace("  repeats: 3\n", "  repeats: 3\n  epochs: .nan\n"),
        "timeout-nan-yaml": good.replace("timeout_s: 600", "timeout_s: .nan"),
    }
    for name, text in raw.items():
        path = files.write("matrix.yaml", text)
        yield HostileCase(f"matrix/raw/{name}", lambda p=path: load_matrix(p), (str(path),))
    yield from file_level_cases("matrix", files, "matrix.yaml", good, load_matrix)


# --------------------------------------------------------------------------------------------
# Command-line values (in process: `dlperf run --dry-run`, exit 2 and a one-line error)

CLI_VALUES: dict[str, list[str]] = {
    "--repeats": ["0", "-1", "nan", "inf", "abc", "1e3", "99999"],
    "--nodes": ["0", "-1", "2000", "nan"],
    "--gpus": ["0", "65", "-3", "x"],
    "--measured-steps": ["0", "-5", "nan", "20000000"],
    "--warmup-steps": ["-1", "x", "1.5"],
    "--batch": ["0", "-1", "abc", "1.5", "max,0", "8;id", "１", "", " 8 , max", "8,,max", ",8",
                "8,", "8 ", "8,\tmax"],
    "--option": [
        "chanels_last=true", "lr=NaN", "lr=Infinity", "lr=-1", "image_size=0",
        "image_size=true", "image_size=1e999", "compile_mode=fast", "x", "=1",
        "-oProxyCommand=x", "step_time=NaN", "channels_last=$(touch /tmp/x)", "a b=1",
        "optimizer=adam;rm", "num_threads=[1]",
    ],
    "--session": ["../x", "/abs/path", ".", "..", "a/b", "$(touch /tmp/x)", "a\nb", "x" * 101,
                  "-x", ".hidden"],
    "--data-dir": ["$(touch /tmp/x)", "/d\n", "; rm -rf /", "a b", "data", "~/data"],
    "--amp": ["maybe", "2", "", " on"],
    "--dataset": ["imagenet", "real", "", "synthetic,"],  # real: the matrix has no data_dir
    "--model": ["resnt50", "vgg", "", "resnet50,", " resnet50"],
    "--variant": ["nope", "", ","],
    "--framework": ["pytorc", "caffe", "", ",", "pytorch, tensorflow"],
    "--max-cases": ["0", "-1", "x", "1e3", "100001"],
    "--profile": ["nope", "../x"],
    "--xla": ["maybe", "on"],  # PyTorch has no XLA
}  # fmt: skip


def run_cli(argv: list[str]) -> object:
    from driver.frontend.cli import main

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    except SystemExit as stop:  # argparse: usage error, exit 2
        code = stop.code
    if code == 2:
        raise CliRefusal(err.getvalue().strip())
    return code


# Numbers of the other sub-commands: the same bounds as the schema, refused by argparse.
SUBCOMMAND_VALUES: dict[tuple[str, ...], list[str]] = {
    ("selftest", "--step-time"): ["1e308", "0", "-1", "nan", "inf", "61", "abc"],
    ("selftest", "--repeats"): ["0", "-1", "1001", "1.5", "nan"],
    ("selftest", "--nodes"): ["0", "-1", "201", "abc", "2,2", "2,,4", "2,4,", ",", ""],
    ("compare", "--alpha"): ["nan", "2", "-1", "0", "1", "inf", "x"],
    ("preflight", "--devices"): ["0", "-1", "1e3", "nan", "5000"],
    ("probe", "--iters"): ["0", "-1", "nan", "1e9"],
    ("probe", "--sizes-mb"): ["nan", "0", "1,,2", "-1", "1e9", "inf", ""],
    ("nodes", "--probe-sizes-mb"): ["1,1,1", "1,2,1.0"],
    ("selftest", "--topologies"): ["1n1g,,1n2g", ",1n1g", "1n1g,"],
    ("probe", "--session"): ["../x", "/abs/path", "a/b", ".", ".hidden", "a\nb"],
    ("parity", "--timeout"): ["nan", "inf", "-inf", "0", "-1", "1e308", "x", ""],
    ("parity", "--threads"): ["100000", "-1", "x", "1.5"],
    ("parity", "--batch"): ["0", "-8", "nan"],
    ("report", "--title"): ["a\u202eb", "a\nb", "x" * 201, "<script>x</script>", "\u200b"],
    ("import", "--title"): ["a\u202eb", "<img src=x onerror=y>", "x" * 201],
    ("release", "--title"): ["a\u202eb", "<b>x</b>", "x" * 201, "a\rb"],
    ("release", "--changelog"): ["a\u202eb", "<details>x", "y" * 2001, "a\x1b[2Jb"],
    ("release", "--signing-key"): ["", " "],  # never shown as "."
}  # fmt: skip
SUBCOMMAND_REST = {
    "parity": ["--framework", "pytorch"],
    "report": ["missing-session"],
    "import": ["missing.yaml"],
    "release": ["v0.9", "missing-session", "--reports", "missing-reports"],
    "selftest": [],
    "compare": ["a", "b"],
    "preflight": ["--inventory", "missing-inventory.yaml"],
    "probe": ["--session", "s", "--topology", "1n2g"],
    "nodes": ["--inventory", "missing-inventory.yaml"],
}


def cli_cases(files: Files) -> Iterator[HostileCase]:
    base = ["run", "--dry-run", "--profile", "cpu-smoke", "--framework", "pytorch"]
    for flag, values in CLI_VALUES.items():
        for i, value in enumerate(values):
            argv = [*base, f"{flag}={value}"]
            yield HostileCase(f"cli/{flag}/{i}", lambda a=argv: run_cli(a), (flag.split("=")[0],))
    for (command, flag), values in SUBCOMMAND_VALUES.items():
        for i, value in enumerate(values):
            argv = [command, *SUBCOMMAND_REST[command], f"{flag}={value}"]
            yield HostileCase(f"cli/{command} {flag}/{i}", lambda a=argv: run_cli(a), (flag,))
    # --option given twice (the last would win without a word), even with one value.
    for i, (first, second) in enumerate([("lr=1", "lr=2"), ("image_size=8", "image_size=8")]):
        argv = [*base, "--option", first, "--option", second]
        expect = ("--option", first.split("=")[0], "twice")
        yield HostileCase(f"cli/--option-twice/{i}", lambda a=argv: run_cli(a), expect)
    # A one-value option given twice, or a list naming a value twice: never silently one.
    for name, extra, expect in (
        ("--batch-twice", ["--batch", "8", "--batch", "16"], ("--batch", "twice")),
        ("--batch-8,8", ["--batch", "8,8"], ("--batch", "8 more than once")),
        ("--model-twice", ["--model", "resnet50", "--model", "bert"], ("--model", "twice")),
    ):
        yield HostileCase(f"cli/{name}", lambda a=[*base, *extra]: run_cli(a), expect)
    # dlperf nodes --results naming a file: the path is named, not the nodes.
    a_file = files.write("results-file", "not a folder\n")
    argv = ["nodes", "--inventory", "missing-inventory.yaml", "--results", str(a_file)]
    yield HostileCase("cli/nodes --results a file", lambda a=argv: run_cli(a),
                      ("--results", str(a_file), "a file, not a folder"))  # fmt: skip
    # selftest --nodes on the local runtime: explained in terms of the local runtime.
    local = ("--nodes", "not local: the local runtime runs every process on this one machine")
    yield HostileCase("cli/selftest --nodes on local",
                      lambda: run_cli(["selftest", "--nodes", "2"]), local)  # fmt: skip
    # An empty environment name is not "every environment" (gigabytes of installs).
    for i, names in enumerate(["", ",", " ", "pytorch,", ",pytorch"]):
        yield HostileCase(f"cli/envs/{i}", lambda n=names: run_cli(["envs", n]), ("envs",))
    # A lock file named for the audit is read, never skipped when missing or bad.
    for name, content in (("missing", ...), ("dir", None), ("non-utf8", b"schema: 1\n\xff\n")):
        path = files.root / "missing" / "images.lock"
        if content is not ...:
            path = files.write("images.lock", content)  # type: ignore[arg-type]
        argv = ["audit", "--images-lock", str(path), "v0.1-cpu"]
        yield HostileCase(
            f"cli/audit --images-lock/{name}", lambda a=argv: run_cli(a), (str(path),)
        )
    # A --results folder pyxis cannot mount (its --container-mounts list is split on ',' and
    # each entry on ':'): refused before any job is submitted.
    cluster = files.write("cluster.yaml", "slurm:\n  container: pyxis\n")
    for i, folder in enumerate(["a,b", "a:b", "x,/etc"]):
        results = files.root / "results" / folder
        argv = ["run", "--profile", "cpu-smoke", "--model", "resnet50", "--runtime", "slurm",
                "--inventory", str(cluster), "--results", str(results), "--session", "s"]
        yield HostileCase(
            f"cli/--results-pyxis-mount/{i}", lambda a=argv: run_cli(a), (str(results), "--results")
        )  # fmt: skip
    # A selection larger than --max-cases (default MAX_CASES) needs the flag to say so.
    argv = [*base, "--max-cases", "1"]
    yield HostileCase("cli/--max-cases/exceeded", lambda a=argv: run_cli(a), ("--max-cases",))
    # More simulated hosts than one machine makes: refused on a dry run too.
    argv = ["run", "--dry-run", "--simulated-hosts", "--profile", "cpu-smoke", "--framework",
            "pytorch", "--model", "resnet50", "--nodes", "201"]  # fmt: skip
    yield HostileCase("cli/--simulated-hosts/201-nodes-dry-run", lambda a=argv: run_cli(a),
                      ("--simulated-hosts", "at most 200"))  # fmt: skip
    # A data_dir no node's container mounts (docker): refused, never silently absent.
    inventory = files.write("inventory.yaml", yaml.safe_dump(
        {"nodes": [{"name": "n0", "address": "127.0.0.1", "data_dir": "/data/a"}]}))
    for i, data_dir in enumerate(["/data/b", "/data", "/elsewhere"]):
        argv = [*base, "--runtime", "docker", "--inventory", str(inventory), "--data-dir",
                data_dir]  # fmt: skip
        yield HostileCase(f"cli/docker --data-dir/{i}", lambda a=argv: run_cli(a),
                          (str(inventory), "nodes[0].data_dir", data_dir))  # fmt: skip
    for name, content in (("dir", None), ("non-utf8", b"framework: pytorch\n\xff\n"),
                          ("bomb", BOMB)):  # fmt: skip
        path = files.write("matrix.yaml", content)
        argv = ["run", "--dry-run", "--matrix", str(path)]
        yield HostileCase(f"cli/--matrix/{name}", lambda a=argv: run_cli(a), (str(path),))


# --------------------------------------------------------------------------------------------
# The slurm: section of a cluster file

# Each overrides an option the kit sets itself (sbatch takes the last one given): the error names
# the option the argument sets, whichever spelling sets it.
SBATCH_COLLISIONS: list[tuple[list[str], str]] = [
    (["--job-name=x"], "sets --job-name (-J)"), (["-J", "x"], "sets --job-name (-J)"),
    (["-Jx"], "sets --job-name (-J)"), (["--job=x"], "sets --job-name (-J)"),
    (["--nodes=1"], "sets --nodes (-N)"), (["-N1"], "sets --nodes (-N)"),
    (["-N", "1"], "sets --nodes (-N)"), (["-vN2"], "sets --nodes (-N)"),
    (["--comment=ok", "--nodes=1"], "'--nodes=1' sets --nodes"), (["-n4"], "sets --ntasks (-n)"),
    (["--ntasks=4"], "sets --ntasks (-n)"), (["--ntasks-per-node=2"], "sets --ntasks-per-node,"),
    (["--time=5"], "slurm.time_limit"), (["-t", "5"], "slurm.time_limit"),
    (["--output=/tmp/o"], "sets --output (-o)"), (["-o", "/tmp/o"], "sets --output (-o)"),
    (["--wrap=true"], "sets --wrap,"), (["--parsable"], "sets --parsable,"),
    (["--array=1-3"], "sets --array (-a)"), (["--partition=x"], "slurm.partition"),
    (["-p", "x"], "slurm.partition"), (["--account=a"], "slurm.account"),
    (["-A", "a"], "slurm.account"), (["--qos=q"], "slurm.qos"), (["-q", "q"], "slurm.qos"),
    (["--constraint=c"], "slurm.constraint"), (["-C", "c"], "slurm.constraint"),
    (["--reservation=r"], "slurm.reservation"), (["--gres=gpu:2"], "sets --gres,"),
    (["--gpus-per-node=2"], "sets --gpus-per-node,"), (["--gpus=2"], "sets --gpus (-G)"),
    (["-G2"], "sets --gpus (-G)"), (["--exclusive"], "slurm.exclusive"),
    (["--"], "ends sbatch's options"), (["--comment", "x"], "write each as --name=value"),
    (["comment=x"], "write each as --name=value"),
    # options that move the job's output or its environment
    (["--chdir=/tmp"], "sets --chdir (-D)"), (["-D", "/tmp"], "sets --chdir (-D)"),
    (["-D/tmp"], "sets --chdir (-D)"), (["--error=/tmp/e"], "sets --error (-e)"),
    (["-e", "/tmp/e"], "sets --error (-e)"), (["-e/tmp/e"], "sets --error (-e)"),
    (["--export=ALL"], "sets --export,"), (["--export=NONE"], "sets --export,"),
    (["--export-file=/tmp/env"], "sets --export-file,"), (["--get-user-env"], "get-user-env"),
]  # fmt: skip
# Typos Slurm would read as another limit: minutes or seconds of 60 and more, an hour count of
# 24 and more after a day count, more than a year.
BAD_TIME_LIMITS = ["99:99:99", "4:60:00", "4:00:60", "10:75", "1-24", "1-24:00:00", "1-12:60",
                   "400-00:00:00", "9000:00:00", "99999999999", "1-", "-1-00", "04:00:00\n"]
# Keys of framework mappings: a framework the kit knows (or "default" where one is read).
FRAMEWORK_KEYS: list[tuple[str, Any]] = [
    ("image", {"pytorhc": "nvcr.io#nvidia/pytorch:24.01-py3"}), ("image", {"PyTorch": "x"}),
    ("oci_image", {"tensorflw": "dlperf/tf"}), ("oci_bundle", {"bundle": "/shared/b"}),
    ("python", {"default": "/usr/bin/python3"}), ("python", {"pytorch\n": "/x"}),
]
MOUNTS = [["/a:/b:ro,rw"], ["/a:/b:ro+rw"], ["/a:/b:rx"], ["/a:/b:ro+ro"], ["/a:/b:"],
          ["/a:/b:ro+"], ["/a:/b:RO"], ["/a:/b:ro+nosuid+x"]]
OCI_CACHES = ["/", "/etc", "/etc/dlperf", "/usr/lib/oci", "/proc/self", "/tmp", "/home",
              "/var", "/var/lib/oci", "/shared/../etc", "//", "/run/oci"]
# No time limit (0 in any form, UNLIMITED): the session's job would hold its nodes forever.
TIME_LIMITS = ["0", "00:00", "0-0", "0:0:0", "0-00:00:00", "UNLIMITED", "infinite", 0, "-1"]


def slurm_cases(files: Files) -> Iterator[HostileCase]:
    def case(name: str, key: str, value: Any, expect: str) -> HostileCase:
        path = files.write("cluster.yaml", yaml.safe_dump({"slurm": {key: value}}))
        return HostileCase(
            f"slurm/{name}", lambda: load_slurm_config(path), (str(path), f"slurm.{key}", expect)
        )

    for i, (arguments, expect) in enumerate(SBATCH_COLLISIONS):
        yield case(f"extra_sbatch_args/{i}", "extra_sbatch_args", arguments, expect)
    for i, value in enumerate(TIME_LIMITS):
        expect = "time limit" if value == 0 else "means no time limit"
        yield case(f"time_limit/{i}", "time_limit", value, expect)
    for i, value in enumerate(BAD_TIME_LIMITS):
        yield case(f"time_limit/bounds/{i}", "time_limit", value, "time_limit")
    for i, (key, value) in enumerate(FRAMEWORK_KEYS):
        yield case(f"framework-key/{key}/{i}", key, value, next(iter(value)).strip())
    for i, value in enumerate(MOUNTS):
        yield case(f"mounts/flags/{i}", "mounts", value, "mounts[0]")
    for i, value in enumerate(OCI_CACHES):
        yield case(f"oci_cache/{i}", "oci_cache", value, "oci_cache")
    # options that change who the job runs as, its container or the files it reads
    for option in ("--uid=0", "--gid=0", "--container=/x", "--container-image=evil",
                   "--input=/etc/shadow", "-i/etc/shadow", "--container-mounts=/:/host"):
        yield case(f"extra_sbatch_args/identity/{option}", "extra_sbatch_args", [option],
                   "which the kit controls")  # fmt: skip
    from driver.cluster.slurm import SHARED_TOPS, SYSTEM_TREES
    from driver.frameworks.base import REPO_ROOT

    yield case("oci_cache/checkout", "oci_cache", str(REPO_ROOT), "own checkout")
    # A folder above the checkout; where every one is a system folder (a checkout straight
    # under /tmp, as a CI clone may be), that refusal comes first and names it so.
    system = {*SHARED_TOPS, *SYSTEM_TREES}
    above = next((str(p) for p in REPO_ROOT.parents if str(p) not in system), None)
    if above is not None:
        yield case("oci_cache/above-checkout", "oci_cache", above, "own checkout")
    else:
        yield case("oci_cache/above-checkout", "oci_cache", str(REPO_ROOT.parent), "system folder")
    for value in ("../../etc", "/etc/passwd", "Upper/Case", "x:tag:tag", "a b"):
        yield case(f"oci_image/{value}", "oci_image", {"calibration": value},
                   "a docker image reference")  # fmt: skip
    for mode in ("pyxis", "none"):
        given = {"container": mode, "oci_image": {"calibration": "dlperf/cpu:1"}}
        path = files.write("cluster.yaml", yaml.safe_dump({"slurm": given}))
        yield HostileCase(f"slurm/oci_image-with-{mode}", lambda p=path: load_slurm_config(p),
                          (str(path), f"oci_image given with container: {mode}"))  # fmt: skip


# --------------------------------------------------------------------------------------------
# Inventories

INVENTORY: dict[str, Any] = {
    "cluster": "lab",
    "defaults": {"ssh": {"user": "bench", "port": 22}, "devices": 2},
    "nodes": [
        {"name": "n0", "address": "10.0.0.1", "interface": "eth0", "data_dir": "/data"},
        {"name": "n1", "address": "gpu02.lab"},
    ],
}
NODE_VALUES: dict[tuple, list[Any]] = {
    ("address",): ["127.0.0.2\n", *INJECTIONS, "999.999.999.999", "", 1, ["h"], "a b", "::g",
                   "h\x00", "-h"],
    ("collective_address",): ["10.0.0.1\n", "-oProxyCommand=x", "300.1.1.1"],
    ("name",): ["a b", "n0\n", "-n", "", 7, "x" * 64],
    ("interface",): ["eth0\n", "-eth0", "eth0;rm", "eth 0", 1, ""],
    ("ssh", "user"): ["bench\n", "$(id)", "-oX", "a b", 5],
    ("ssh", "port"): [0, 65536, "22", 22.5, True, NAN, -22],
    ("ssh", "key"): ["-oX", "/k\n", 1],
    ("ssh", "connect_timeout"): [0, NAN, INF, -1, "10", True],
    ("ssh", "known_hosts"): ["/k\n", 1],
    ("ssh", "host_key_policy"): ["yes", "accept", "no", True, "reject\n"],
    ("ssh", "password"): ["x"],
    ("devices",): [0, -1, NAN, True, "8", 10**9, 1.5],
    ("data_dir",): ["relative", "/d\n", 1, "-o"],
    ("scratch_dir",): ["tmp", "/s\n"],
    ("min_free_gb",): [NAN, -1, INF, "5"],
    ("python",): ["-c", "python3\n", {"tensorflw": "/x"}, [], 1],
    ("docker_host",): ["/var/run/docker.sock", "unix:///x\n", "tcp://a b"],
    ("env",): [{"1X": "1"}, {"A": "x\n"}, {"A": True}, {"A B": "1"}, {"A": [1]}, {"A": NAN}],
    ("container", "variant"): ["tpu", "GPU", 1],
    ("container", "ipc"): ["none", "host\n"],
    ("container", "gpus"): ["some", "all\n", 0, "device=0;id"],
    ("container", "shm_size"): ["lots", "1g\n", -1],
    ("container", "memory"): ["lots", "2g;id", NAN],
    ("container", "ulimits"): [{"files": 1}, {"stack": "big"}, {"nofile": NAN}, {"core": "1:2:3"}],
    ("container", "mounts"): [["d:/d"], ["/a:/b:rx"], "/a:/b", ["/a\n:/b"]],
    ("container", "image"): [{"pytorc": "x"}, "-x", "a b", 1],
    ("container", "shm"): ["1g"],
    ("gpu",): [1],
}  # fmt: skip


def inventory_cases(files: Files) -> Iterator[HostileCase]:
    def case(name: str, data: Any, expect: str) -> HostileCase:
        return HostileCase(
            f"inventory/{name}",
            lambda: parse_inventory(data, "inv.yaml", check_files=False),
            ("inv.yaml", expect),
        )

    for where, values in NODE_VALUES.items():
        for i, value in enumerate(values):
            node_path = ("nodes", 0, *where)
            data = INVENTORY
            for depth in range(1, len(node_path) - 1):  # create the parent mapping if needed
                parent = node_path[:depth + 1]
                if not _has(data, parent):
                    data = set_path(data, parent, {})
            expect = dotted(node_path[:3]) if where[0] != "env" else "nodes[0].env"
            if where == ("container", "ulimits") or where == ("python",):
                expect = dotted(node_path)
            yield case(f"{dotted(where)}/{i}", set_path(data, node_path, value), expect)
    for i, (where, value, expect) in enumerate([
        (("nodes",), [], "nodes"),
        (("nodes",), {"address": "h"}, "nodes"),
        (("nodes",), ..., "nodes"),
        (("nodes", 1, "name"), "n0", "nodes[1].name"),  # two nodes of one name
        (("nodes", 1, "address"), "10.0.0.1", "nodes[1].address"),  # the same endpoint twice
        (("cluster",), "a b", "cluster"),
        (("cluster",), "lab\n", "cluster"),
        (("defaults", "devices"), -1, "defaults.devices"),
        (("defaults", "address"), "h", "defaults.address"),
        (("defaults", "ssh", "port"), NAN, "defaults.ssh.port"),
        (("extra",), 1, "extra"),
    ]):  # fmt: skip
        yield case(f"top/{i}", set_path(INVENTORY, where, value), expect)
    good = yaml.safe_dump(INVENTORY, sort_keys=False)
    path = files.write("inv.yaml", good.replace("  devices: 2\n", "  devices: 2\n  devices: 8\n"))
    yield HostileCase(
        "inventory/raw/duplicate-key", lambda: load_inventory(path, check_files=False), (str(path),)
    )
    yield from file_level_cases(
        "inventory", files, "inv.yaml", good, lambda p: load_inventory(p, check_files=False)
    )
    # Legitimately accepted: any one-line environment value, passed verbatim and quoted.
    for i, value in enumerate(INJECTIONS):
        data = set_path(INVENTORY, ("nodes", 0, "env"), {"DLPERF_X": value})

        def accepted(inventory: object, value: str = value) -> bool:
            env = inventory.nodes[0].env  # type: ignore[attr-defined]
            command = shell([*env_prefix(env), "true"])
            return env == {"DLPERF_X": value} and shlex.quote(f"DLPERF_X={value}") in command

        yield HostileCase(
            f"inventory/accepted-env/{i}",
            lambda d=data: parse_inventory(d, "inv.yaml", check_files=False),
            ("inv.yaml",),
            accepted=accepted,
        )


def _has(data: Any, path: tuple) -> bool:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return False
    return True


# --------------------------------------------------------------------------------------------
# source.yaml

SOURCE: dict[str, Any] = minimal_source()
SOURCE_VALUES: dict[tuple, list[Any]] = {
    ("commit",): ["v2.3.0", "a" * 40 + "\n", "a" * 41, "A" * 40, 1],
    ("ssh_port",): [0, NAN, "22", 70000],
    ("name",): ["a b", "-x", "demo\n", ["demo"]],
    ("models",): [{}, [], "resnet50"],
    ("models", "resnet50", "argv"): [[], "run", ["{rank}"], ["{options[dali]}"], ["{"], [NAN],
                                     [True], ["a\nb"]],
    ("models", "resnet50", "launch"): ["mpi", 1],
    ("models", "resnet50", "logging"): ["x"],
    ("models", "resnet50", "step_offset"): [-2, NAN, "1"],  # -1 is ngc-tf1 BERT's (its trace)
    ("models", "resnet50", "log_every"): [0, 1.5],
    ("models", "resnet50", "datasets"): [["imagenet"], "real"],
    ("models", "resnet50", "precisions"): [["fp16"]],
    ("models", "resnet50", "xla"): ["yes", 1],
    ("models", "resnet50", "collect"): ["rel/log.json", "/x\n"],
    ("models", "resnet50", "flags"): [[{"when": {"fp": 1}}], [{"args": "x"}], [{"if": {}}], "x"],
    ("models", "resnet50", "options"): [[1], {"bad key": 1}],
    ("models", "resnet50", "commit"): ["main"],
    ("models", "resnet50", "dir"): [..., "/x\n", 1, "/x\u2028y"],
    ("branch",): ["master"],
    # a source's one-line fields reach rendered commands and README tables: no format character
    ("title",): ["demo\u202ex", "de\u200bmo", "demo\x85"],
    ("models", "resnet50", "refused"): [[{"when": {"precision": "amp"}, "because": "no\u2066x"}]],
}  # fmt: skip


def source_cases(files: Files) -> Iterator[HostileCase]:
    for where, values in SOURCE_VALUES.items():
        for i, value in enumerate(values):
            text = yaml.safe_dump(set_path(SOURCE, where, value), sort_keys=False)
            path = files.write("source.yaml", text)
            yield HostileCase(
                f"source/{dotted(where)}/{i}", lambda p=path: load_spec(p), (str(path),)
            )
    good = yaml.safe_dump(SOURCE, sort_keys=False)
    yield from file_level_cases("source", files, "source.yaml", good, load_spec)


# --------------------------------------------------------------------------------------------
# images.lock

DIGEST = "sha256:" + "ab" * 32
LOCK: dict[str, Any] = {
    "schema": 1,
    "pins": {
        "dlperf/debian:bookworm-1": {"digest": DIGEST, "source": "debootstrap", "recipe": "r"},
        "nvcr.io/nvidia/pytorch:25.04-py3": {"digest": "unresolved", "source": "registry"},
    },
}
REF = "dlperf/debian:bookworm-1"
LOCK_VALUES: dict[tuple, list[Any]] = {
    ("schema",): [2, "1", ..., NAN, True],
    ("pins",): [[], "x", [REF]],
    ("pins", REF, "digest"): ["sha256:123", DIGEST + "\n", DIGEST.upper(), "latest", NAN, ...],
    ("pins", REF, "source"): ["ftp", "registry\n", 1, ...],
    ("pins", REF, "colour"): ["red"],
    ("pins", REF, "recipe"): [["x"], "a\nb"],
    ("pins", REF): ["x", None, []],
    ("pins", "-oProxyCommand=x"): [{"digest": DIGEST, "source": "registry"}],
    ("pins", "a b"): [{"digest": DIGEST, "source": "registry"}],
    ("extra",): [1],
}


def lock_cases(files: Files) -> Iterator[HostileCase]:
    for where, values in LOCK_VALUES.items():
        for i, value in enumerate(values):
            text = yaml.safe_dump(set_path(LOCK, where, value), sort_keys=False)
            path = files.write("images.lock", text)
            yield HostileCase(
                f"lock/{dotted(where)}/{i}", lambda p=path: load_lock(p), (str(path),)
            )
    good = yaml.safe_dump(LOCK, sort_keys=False)
    path = files.write("images.lock", good + f"  {REF}:\n    digest: unresolved\n")
    yield HostileCase("lock/raw/duplicate-ref", lambda: load_lock(path), (str(path),))
    yield from file_level_cases("lock", files, "images.lock", good, load_lock)


# --------------------------------------------------------------------------------------------
# reports/references.yaml and reports/peaks.yaml (a release's config: their text reaches the
# README beside the kit's numbers, their numbers every MFU and reference column)

REFERENCES: dict[str, Any] = {"schema": 1, "results": [
    yaml.safe_load((REPO_ROOT / "reports" / "references.yaml").read_text())["results"][0]]}
REFERENCE_VALUES: dict[tuple, list[Any]] = {
    ("schema",): [99, "1"],
    ("results", 0, "hardware"): ["\u202eH100", "x" * 201, "", "V100\n| 1 |"],
    ("results", 0, "source"): ["DLPerf\u200b", 7],
    ("results", 0, "link"): ["javascript:alert(1)", "https://x.org/a b", "ftp://x.org"],
    ("results", 0, "note"): ["a\nb", "y" * 2001],
    ("results", 0, "throughput"): [0, -1, 1e308, "12411"],
    ("results", 0, "per_device"): [[1.0], [1.0, 2.0, 3.0], 0],
    ("results", 0, "batch_setting"): ["min", 0],
    ("results", 0, "precision"): ["fp16"],
    ("results", 0, "dataset"): ["imagenet"],
    ("results", 0, "devices"): [0, 1.5],
    ("results", 0, "id"): ["a b", ...],
    ("results", 0, "unknown"): [1],
}  # fmt: skip
PEAKS: dict[str, Any] = yaml.safe_load((REPO_ROOT / "reports" / "peaks.yaml").read_text())
PEAK_VALUES: dict[tuple, list[Any]] = {
    ("schema",): [2],
    ("unit",): ["GFLOP/s"],
    ("devices", 0, "peaks"): [{"bf16": 0}, {"int8": 5.0}, {"bf16": 1e12}, {"bf16": "989"}],
    ("devices", 0, "match"): [[], [""], ["H100\u202e"]],
    ("devices", 0, "name"): ["H100 <b>\u2028"],
    ("devices", 0, "link"): ["data:text/html,x"],
}


def release_config_cases(files: Files) -> Iterator[HostileCase]:
    for kind, filename, base, values, loader in (
        ("references", "references.yaml", REFERENCES, REFERENCE_VALUES, load_references),
        ("peaks", "peaks.yaml", PEAKS, PEAK_VALUES, load_peaks),
    ):
        loader(files.write(filename, yaml.safe_dump(base, sort_keys=False)))  # the base loads
        for where, values_of in values.items():
            for i, value in enumerate(values_of):
                text = yaml.safe_dump(set_path(base, where, value), sort_keys=False)
                path = files.write(filename, text)
                yield HostileCase(
                    f"{kind}/{dotted(where)}/{i}", lambda p=path, f=loader: f(p), (str(path),)
                )
        good = yaml.safe_dump(base, sort_keys=False)
        for hostile in file_level_cases(kind, files, filename, good, loader):
            if not hostile.name.endswith("/file/missing"):  # absent: no references, no peaks
                yield hostile
    yield from reference_rule_cases(files)


def reference_rule_cases(files: Files) -> Iterator[HostileCase]:
    """references.yaml held to the rules of ``dlperf import``: efficiency, devices vs nodes, a
    range's order, one entry per id; a symlink refused without showing its target's text."""
    first = REFERENCES["results"][0]
    rules: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
        ("efficiency-969%", {"speedup": 310.08, "devices": 32, "nodes": 4},
         ("results[0]", "efficiency of 969.00%", "above 100%")),
        ("3-devices-on-4-nodes", {"devices": 3, "nodes": 4, "speedup": None},
         ("results[0]", "devices (3, the total) must be a multiple of nodes (4)")),
        ("reversed-range", {"per_device": [2000.0, 1000.0], "throughput": None},
         ("per_device", "reversed: write [1000.0, 2000.0]")),
    ]  # fmt: skip
    for name, change, expect in rules:
        document = {"schema": 1, "results": [{**first, **change}]}
        path = files.write("references.yaml", yaml.safe_dump(document, sort_keys=False))
        yield HostileCase(f"references/rule/{name}", lambda p=path: load_references(p),
                          (str(path), *expect))  # fmt: skip
    twice = {"schema": 1, "results": [first, {**first, "note": "again"}]}
    path = files.write("references.yaml", yaml.safe_dump(twice, sort_keys=False))
    duplicate = f"results[1] has the id {first['id']!r} of results[0]"
    yield HostileCase("references/rule/duplicate-id", lambda: load_references(path),
                      (str(path), duplicate))  # fmt: skip
    link = files.root / "link" / "references.yaml"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to("/etc/passwd")

    def symlinked() -> object:
        try:
            return load_references(link)
        except ConfigError as error:
            assert "root:" not in str(error), str(error)  # the target's text is never shown
            raise

    yield HostileCase("references/file/symlink-to-etc-passwd", symlinked,
                      (str(link), "is a symlink (to /etc/passwd)"))  # fmt: skip


# --------------------------------------------------------------------------------------------
# Release manifests (the audit's schema check: validate() returns the problems)


def checked_manifest(data: Any) -> object:
    problems = validate_manifest(data)
    if problems:
        raise ConfigError("manifest.json", "schema", "; ".join(problems))
    return data


def manifest_cases() -> Iterator[HostileCase]:
    base = json.loads((REPO_ROOT / "reports" / "v0.1-cpu" / "manifest.json").read_text())
    assert validate_manifest(base) == []
    member = next(iter(base["raw_files"]))
    mutations: list[tuple[tuple, Any]] = [
        (("schema",), 2), (("schema",), "1"), (("schema",), True), (("kind",), "other"),
        (("unknown",), 1), (("raw_files", member, "sha256"), "abc"),
        (("raw_files", member, "sha256"), "a" * 64 + "\n"), (("raw_files", member), "x"),
        (("counts", "repeats"), NAN), (("counts", "cases"), INF), (("previous",), 1),
    ]  # fmt: skip
    for name in base:
        if name == "schema":
            continue
        mutations.append(((name,), ...))
        wrong = 1 if not isinstance(base[name], int) or isinstance(base[name], bool) else "1"
        mutations.append(((name,), wrong))
    for i, (where, value) in enumerate(mutations):
        data = set_path(base, where, value)
        yield HostileCase(
            f"manifest/{dotted(where)}/{i}", lambda d=data: checked_manifest(d), (where[0],)
        )
    yield HostileCase("manifest/not-an-object", lambda: checked_manifest([base]), ("manifest",))


# --------------------------------------------------------------------------------------------


def all_cases(root: Path) -> list[HostileCase]:
    files = Files(root)
    return [
        *matrix_cases(files),
        *cli_cases(files),
        *slurm_cases(files),
        *inventory_cases(files),
        *source_cases(files),
        *lock_cases(files),
        *release_config_cases(files),
        *manifest_cases(),
    ]


@pytest.mark.slow  # 25 s on the 2-core AVX2 EPYC, in make test
def test_hostile_config_corpus(tmp_path: Path) -> None:
    cases = all_cases(tmp_path)
    kinds = run_corpus(cases).print_summary("config")
    assert len(cases) >= 200
    assert kinds["traceback"] == 0 and kinds["silent"] == 0 and kinds["vague"] == 0
    assert kinds[CLEAR] + kinds[ACCEPTED] == len(cases)
    assert kinds[ACCEPTED] == len(INJECTIONS)  # only the env values, each verbatim and quoted


def test_a_billion_laughs_file_is_refused_in_well_under_a_second(tmp_path: Path) -> None:
    import time

    path = tmp_path / "matrix.yaml"
    path.write_text(BOMB)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="expands to more than"):
        load_matrix(path)
    assert time.monotonic() - started < 0.5


SUBPROCESS_SAMPLE = [
    ["--repeats", "0"],
    ["--nodes", "0"],
    ["--measured-steps", "0"],
    ["--option", "chanels_last=true"],
    ["--option", "lr=NaN"],
    ["--session", "../x"],
    ["--session", "/abs/path"],
    ["--batch", "-4"],
]


@pytest.mark.parametrize("extra", SUBPROCESS_SAMPLE, ids=lambda a: " ".join(a))
def test_the_real_cli_refuses_with_exit_2_and_no_traceback(
    extra: list[str], tmp_path: Path
) -> None:
    argv = ["run", "--dry-run", "--profile", "cpu-smoke", "--results", str(tmp_path), *extra]
    with pytest.raises(CliRefusal) as refused:
        cli_subprocess(argv, cwd=REPO_ROOT)
    assert extra[0] in str(refused.value) and "\n" not in str(refused.value).strip()
    assert not any(tmp_path.iterdir())  # nothing run, nothing written
