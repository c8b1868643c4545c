"""A source's current image as a case of its own: selected per case (``image: current`` in a
matrix, ``dlperf run --image current``), resolved by one function for every container platform,
refused before anything starts where the source has none, recorded with what differs, and named
by ``dlperf factor`` beside DLPerf's figure.

Rendered for 4 nodes x 8 GPUs (no GPU, no cluster): docker and podman over SSH (``--dry-run``),
pyxis and Slurm's OCI containers (the step and what is made before it), apptainer (which runs
no source image, pinned or current, and says so).
"""

from __future__ import annotations

import io
import shlex
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from driver.analysis.compare import load_side, side_of_summaries
from driver.analysis.factor import factor_report
from driver.cluster.slurm import SlurmConfig
from driver.core.matrix import MatrixError, Overrides, apply_overrides, load_matrix
from driver.core.plan import dry_run_plan
from driver.core.runner import _provenance_extra
from driver.core.summary import CaseSummary, image_label
from driver.frameworks.base import REPO_ROOT
from driver.frontend.cli import main
from driver.model.case import Case, Topology
from driver.model.measure import case_stats
from driver.model.results import RepeatLogs
from driver.plugins import load_all
from driver.release.imported import figure_summaries
from driver.runtimes.base import RuntimeConfigError
from driver.runtimes.containers.source_image import SourceImage
from driver.runtimes.slurm.runtime import SlurmRuntime
from driver.sources.base import image_differs, source_image
from driver.sources.upstream import SPECS
from tests.test_upstream_sources import case_for

load_all()

SOURCE = "gluon-nlp"  # a source with a current image: src-gluon-nlp-current
PINNED_IMAGE, CURRENT_IMAGE = "src-gluon-nlp", "src-gluon-nlp-current"
INVENTORY = REPO_ROOT / "examples" / "inventory-4n32g.yaml"
DLPERF = REPO_ROOT / "published" / "dlperf-v1.0" / "gluon-nlp.yaml"


def both(model: str = "bert") -> tuple[Case, Case]:
    pinned = case_for(SOURCE, model)
    (current,) = apply_overrides([pinned], Overrides(image="current"))
    return pinned, current


# -- the case --------------------------------------------------------------------------------
def test_the_current_image_is_a_case_of_its_own_with_one_resolver() -> None:
    pinned, current = both()
    assert current.id == f"{pinned.id}/current-image" and current.group_key != pinned.group_key
    assert "image" not in pinned.to_dict() and current.to_dict()["image"] == "current"
    assert Case.from_dict(current.to_dict()) == current
    assert source_image(SOURCE) == PINNED_IMAGE == SPECS[SOURCE].image
    assert source_image(SOURCE, "current") == CURRENT_IMAGE
    assert image_differs(pinned) == [] and image_differs(current)[0] == "MXNet 1.9.0.rc6 to 1.9.1"
    assert image_differs(current) == SPECS[SOURCE].current_image.differs


def test_a_matrix_selects_it_with_image_current(tmp_path: Path) -> None:
    matrix = yaml.safe_load((REPO_ROOT / "MxNet" / "upstream" / "matrix.yaml").read_text())
    matrix["suites"] = [{**matrix["suites"][0], "image": "current"}, matrix["suites"][0]]
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix))
    cases = load_matrix(path).cases
    current = [c for c in cases if c.image == "current"]
    assert current and len(current) == len(cases) // 2
    assert {c.id.removesuffix("/current-image") for c in current} == {
        c.id for c in cases if c.image == "pinned"
    }


