"""Every upstream entry's run-time packages, held to what its image ships (issue 33, item 1).

Beside each ``trace.yaml``, ``needs.yaml`` records per model the modules the pinned script imports
at run time (``path:line`` at the pin), the package each belongs to and what it calls there, and,
for the image, which packages its base ships (with the public source that says so) and which the
kit's Dockerfile installs. Per variant the verdict is ``verified``, ``fixed`` (the Dockerfile or the
template changed) or ``refused`` (the source refuses the variant before it starts, with the reason).
These tests hold the traces, the sources, the Dockerfiles and the matrices to that record.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from driver.core.matrix import load_matrix
from driver.frameworks.base import REPO_ROOT
from driver.model.case import Topology
from driver.plugins import load_all
from driver.sources.upstream import SPECS, UpstreamSource
from tests.test_upstream_sources import case_for
from tests.test_upstream_traces import CITATION, trace_of

load_all()

VERDICTS = ("verified", "fixed", "refused")
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "upstream" / "needs"


def needs_of(source: str) -> dict[str, Any]:
    path = SPECS[source].path.parent / "needs.yaml"
    assert path.is_file(), f"{source}: no needs.yaml beside {SPECS[source].path}"
    return yaml.safe_load(path.read_text())


def entries() -> list[tuple[str, str]]:
    return sorted((name, model) for name, spec in SPECS.items() for model in spec.launches)


def variant_matches(variant: str, case: Any) -> bool:
    """Whether a trace/needs variant label ('amp real dali', 'fp32 synthetic ...') names a case."""
    words = variant.split()
    if words[0] != case.precision or words[1] != case.dataset:
        return False
    dali = case.options.get("dali")
    if dali is not None and ("dali" in words or "nodali" in words):
        return ("dali" if dali else "nodali") in words
    if any(word in ATTENTION_BACKENDS for word in words[2:]):
        return case.options.get("attention") in words
    return True


# Attention backends a variant label may name (torchtitan's refused "amp real sdpa").
ATTENTION_BACKENDS = ("sdpa", "flex_flash", "varlen")


def refused_options(words: list[str], case: Any) -> dict[str, Any]:
    """The options of a case asking for the refused variant ``words``: its attention backend,
    else DALI on or off."""
    attention = [word for word in words[2:] if word in ATTENTION_BACKENDS]
    if attention:
        return {**case.options, "attention": attention[0]}
    return {"dali": "dali" in words}


@pytest.mark.parametrize(("source", "model"), entries())
def test_every_package_the_script_imports_is_in_the_image(source: str, model: str) -> None:
    needs = needs_of(source)
    assert needs["source"] == source and needs["image"]["base"] == SPECS[source].base_image
    ships, installs = needs["image"]["ships"], needs["image"]["installs"]
    entry = needs["models"][model]
    launch = SPECS[source].launches[model]
    if launch.commit:
        assert entry["commit"] == launch.commit, "the record is of another commit than the pin"
    missing = {api["package"] for api in entry["apis"] if not api["in_image"]}
    for item in entry["imports"]:
        assert item["at"] and all(CITATION.match(at) for at in item["at"]), item
        package = item["package"]
        if package in missing:
            continue  # its variants are refused (below)
        assert package in ships or package in installs, (
            f"{source} {model}: {item['module']} ({package}) is neither shipped by "
            f"{needs['image']['base']} nor installed by the Dockerfile"
        )
    for package, fact in ships.items():
        assert str(fact["at"]).strip(), package  # where it says so
    for api in entry["apis"]:
        assert api["why"].strip() and api["variants"], api
        assert all(CITATION.match(at) for at in api["at"]), api


CURRENT = sorted(n for n, s in SPECS.items() if s.current_image and s.current_image.image)


@pytest.mark.parametrize("source", CURRENT)
def test_the_current_image_ships_what_the_pinned_scripts_import(source: str) -> None:
    """A source's current image (source.yaml current_image) runs the same pinned scripts: every
    package they import is shipped by its base, per a cited source, or installed by the
    Dockerfile, which builds on that base too."""
    needs = needs_of(source)
    current = SPECS[source].current_image
    assert current is not None
    record = needs["current_image"]
    assert record["base"] == current.base_image
    ships, installs = record["ships"], needs["image"]["installs"]
    for package, fact in ships.items():
        assert str(fact["at"]).strip() and str(fact["version"]).strip(), package
    for model, entry in needs["models"].items():
        for item in entry["imports"]:
            assert item["package"] in ships or item["package"] in installs, (
                f"{source} {model}: {item['module']} ({item['package']}) is neither shipped by "
                f"{current.base_image} nor installed by the Dockerfile"
            )
    for package, fact in ships.items():  # a version that moved is named among the differences
        before = needs["image"]["ships"].get(package, {}).get("version")
        if before not in (None, "base") and str(fact["version"]) != str(before):
            assert any(str(fact["version"]) in line for line in current.differs), package


REFUSED_CURRENT = sorted(n for n, s in SPECS.items() if s.current_image and s.current_image.refused)


@pytest.mark.parametrize("source", REFUSED_CURRENT)
def test_a_refused_current_image_names_what_the_pinned_code_calls_and_where_it_went(
    source: str,
) -> None:
    """No current image: needs.yaml names each API the pinned code calls (path:line at the pin)
    that every build on CUDA 11.8 or later lacks, the release that removed it and a public
    record of that; source.yaml's reason cites the same files."""
    current = SPECS[source].current_image
    assert current is not None and current.refused
    record = needs_of(source)["current_image"]
    assert record["base"] == "none" and record["calls"]
    for call in record["calls"]:
        assert call["api"] and call["removed"] and call["cited"].startswith("https://"), call
        assert call["at"] and all(CITATION.match(at) for at in call["at"]), call
        assert any(Path(at.split(":")[0]).name in current.refused for at in call["at"]), call


