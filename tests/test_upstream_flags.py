"""Every flag an upstream launch template passes, checked against recorded facts of its pinned code.

Each source keeps ``flags.yaml`` beside its ``source.yaml``: per model the pinned commit and the
branches or tags it is reachable from (or, for a source pinned to a PyPI release, the release's
wheel and the branch it was made from), and per program of the command line (the upstream
script, its launcher, mpirun, ...) every flag the template passes, where it is defined at that
commit (``path:line``), what it means there and the verdict of the check (``ok``, ``fixed``:
the template was changed to match the code, ``removed``: the template no longer passes it,
``refused``: defined, but only variants the source refuses before they start would pass it).
The recorded data is the contract: this test renders every model's commands (4 nodes x 8 GPUs,
and one node / one device for the flag blocks that need them) and requires every flag in them
to be recorded as defined and ok or fixed, every flag only the refused variants would pass to
be recorded as defined and refused, and every recorded flag to be passed as its verdict says.
Where a snapshot of the repository is present (``/work/.mirror/<owner>+<name>/repo``, made by
the project's read-only fetch tool; not in CI),
the facts themselves are re-read from the pinned commits: reachability, script blobs, and each
flag's definition at its recorded line. A release-pinned source is re-read from its wheel where
the wheel is present in a local folder (``DLPERF_WHEELS`` or pip's ``PIP_FIND_LINKS``; the test
downloads nothing): its sha256 first, then the same blobs and definitions.
"""

from __future__ import annotations

import ast
import hashlib
import io
import itertools
import os
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any
from zipfile import ZipFile

import pytest
import yaml

from driver.core.matrix import Overrides, apply_overrides, load_matrix
from driver.launchers.base import NodeRank
from driver.model.case import Topology
from driver.plugins import load_all
from driver.sources.spec import COMMIT, ReleaseSpec, SourceSpec
from driver.sources.upstream import SPECS, UpstreamSource

load_all()

MIRRORS = Path("/work/.mirror")
FLAG = re.compile(r"^--?[A-Za-z][\w.-]*$")
VERDICTS = ("ok", "fixed", "removed", "refused", "unverified")
# Sources whose pinned code could not be read here (the record says why, in unverified_because):
# their flags may be "unverified" and their commits carry no verified branch or tag. The set is
# explicit so that it cannot grow silently; the README's upstream table says "pinned only".
# Empty: tensorflow-models, the last one, is pinned to its PyPI release 2.3.0, read in full.
UNVERIFIABLE: set[str] = set()
RENDERED = ("4n32g", "1n8g", "1n1g")  # multi-node, one node, one device: every flag block


def specs() -> list[SourceSpec]:
    return sorted(SPECS.values(), key=lambda spec: spec.name)


def record_path(spec: SourceSpec) -> Path:
    return spec.folder / "flags.yaml"


@cache
def record(name: str) -> dict[str, Any]:
    return yaml.safe_load(record_path(SPECS[name]).read_text())


def model_ids() -> list[tuple[str, str]]:
    return [(spec.name, model) for spec in specs() for model in spec.launches]


# --- rendering -----------------------------------------------------------------------------------


def rank(topology: Topology) -> NodeRank:
    addrs = tuple(f"10.0.0.{11 + i}" for i in range(topology.nodes))
    return NodeRank(0, topology.nodes, topology.devices_per_node, addrs[0], 29500, addrs)