@pytest.mark.parametrize(
    ("source", "field", "reason"),
    [
        ("paddle-models", "current_image.refused", "Paddle withdrew the fluid API"),
        ("tensorflow-models", "current_image.refused", "tf.keras.mixed_precision.experimental"),
        ("ngc-pytorch", "current_image", "not given"),
    ],
)
def test_a_source_without_a_current_image_is_refused_naming_the_field_and_reason(
    source: str, field: str, reason: str, tmp_path: Path
) -> None:
    spec = SPECS[source]
    cases = load_matrix(spec.matrix_file).cases[:1]
    with pytest.raises(MatrixError) as refused:
        apply_overrides(cases, Overrides(image="current"))
    text = str(refused.value)
    assert text.startswith("command line: --image: image current: ")
    assert f"source {source} has no current image ({spec.path}: {field}: " in text
    assert reason in text and "image: pinned" in text
    # The same in a matrix file: its own path and the suite's field
    matrix = yaml.safe_load(spec.matrix_file.read_text())
    matrix.setdefault("defaults", {})["image"] = "current"
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(matrix))
    with pytest.raises(MatrixError, match=rf"{path}: suites\[0\]\.image: .*{field}: "):
        load_matrix(path)


def test_the_kit_s_own_cases_have_no_current_image() -> None:
    case = Case("resnet50", "pytorch", Topology(1, 1), 128, "amp", "synthetic")
    with pytest.raises(MatrixError, match="source dlperf has no current image .*framework's"):
        apply_overrides([case], Overrides(image="current"))


def test_the_record_carries_the_image_and_what_differs(tmp_path: Path) -> None:
    pinned, current = both()
    logs = RepeatLogs.read(tmp_path)
    assert "image" not in (_provenance_extra(pinned, logs) or {})
    facts = _provenance_extra(current, logs)["image"]
    assert facts["name"] == CURRENT_IMAGE and facts["differs"] == image_differs(current)
    assert image_label(facts).startswith(f"{CURRENT_IMAGE} (MXNet 1.9.0.rc6 to 1.9.1; CUDA ")


# -- every platform renders the image the case asks for ----------------------------------------
def dry_run(inventory: Path, *extra: str) -> list[str]:
    args = ["run", "--runtime", "ssh", "--inventory", str(inventory), "--matrix",
            str(SPECS[SOURCE].matrix_file), "--nodes", "4", "--gpus", "8", "--batch", "32",
            "--profile", "dlperf", "--dry-run", *extra]  # fmt: skip
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(args) == 0
    return [line.strip() for line in out.getvalue().splitlines() if line.startswith("    [")]


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_docker_and_podman_run_the_current_image_of_a_current_case(
    engine: str, tmp_path: Path
) -> None:
    inventory = tmp_path / "inventory.yaml"
    data = yaml.safe_load(INVENTORY.read_text())
    inventory.write_text(yaml.safe_dump({"container": engine, **data}))
    pinned = SourceImage.of(SOURCE).shown
    current = SourceImage.of(SOURCE, "current").shown
    assert CURRENT_IMAGE in current and pinned != current
    for extra, image, other in (((), pinned, current), (("--image", "current"), current, pinned)):
        lines = dry_run(inventory, *extra)
        assert lines and len(lines) % 4 == 0  # every node of every selected case
        for line in lines:
            words = shlex.split(line.split(" $ ", 1)[1])
            argv = words[: words.index("&&")]  # `<engine> create ...`, then `&& <engine> start`
            assert argv[:2] == [engine, "create"] and image in argv and other not in argv
            assert argv[argv.index(image) + 1 : argv.index(image) + 3] == ["sh", "-c"]


def slurm_plan(config: SlurmConfig, case: Case) -> tuple[SlurmRuntime, list[str]]:
    runtime = SlurmRuntime(config=config)
    plan = dry_run_plan(case, runtime, int(case.batch_size))
    return runtime, runtime.describe(plan)