@pytest.mark.parametrize("source", sorted(SPECS))
def test_what_the_dockerfile_installs_is_in_the_dockerfile_at_its_version(source: str) -> None:
    needs = needs_of(source)
    dockerfile = SPECS[source].dockerfile.read_text()
    for package, fact in needs["image"]["installs"].items():
        assert fact["at"] == str(SPECS[source].dockerfile.relative_to(REPO_ROOT)), package
        version = str(fact["version"])
        pinned = re.search(rf"{re.escape(package)}(?:[=_-]+|\S*@){re.escape(version)}", dockerfile)
        named = package in dockerfile.lower() or package.replace("-", "_") in dockerfile
        assert pinned or (named and version in dockerfile) or "dependency" in version, (
            f"{source}: needs.yaml says the Dockerfile installs {package} {version}"
        )


@pytest.mark.parametrize(("source", "model"), entries())
def test_the_traces_needs_is_the_record(source: str, model: str) -> None:
    """No trace asserts what nobody checked: its needs fact names the record's packages."""
    said = trace_of(source)["models"][model]["facts"]["needs"]
    record = needs_of(source)["models"][model]
    assert not re.search(r"not (checked|verified)", said["says"]), said["says"]
    assert sorted(said["packages"]) == sorted({i["package"] for i in record["imports"]})
    assert "needs.yaml" in said["says"]


@pytest.mark.parametrize(("source", "model"), entries())
def test_every_traced_variant_has_a_verdict_and_refusals_are_the_sources(
    source: str, model: str
) -> None:
    record = needs_of(source)["models"][model]
    traced = {v["variant"]: v["status"] for v in trace_of(source)["models"][model]["variants"]}
    verdicts = {v["variant"]: v for v in record["variants"]}
    assert set(verdicts) == set(traced), (source, model)
    refused_by_api = {v for api in record["apis"] if not api["in_image"] for v in api["variants"]}
    for name, verdict in verdicts.items():
        assert verdict["verdict"] in VERDICTS, verdict
        is_refused = verdict["verdict"] == "refused"
        assert is_refused == (traced[name] == "refused") == (name in refused_by_api), name
        if verdict["verdict"] != "verified":
            assert verdict["because"].strip(), name
    refusals = SPECS[source].launches[model].refused
    assert bool(refusals) == bool(refused_by_api), "the record and source.yaml disagree"


