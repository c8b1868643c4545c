"""The case matrix schema: every bad input is one clear error naming file, field and fix."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from driver.core.matrix import (
    MAX_CASES,
    MatrixError,
    Overrides,
    apply_overrides,
    check_case_count,
    load_matrix,
)
from driver.frameworks.base import FRAMEWORKS
from driver.model.case import Topology
from driver.plugins import load_all

load_all()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    return path


GOOD = """
framework: pytorch
defaults: {warmup_steps: 20, measured_steps: 100, repeats: 7}
suites:
  - model: resnet50
    topology: [1n1g, 1n8g, 2n16g, 4n32g]
    batch_size: [128, max]
    precision: [fp32, amp]
"""


def test_expands_cartesian_product_with_stable_ids(tmp_path: Path) -> None:
    matrix = load_matrix(write(tmp_path, GOOD))
    ids = [case.id for case in matrix.cases]
    assert len(ids) == 4 * 2 * 2
    assert "resnet50/pytorch/1n1g/bs128/amp/synthetic" in ids
    assert "resnet50/pytorch/4n32g/bsmax/fp32/synthetic" in ids
    case = next(c for c in matrix.cases if c.topology.label == "2n16g")
    assert case.topology == Topology(2, 8) and case.total_steps == 120 and case.repeats == 7


@pytest.mark.parametrize(
    ("text", "field", "hint"),
    [
        (GOOD + "    colour: red\n", "suites[0].colour", "allowed keys"),
        (GOOD.replace("[128, max]", "[0]"), "suites[0].batch_size[0]", "positive integer"),
        (GOOD.replace("[128, max]", "[-4]"), "suites[0].batch_size[0]", "positive integer"),
        (GOOD.replace("[128, max]", "['big']"), "suites[0].batch_size[0]", "'max'"),
        (GOOD.replace("model: resnet50", "model: vgg16"), "suites[0].model", "resnet50"),
        (GOOD.replace("framework: pytorch", "framework: caffe"), "framework", "pytorch"),
        (GOOD.replace("repeats: 7", "repeats: seven"), "defaults.repeats", "valid integer"),
        (GOOD.replace("repeats: 7}", "repeats: 7, total_steps: 50}"), "total_steps", "exceeds"),
        (GOOD.replace("[fp32, amp]", "[fp16]"), "suites[0].precision[0]", "fp32, amp"),
        (GOOD.replace("1n8g", "3n8g"), "suites[0].topology[1]", "multiple of nodes"),
        (GOOD + "    xla: on\n", "suites[0].xla[0]", "allowed values"),
        (GOOD + "    dataset: real\n", "suites[0].data_dir", "needs data_dir"),
        # relative (or ~): read on the nodes from another folder, never mounted under docker
        (GOOD + "    data_dir: data/imagenet\n", "suites[0].data_dir", "an absolute folder"),
        (GOOD + "    data_dir: ~/imagenet\n", "suites[0].data_dir", "an absolute folder"),
    ],
)
def test_rejections_name_file_field_and_allowed_values(
    tmp_path: Path, text: str, field: str, hint: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(MatrixError) as caught:
        load_matrix(path)
    message = str(caught.value)
    assert str(path) in message and field in message and hint in message


def test_not_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match="not valid YAML"):
        load_matrix(write(tmp_path, "suites: [\n"))
    with pytest.raises(MatrixError, match="does not exist"):
        load_matrix(tmp_path / "nope.yaml")


def test_profiles_replace_suites_and_merge_defaults(tmp_path: Path) -> None:
    text = (
        GOOD
        + """profiles:
  smoke:
    description: tiny
    defaults: {measured_steps: 5, repeats: 2}
    suites: [{model: bert, batch_size: 4}]