def rendered(spec: SourceSpec, model: str) -> tuple[list[list[str]], list[list[str]]]:
    """Node 0's upstream argv for every matrix case and every flag block's conditions: those of
    the variants that run, and those the refused variants would pass (a refused variant renders
    nothing; its flags stay in the template, recorded with the verdict ``refused``)."""
    launch = spec.launches[model]
    cases = [
        case
        for case in apply_overrides(
            load_matrix(spec.matrix_file).cases, Overrides(topologies=("4n32g",))
        )
        if case.model == model
    ]
    assert cases, f"{spec.matrix_file}: no {model} case"
    base = cases[0]
    toggles = [key for key, value in launch.options.items() if isinstance(value, bool)]
    variants = []
    for precision, dataset, xla, topology, *flips in itertools.product(
        launch.precisions,
        launch.datasets,
        (False, True) if launch.xla else (False,),
        RENDERED,
        *[(False, True)] * len(toggles),
    ):
        variants.append(
            replace(
                base,
                precision=precision,
                dataset=dataset,
                xla=xla,
                topology=Topology.parse(topology),
                data_dir=base.data_dir or "/data/x",
                options=dict(zip(toggles, flips, strict=True)),
            )
        )
    upstream = UpstreamSource(spec)
    # The refused variants' argv as the template would make it, were they not refused.
    lifted = UpstreamSource(
        spec.model_copy(
            update={
                "launches": {
                    m: ml.model_copy(update={"refused": []}) for m, ml in spec.launches.items()
                }
            }
        )
    )
    out: dict[bool, list[list[str]]] = {False: [], True: []}
    for case in [*cases, *variants]:
        batch = int(case.batch_size) if case.batch_size != "max" else 8
        try:
            out[False].append(upstream.launch_argv(case, rank(case.topology), batch))
        except ValueError as error:
            assert "refuses this variant" in str(error), error
            out[True].append(lifted.launch_argv(case, rank(case.topology), batch))
    return out[False], out[True]


def flags_by_program(argv: list[str], programs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(program argv0, flag) for every flag token, each attributed to the program it follows.

    A token equal to a program's ``argv0`` starts that program; the script of ``sh -c`` is
    split and walked the same way (pytorch-examples passes ``--gpu`` inside it).
    """
    starts = {program["argv0"] for program in programs}
    current: str | None = None
    found: list[tuple[str, str]] = []

    def walk(tokens: list[str]) -> None:
        nonlocal current
        after_c = False
        for token in tokens:
            if after_c:
                walk(shlex.split(token))
                after_c = False
                continue
            if token in starts:
                current = token
                continue
            if FLAG.match(token):
                assert current is not None, f"flag {token} before any recorded program: {argv}"
                found.append((current, token))
                after_c = current == "sh" and token == "-c"

    walk(argv)
    return found


# --- definitions read from source text (re-verification against a snapshot) ---------------------


def defined_flags(text: str) -> dict[str, int]:
    """Flag -> line of the call that defines it: argparse, absl DEFINE_*, Paddle's add_arg."""
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        strings = [
            arg.value
            for arg in node.args
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
        ]
        keyword = next(
            (k.value.value for k in node.keywords if k.arg == "name"
             and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)),
            None,
        )  # fmt: skip
        if name == "add_argument":
            for value in strings:
                if value.startswith("-"):
                    out.setdefault(value, node.lineno)
        elif name.startswith("DEFINE_") or name == "add_arg":
            flag = keyword or (strings[0] if strings else None)
            if flag:
                out.setdefault("--" + flag, node.lineno)
    return out


def mirror_for(spec: SourceSpec) -> Path | None:
    owner_name = spec.repository.removeprefix("https://github.com/").rstrip("/")
    path = MIRRORS / owner_name.replace("/", "+") / "repo"
    return path if path.is_dir() else None


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    )


def wheel_for(release: ReleaseSpec) -> Path | None:
    """The pinned wheel in a local folder (``DLPERF_WHEELS``, ``PIP_FIND_LINKS``), if any."""
    folders = os.environ.get("DLPERF_WHEELS", "").split(os.pathsep)
    folders += os.environ.get("PIP_FIND_LINKS", "").split()
    for folder in filter(None, folders):
        path = Path(folder.removeprefix("file://")) / release.file
        if path.is_file():
            return path
    return None