@pytest.mark.parametrize(("source", "model"), entries())
def test_the_matrix_holds_no_refused_variant_and_asking_for_one_is_refused(
    source: str, model: str
) -> None:
    record = needs_of(source)["models"][model]
    refused = [v["variant"] for v in record["variants"] if v["verdict"] == "refused"]
    upstream = UpstreamSource(SPECS[source])
    cases = [c for c in load_matrix(SPECS[source].matrix_file).cases if c.model == model]
    assert cases
    for case in cases:
        assert not any(variant_matches(v, case) for v in refused), case.id
        upstream.launch_for(case)  # raises for a refused variant
    for variant in refused:
        words = variant.split()
        case = replace(
            case_for(source, model),
            precision=words[0],
            dataset=words[1],
            data_dir="/data/x",
            options=refused_options(words, case_for(source, model)),
            topology=Topology(1, 1),
        )
        because = SPECS[source].launches[model].refused[0].because
        with pytest.raises(ValueError, match="refuses this variant") as caught:
            upstream.launch_for(case)
        assert because in str(caught.value)


def test_the_dali_facts_are_the_wheels() -> None:
    """The recorded operator check of DALI 1.26.0 says what the refusals rely on."""
    import json

    facts = json.loads((FIXTURES / "dali-1.26.0.json").read_text())
    assert facts["version"] == "1.26.0"
    assert not facts["ops"]["nvJPEGDecoderRandomCrop"] and not facts["ops"]["nvJPEGDecoder"]
    for name in ("FileReader", "TFRecordReader", "ImageDecoderRandomCrop", "ImageDecoder"):
        assert facts["ops"][name], name  # ngc-tf1 / ngc-pytorch DALI variants call these
    assert facts["plugin"]["paddle.uses_paddle.device.cuda.current_stream"]
    plugins = facts["plugin"]
    assert plugins["tf.DALIIterator"] and plugins["mxnet.DALIClassificationIterator"]


def test_docs_and_readme_give_each_refusal_its_reason() -> None:
    docs = (REPO_ROOT / "docs" / "upstream.md").read_text()
    readme = (REPO_ROOT / "README.md").read_text()
    for source, model in entries():
        for verdict in needs_of(source)["models"][model]["variants"]:
            if verdict["verdict"] != "refused":
                continue
            row = f"`{source}` {model} {verdict['variant']}"
            assert row in docs, row
            assert f"{source}" in readme and "refused because" in readme


def test_a_needs_file_per_source(tmp_path: Path) -> None:
    found = sorted(p.parent for p in REPO_ROOT.glob("*/upstream/needs.yaml"))
    found += sorted(p.parent for p in REPO_ROOT.glob("*/upstream/*/needs.yaml"))
    found += sorted(p.parent for p in REPO_ROOT.glob("NVIDIADeepLearningExamples/*/needs.yaml"))
    assert sorted(found) == sorted(spec.folder for spec in SPECS.values())


def removed_modules() -> list[tuple[str, str, dict[str, Any]]]:
    """(source, package, removal) for each module a base image's package dropped upstream."""
    return [
        (source, package, removal)
        for source in sorted(SPECS)
        for package, fact in needs_of(source)["image"]["ships"].items()
        for removal in fact.get("removed", [])
    ]


def dockerfile_runs(text: str) -> list[str]:
    """The shell commands of a Dockerfile's RUN instructions, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if ln[:1] != "#"))
    return [ln[4:].strip() for ln in joined.splitlines() if ln.startswith("RUN ")]


def removal_check(source: str, removal: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The check a removal names (``checked``): a RUN of the Dockerfile (``bash -c``, the image
    refused at build), or a model's command in source.yaml (``model``: its ``sh -c`` prelude,
    run by each case of that model, which then execs the rest of the command), and the models
    of the source that do not run it."""
    module = removal["module"]
    checked = REPO_ROOT / removal["checked"]
    if checked == SPECS[source].path:
        model = removal["model"]
        argv = list(SPECS[source].launches[model].argv)
        assert argv[:2] == ["sh", "-c"] and f'python -c "import {module}"' in argv[2], argv[:3]
        others = [m for m in SPECS[source].launches if m != model]
        return ["sh", "-c", argv[2]], others
    assert checked == SPECS[source].dockerfile
    runs = [r for r in dockerfile_runs(checked.read_text()) if f"import {module}" in r]
    assert runs, f"{checked}: no RUN imports {module}"
    check = runs[0]  # the first to import it: its refusal is the one a build shows
    assert f'python -c "import {module}"' in check, "the module is imported on its own"
    return ["bash", "-o", "pipefail", "-c", check], []