"""
    )
    matrix = load_matrix(write(tmp_path, text), "smoke")
    assert [c.id for c in matrix.cases] == ["bert/pytorch/1n1g/bs4/fp32/synthetic"]
    case = matrix.cases[0]
    assert (case.warmup_steps, case.measured_steps, case.repeats, case.profile) == (
        20,
        5,
        2,
        "smoke",
    )
    with pytest.raises(MatrixError, match="no profile 'other'"):
        load_matrix(write(tmp_path, text), "other")


def test_overrides_narrow_and_widen(tmp_path: Path) -> None:
    cases = load_matrix(write(tmp_path, GOOD)).cases
    chosen = apply_overrides(
        cases,
        Overrides(
            topologies=("4n32g",),
            batch_sizes=(64,),
            precisions=("amp",),
            repeats=2,
            measured_steps=300,
        ),
    )
    assert {c.id for c in chosen} == {"resnet50/pytorch/4n32g/bs64/amp/synthetic"}
    assert chosen[0].repeats == 2 and chosen[0].total_steps == 320


def test_a_shorter_window_shortens_an_implicit_total_but_keeps_an_explicit_one(
    tmp_path: Path,
) -> None:
    [implicit] = apply_overrides(
        load_matrix(write(tmp_path, GOOD)).cases,
        Overrides(topologies=("1n1g",), batch_sizes=(64,), precisions=("amp",)),
    )
    assert implicit.total_steps == 120
    [short] = apply_overrides([implicit], Overrides(warmup_steps=1, measured_steps=2))
    assert short.total_steps == 3  # not 120: no steps run after the measured window
    explicit = replace(implicit, total_steps=500)  # e.g. a matrix that sets total_steps
    [kept] = apply_overrides([explicit], Overrides(warmup_steps=1, measured_steps=2))
    assert kept.total_steps == 500


def test_every_framework_matrix_in_the_repository_is_valid() -> None:
    for name in FRAMEWORKS.names():
        framework = FRAMEWORKS.get(name)
        if framework.matrix_file.exists():
            assert load_matrix(framework.matrix_file).cases


# --------------------------------------------------------------------------------------------
# Options: each framework declares what its script reads


def _script_options(script: Path, name: str) -> set[str]:
    """The keys of the dict literal ``name = {...}`` in a script (read, not imported: the
    scripts import their framework)."""
    import ast

    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                assert isinstance(node.value, ast.Dict)
                return {key.value for key in node.value.keys}  # type: ignore[union-attr]
    raise AssertionError(f"{script}: no {name}")


@pytest.mark.parametrize(
    ("framework", "script", "name"),
    [
        ("pytorch", "PyTorch/benchmark/train.py", "PYTORCH_OPTIONS"),
        ("tensorflow", "TensorFlow/benchmark/train.py", "TF_OPTIONS"),
        ("tensorflow-horovod", "TensorFlow/benchmark/train.py", "TF_OPTIONS"),
        ("paddle", "PaddlePaddle/benchmark/trainer.py", "PADDLE_OPTIONS"),
        ("mxnet", "MxNet/benchmark/trainer.py", "MXNET_OPTIONS"),
        ("oneflow", "OneFlow/benchmark/train.py", "ONEFLOW_OPTIONS"),
    ],
)
def test_declared_options_are_what_each_script_reads(
    framework: str, script: str, name: str
) -> None:
    from driver.frameworks.base import REPO_ROOT

    plugin = FRAMEWORKS.get(framework)
    assert set(plugin.options) == _script_options(REPO_ROOT / script, name)


def test_shared_option_declarations_follow_the_shared_dicts() -> None:
    # SHAPE_OPTIONS / TRAINING_OPTIONS move to driver.bench (the bench package); either works.
    import importlib

    from driver.frameworks.base import SHAPE_OPTION_TYPES, TRAINING_OPTION_TYPES

    def shared(name: str, *modules: str) -> set[str]:
        for module in modules:
            try:
                return set(getattr(importlib.import_module(module), name))
            except (ModuleNotFoundError, AttributeError):
                continue
        raise AssertionError(f"no {name} in {modules}")

    assert set(SHAPE_OPTION_TYPES) == shared("SHAPE_OPTIONS", "driver.bench.contract")
    assert set(TRAINING_OPTION_TYPES) == shared("TRAINING_OPTIONS", "driver.bench.contract")


@pytest.mark.parametrize(
    ("variants", "field", "hint"),
    [
        ("{default: {chanels_last: true}}", "variants.default.chanels_last", "'channels_last'?"),
        ("{default: {channels_last: 'yes'}}", "variants.default.channels_last", "valid boolean"),
        ("{default: {lr: .nan}}", "variants.default.lr", "finite"),
        ("{default: {step_time: 0.1}}", "variants.default.step_time", "its options"),
    ],
)
def test_matrix_options_are_checked_against_the_framework(
    tmp_path: Path, variants: str, field: str, hint: str
) -> None:
    with pytest.raises(MatrixError) as caught:
        load_matrix(write(tmp_path, GOOD + f"    variants: {variants}\n"))
    assert field in str(caught.value) and hint in str(caught.value), str(caught.value)


def test_cli_overrides_take_the_matrix_checks(tmp_path: Path) -> None:
    from driver.core.matrix import overrides_from

    cases = load_matrix(write(tmp_path, GOOD)).cases
    for values, flag in (
        ({"repeats": 0}, "--repeats"),
        ({"measured_steps": 0}, "--measured-steps"),
        ({"warmup_steps": -1}, "--warmup-steps"),
        ({"topologies": ("1n65g",)}, "--nodes/--gpus"),
        ({"batch_sizes": (0,)}, "--batch"),
    ):
        with pytest.raises(MatrixError, match=flag):
            overrides_from(values)
    with pytest.raises(MatrixError, match=r"--option chanels_last: .*'channels_last'\?"):
        apply_overrides(cases, overrides_from({"options": {"chanels_last": True}}))
    with pytest.raises(MatrixError, match="--option.*not a number"):
        apply_overrides(cases, overrides_from({"options": {"step_time": float("nan")}}))


def test_every_suite_is_checked_whatever_the_profile_and_duplicate_keys_are_refused(
    tmp_path: Path,
) -> None:
    text = GOOD + "profiles:\n  smoke:\n    suites: [{model: vgg16}]\n"
    with pytest.raises(MatrixError, match=r"profiles.smoke.suites\[0\].model"):
        load_matrix(write(tmp_path, text))  # the default profile is asked for
    twice = GOOD + "profiles:\n  a: {description: x}\nprofiles:\n  b: {description: y}\n"
    with pytest.raises(MatrixError, match="'profiles' is given twice"):
        load_matrix(write(tmp_path, twice))


def test_a_selection_past_the_bound_needs_max_cases(capsys: pytest.CaptureFixture) -> None:
    from driver.frontend.cli import main

    check_case_count(MAX_CASES, MAX_CASES)  # at the bound: runs
    with pytest.raises(MatrixError, match=f"holds {MAX_CASES + 1} cases, more than {MAX_CASES}"):
        check_case_count(MAX_CASES + 1, MAX_CASES)
    argv = ["run", "--dry-run", "--profile", "cpu-smoke", "--framework", "pytorch"]
    assert main([*argv, "--max-cases", "1"]) == 2
    assert "--max-cases: the selection holds" in capsys.readouterr().err
    assert main([*argv, "--max-cases", "100"]) == 0  # said so: the selection runs


def test_a_suite_that_expands_past_what_a_matrix_holds_is_refused(tmp_path: Path) -> None:
    batches = ", ".join(str(b) for b in range(1, 401))
    variants = ", ".join(f"v{i}: {{}}" for i in range(300))
    path = write(tmp_path, f"framework: pytorch\nsuites:\n  - model: resnet50\n"
                           f"    batch_size: [{batches}]\n    variants: {{{variants}}}\n")
    with pytest.raises(MatrixError, match=r"suites\[0\]: expands to 120000 cases"):
        load_matrix(path)


def test_a_profile_description_is_free_text(tmp_path: Path) -> None:
    body = "framework: pytorch\nsuites: [{model: resnet50}]\nprofiles:\n  p: {description: %s}\n"
    assert load_matrix(write(tmp_path, body % '"8x H100, <b>bold</b>"'), "p").description
    for bad in ('"a\\u202eb"', '"a\\nb"', "x" * 2001):
        with pytest.raises(MatrixError, match="profiles.p.description"):
            load_matrix(write(tmp_path, body % bad))