def git_blob_id(data: bytes) -> str:
    """git's blob id of a file's bytes (``git hash-object``), as recorded for every script."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 (git's id)


def release_record(release: ReleaseSpec) -> dict[str, str]:
    return {key: getattr(release, key) for key in ("package", "version", "file", "sha256")}


# --- the contract: records exist and cover every rendered flag -----------------------------------


@pytest.mark.parametrize("spec", specs(), ids=[s.name for s in specs()])
def test_every_source_and_model_has_a_record(spec: SourceSpec) -> None:
    assert record_path(spec).is_file(), f"{record_path(spec)}: missing (issue 16 part 2)"
    data = record(spec.name)
    assert data["source"] == spec.name and data["repository"] == spec.repository
    assert re.match(r"^\d{4}-\d{2}-\d{2}$", str(data["checked"]))
    assert set(data["models"]) == set(spec.launches), record_path(spec)
    for model, launch in spec.launches.items():
        facts = data["models"][model]
        if spec.release is not None:  # pinned to a release: its wheel, and the branch it is of
            assert "commit" not in facts and "reachable_from" not in facts, model
            assert facts["release"] == release_record(spec.release), (
                f"{model}: the record is of another release than source.yaml's"
            )
            assert facts["released_from"] == spec.release.branch, model
        else:
            assert facts["commit"] == launch.commit, f"{model}: the record is of another commit"
            assert COMMIT.match(facts["commit"])
            refs = facts["reachable_from"]
            assert isinstance(refs, list) and all(isinstance(ref, str) and ref for ref in refs)
            assert refs or spec.name in UNVERIFIABLE, (
                f"{model}: {launch.commit} must be reachable from a branch or tag"
            )
        for key in ("batch", "rate", "ranks", "steps"):
            assert facts["semantics"][key], f"{model}: semantics.{key} not recorded"
        for program in facts["programs"]:
            assert program["argv0"]
            assert ("script" in program) != ("external" in program), program["argv0"]
            if "script" in program and spec.name not in UNVERIFIABLE:
                assert re.match(r"^[0-9a-f]{40}$", program["blob"]), program["argv0"]
            for flag, fact in (program.get("flags") or {}).items():
                assert fact["verdict"] in VERDICTS, (model, flag)
                if fact["verdict"] == "unverified":
                    assert spec.name in UNVERIFIABLE, f"{model} {flag}: unverified"
                assert isinstance(fact["defined"], bool) and fact["where"] and fact["meaning"]
                if fact["verdict"] != "removed":
                    assert fact["defined"], f"{model} {flag}: passed but not defined"


def test_only_the_listed_sources_are_unverified() -> None:
    declared = {spec.name for spec in specs() if record(spec.name).get("unverified_because")}
    assert declared == UNVERIFIABLE
    for name in UNVERIFIABLE:
        assert len(record(name)["unverified_because"]) > 40  # says why, not just that


@pytest.mark.parametrize(("source", "model"), model_ids())
def test_every_rendered_flag_is_defined_and_verified(source: str, model: str) -> None:
    spec = SPECS[source]
    facts = record(source)["models"][model]
    programs = {program["argv0"]: program.get("flags") or {} for program in facts["programs"]}
    running, refused = rendered(spec, model)
    passed = {pair for argv in running for pair in flags_by_program(argv, facts["programs"])}
    only_refused = {
        pair for argv in refused for pair in flags_by_program(argv, facts["programs"])
    } - passed
    allowed = ("ok", "fixed", "unverified") if source in UNVERIFIABLE else ("ok", "fixed")
    for program, flag in sorted(passed | only_refused):
        fact = programs[program].get(flag)
        assert fact is not None, f"{source} {model}: {program} {flag} is passed but not recorded"
        expected = ("refused",) if (program, flag) in only_refused else allowed
        assert fact["defined"] and fact["verdict"] in expected, (source, model, flag, expected)
    for program, flags in programs.items():
        for flag, fact in flags.items():
            if fact["verdict"] == "removed":
                assert (program, flag) not in passed | only_refused, (
                    f"{source} {model}: {flag} was removed"
                )
            elif fact["verdict"] == "refused":
                assert (program, flag) in only_refused, (
                    f"{source} {model}: {program} {flag} is recorded as passed only by refused "
                    "variants, but a running variant or no variant passes it"
                )
            else:
                assert (program, flag) in passed, (
                    f"{source} {model}: {program} {flag} is recorded but no running variant "
                    "passes it (a flag only refused variants pass has the verdict refused)"
                )


def test_walker_attributes_flags_to_their_program() -> None:
    programs = [{"argv0": a} for a in ("torchrun", "sh", "main.py")]
    argv = ["torchrun", "--nnodes", "4", "--no-python", "sh", "-c",
            'exec python main.py --gpu "$LOCAL_RANK" "$@"', "main.py", "-a", "resnet50",
            "-mca", "plm_rsh_args", "-p 2222"]  # fmt: skip
    assert flags_by_program(argv, programs) == [
        ("torchrun", "--nnodes"), ("torchrun", "--no-python"), ("sh", "-c"),
        ("main.py", "--gpu"), ("main.py", "-a"), ("main.py", "-mca"),
    ]  # fmt: skip


def test_definitions_are_read_from_parser_calls() -> None:
    text = (
        "import argparse\np = argparse.ArgumentParser()\n"
        "p.add_argument('-b', '--batch-size', type=int)\n"
        "flags.DEFINE_integer(name='train_steps', default=1, help='')\n"
        "flags.DEFINE_bool('use_fp16', False, '')\n"
        "g.add_arg('max_iter', int, 0, 'steps')\n"
    )
    assert defined_flags(text) == {
        "-b": 3, "--batch-size": 3, "--train_steps": 4, "--use_fp16": 5, "--max_iter": 6,
    }  # fmt: skip


# --- re-verification against the snapshots and wheels, where present ----------------------------


def pinned_reader(source: str, model: str) -> tuple[str, Callable[[str], bytes | None]]:
    """The pinned code's name and a reader of its files (None: no such file): the source's wheel
    where it is pinned to a release, else its snapshot at the model's commit (reachability checked
    first); skips when neither is here."""
    spec = SPECS[source]
    facts = record(source)["models"][model]
    if spec.release is not None:
        wheel = wheel_for(spec.release)
        if wheel is None:
            pytest.skip(f"{spec.release.file} is in no local wheel folder; the record is the pin")
        data = wheel.read_bytes()
        assert hashlib.sha256(data).hexdigest() == spec.release.sha256, f"{wheel}: not the pin"
        with ZipFile(io.BytesIO(data)) as archive:
            members = {name: archive.read(name) for name in archive.namelist()}
        if not spec.release.files:
            return spec.release.file, members.get
        # The repository's files the wheel lacks (Megatron-LM's pretrain_gpt.py): read from the
        # snapshot at their commit and held to their recorded sha256.
        repo = mirror_for(spec)
        if repo is None:
            pytest.skip(f"no snapshot of {spec.repository} for the files the wheel lacks")
        for pinned in spec.release.files:
            shown = subprocess.run(
                ["git", "-C", str(repo), "show", f"{pinned.commit}:{pinned.path}"],
                capture_output=True, check=False,
            )  # fmt: skip
            assert shown.returncode == 0, f"{pinned.path} at {pinned.commit[:12]}"
            assert hashlib.sha256(shown.stdout).hexdigest() == pinned.sha256, pinned.path
            members[pinned.path] = shown.stdout
        return spec.release.file, members.get
    repo = mirror_for(spec)
    if repo is None:
        pytest.skip(f"no snapshot of {spec.repository} here; the recorded data is the contract")
    commit = facts["commit"]
    assert git(repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0, commit
    for ref in facts["reachable_from"]:  # a branch or a tag name
        assert any(
            git(repo, "merge-base", "--is-ancestor", commit, full).returncode == 0
            for full in (f"refs/heads/{ref}", f"refs/tags/{ref}")
        ), f"{source} {model}: {commit[:12]} is not reachable from {ref}"

    def show(path: str) -> bytes | None:
        shown = subprocess.run(
            ["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True, check=False
        )
        return shown.stdout if shown.returncode == 0 else None

    return commit[:12], show


@pytest.mark.parametrize(("source", "model"), model_ids())
def test_recorded_facts_hold_at_the_pinned_code(source: str, model: str) -> None:
    facts = record(source)["models"][model]
    pin, read_bytes = pinned_reader(source, model)
    texts: dict[str, str] = {}

    def read(path: str) -> str:
        if path not in texts:
            data = read_bytes(path)
            assert data is not None, f"{path} does not exist in {pin}"
            texts[path] = data.decode()
        return texts[path]

    for program in facts["programs"]:
        if "script" in program:
            data = read_bytes(program["script"])
            assert data is not None, f"{program['script']} does not exist in {pin}"
            assert git_blob_id(data) == program["blob"], f"{program['script']} in {pin}"
        for flag, fact in (program.get("flags") or {}).items():
            where = str(fact["where"])
            if not fact["defined"]:  # "path (why)": the pinned file must indeed lack it
                path = where.split()[0]
                lines = defined_flags(read(path))
                assert flag not in lines, f"{source} {model}: {flag} is defined in {path}"
                continue
            match = re.match(r"^(?P<path>[\w./-]+\.py):(?P<line>\d+)$", where)
            if match is None:
                continue  # an external program (mpirun, torchrun): not in this repository
            lines = defined_flags(read(match["path"]))
            assert lines.get(flag) == int(match["line"]), (
                f"{source} {model}: {flag} is not defined at {where} (found: {lines.get(flag)})"
            )