@pytest.mark.parametrize(
    ("source", "package", "removal"), removed_modules(), ids=lambda v: str(v)[:24]
)
def test_a_base_without_a_removed_module_is_refused_with_the_reason(
    source: str, package: str, removal: dict[str, Any], tmp_path: Path
) -> None:
    """The check, run for real against a package with and without the module: where it lacks
    it, what needs it is refused before it starts, naming the commit that removed it; a
    per-case check leaves the other models of the image alone (they do not run it)."""
    import subprocess
    import sys

    module = removal["module"]
    assert re.fullmatch(r"[0-9a-f]{40}", removal["commit"]) and removal["at"].startswith("https://")
    check, unaffected = removal_check(source, removal)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    for has_it in (False, True):
        root = tmp_path / str(has_it)
        parts = module.split(".")
        (root / parts[0]).mkdir(parents=True)
        (root / parts[0] / "__init__.py").write_text("")
        if has_it:  # and everything else the check imports: a stand-in package tree
            for name in re.findall(r"import ([\w., ]+?)[;\"]", " ".join(check)):
                for dotted in (n.strip() for n in name.split(",")):
                    folder = root.joinpath(*dotted.split("."))
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / "__init__.py").touch()
            for attribute in re.findall(r"(apex\.\w+)\.(\w+)[,\"]", " ".join(check)):
                init = root.joinpath(*attribute[0].split(".")) / "__init__.py"
                init.write_text(init.read_text() + f"{attribute[1]} = object\n")
        done = subprocess.run(
            [*check, "echo", "ran:", "the", "command"],  # a per-case check execs "$0" "$@"
            env=env | {"PYTHONPATH": str(root)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        if has_it:
            assert done.returncode == 0, done.stderr
        else:
            assert done.returncode != 0 and "ran:" not in done.stdout
            said = done.stderr
            assert "refused" in said and module in said, said
            assert removal["commit"][:8] in said and str(removal["date"]) in said, said
    if len(check) == 3:  # per case: the model that needs the module refuses, the others run
        assert done.stdout.strip() == "ran: the command"
        for model in unaffected:
            assert not any(module in word for word in SPECS[source].launches[model].argv)
        runs = dockerfile_runs(SPECS[source].dockerfile.read_text())
        assert not any(f"import {module}" in run for run in runs), (
            f"{SPECS[source].dockerfile} imports {module}: the whole image would be refused"
        )
    for verdict in needs_of(source)["models"].values():
        for variant in verdict["variants"]:
            if any(module in str(i.get("calls", "")) for i in verdict["imports"]):
                assert variant["verdict"] != "verified" and module in variant["because"], variant


def test_the_resnet_cases_of_an_image_without_apex_amp_run_and_its_bert_cases_are_refused(
    tmp_path: Path,
) -> None:
    """ngc-pytorch on a base whose apex has no apex.amp: each BERT case's command stops with
    the reason before torchrun; the ResNet-50 cases' commands (multiproc.py) carry no apex check
    and nothing refuses them (the kit's own check of the case, launch_for, passes)."""
    import subprocess
    import sys

    from driver.launchers.base import NodeRank

    upstream = UpstreamSource(SPECS["ngc-pytorch"])
    rank = NodeRank(node_rank=0, nodes=1, procs_per_node=1, master_addr="127.0.0.1",
                    master_port=29500)  # fmt: skip
    (tmp_path / "apex").mkdir()
    (tmp_path / "apex" / "__init__.py").write_text("")  # apex without amp (after cb65b8ed)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    cases = load_matrix(SPECS["ngc-pytorch"].matrix_file).cases
    resnet = [c for c in cases if c.model == "resnet50"]
    bert = [c for c in cases if c.model == "bert"]
    assert resnet and bert
    for case in resnet:
        argv = upstream.launch_argv(case, rank, case.batch_size)
        assert argv[0] == "python" and not any("apex" in word for word in argv), argv[:3]
    for case in bert:
        argv = upstream.launch_argv(case, rank, case.batch_size)
        assert argv[:2] == ["sh", "-c"] and argv[3] == "torchrun"
        done = subprocess.run([*argv[:3], "echo", "started"], env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert done.returncode == 3 and "started" not in done.stdout
        assert "refused" in done.stderr and "apex.amp" in done.stderr and "cb65b8ed" in done.stderr