def test_pyxis_imports_and_runs_the_current_image_of_a_current_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DLPERF_ENGINE", "docker")  # dockerd:// whatever this host holds
    config = SlurmConfig(partition="gpu", gpus_per_node=8, container="pyxis")
    for case, choice in zip(both(), ("pinned", "current"), strict=True):
        image = SourceImage.of(SOURCE, choice)
        assert image.name == (CURRENT_IMAGE if choice == "current" else PINNED_IMAGE)
        runtime, lines = slurm_plan(config, case)
        squashfs = runtime.platform.squashfs(image)
        key = SOURCE if choice == "pinned" else f"{SOURCE}-current"
        enroot = ["enroot", "import", "--output", str(squashfs), f"dockerd://{image.shown}"]
        at = lines.index(f"$ {shlex.join(enroot)}")
        assert f"(or set slurm.image.{key})" in lines[at - 1]
        assert f"--container-image={squashfs}" in shlex.split(lines[at + 1].removeprefix("$ "))
    # An entry for the pinned image never stands in for the current one, and the reverse.
    named = SlurmConfig(container="pyxis", image={SOURCE: "r#pinned", f"{SOURCE}-current": "r#cur"})
    platform = SlurmRuntime(config=named).platform
    assert platform.image_for("mxnet", SOURCE) == "r#pinned"
    assert platform.image_for("mxnet", SOURCE, "current") == "r#cur"


def test_slurm_oci_makes_the_bundle_of_the_current_image(tmp_path: Path) -> None:
    config = SlurmConfig(gpus_per_node=8, gpu_request="gres", container="oci",
                         oci_cache=str(tmp_path / "cache"))  # fmt: skip
    bundles = set()
    for case, choice in zip(both(), ("pinned", "current"), strict=True):
        image = SourceImage.of(SOURCE, choice)
        assert image.name == (CURRENT_IMAGE if choice == "current" else PINNED_IMAGE)
        _, lines = slurm_plan(config, case)
        (said,) = [line for line in lines if line.startswith("# once per session: the OCI bundle")]
        assert f"(root from the image {image.shown} (the source's image {image.name}); " in said
        (step,) = [line for line in lines if line.startswith("$ srun ") and "--label" in line]
        bundle = next(a for a in shlex.split(step.removeprefix("$ ")) if a.startswith("--contai"))
        assert bundle.endswith("/" + (SOURCE if choice == "pinned" else f"{SOURCE}-current"))
        bundles.add(bundle)
    assert len(bundles) == 2  # the two images never share a session's bundle
    oci = SlurmConfig(container="oci", oci_image={f"{SOURCE}-current": "registry/cur:1"})
    assert SlurmRuntime(config=oci).platform.source("mxnet", SOURCE, "current")[1:] == (
        "registry/cur:1",
        f"slurm.oci_image.{SOURCE}-current",
    )


def test_apptainer_runs_no_source_image_pinned_or_current() -> None:
    config = SlurmConfig(gpus_per_node=8, container="apptainer")
    for case, name in zip(both(), (PINNED_IMAGE, CURRENT_IMAGE), strict=True):
        with pytest.raises(RuntimeConfigError, match=rf"its own image \({name}\), and .*pyxis"):
            slurm_plan(config, case)


# -- dlperf factor -----------------------------------------------------------------------------
def test_factor_names_the_current_image_beside_dlperf_s_figure(tmp_path: Path) -> None:
    figure = next(s for s in figure_summaries(DLPERF) if s.case.precision == "fp32")
    case = replace(figure.case, image="current")
    facts = _provenance_extra(case, RepeatLogs.read(tmp_path))["image"]
    mine = CaseSummary(
        case=case, stats=case_stats([900.0]), batch_size=int(case.batch_size), speedup=None,
        efficiency=None, throughputs=[900.0],
        devices=["NVIDIA H100 80GB HBM3"] * case.topology.world_size, image=image_label(facts),
    )  # fmt: skip
    data, text = factor_report(
        [side_of_summaries("h100", "session", [mine]), load_side(str(DLPERF), tmp_path, tmp_path)],
        "device", "V100", "H100",
    )  # fmt: skip
    pair = next(p for p in data["pairs"] if p["b_case"] == case.id)
    assert pair["a_case"] == figure.case.id != case.id
    (named,) = [d for d in pair["also_differs"] if d.startswith("image: ")]
    assert named == f"image: pinned vs {image_label(facts)}"
    assert "MXNet 1.9.0.rc6 to 1.9.1" in named and "image" in text.split("differ in more than")[1]
