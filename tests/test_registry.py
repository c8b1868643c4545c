"""Plug-in registries: names as users type them (folder spellings) resolve to one entry."""

from __future__ import annotations

import subprocess
import sys

import pytest

from driver.frameworks.base import FRAMEWORKS, REPO_ROOT
from driver.plugins import load_all
from driver.registry import Registry, UnknownPlugin


def test_framework_folder_and_display_spellings_are_aliases() -> None:
    load_all()
    for spelling in ("paddle", "paddlepaddle", "PaddlePaddle", "PADDLEPADDLE"):
        assert FRAMEWORKS.canonical(spelling) == "paddle"
        assert spelling in FRAMEWORKS
    assert FRAMEWORKS.canonical("MxNet") == "mxnet" and FRAMEWORKS.get("MXNet").name == "mxnet"
    assert FRAMEWORKS.get("PyTorch").name == "pytorch"
    with pytest.raises(UnknownPlugin, match="unknown framework 'padle'"):
        FRAMEWORKS.get("padle")
    assert FRAMEWORKS.names() == sorted(set(FRAMEWORKS.names()))  # aliases are not entries


def test_two_entries_cannot_claim_one_spelling() -> None:
    registry: Registry = Registry("thing", alias_fields=("folder",))

    class Entry:
        def __init__(self, folder: str) -> None:
            self.folder = folder

    registry.add("a", Entry("Shared"))
    with pytest.raises(ValueError, match="'shared' already names 'a'"):
        registry.add("b", Entry("shared"))


def test_make_accepts_the_folder_spelling() -> None:
    # `make -n` prints the command the target would run, without running it.
    result = subprocess.run(
        ["make", "-n", "resnet50-paddlepaddle", "VENV=.venv-none"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    line = next(x for x in result.stdout.splitlines() if "dlperf run" in x)
    assert "--framework paddlepaddle" in line
    dry = subprocess.run(
        [sys.executable, "-m", "driver.frontend.cli", "run", "--framework", "paddlepaddle",
         "--model", "resnet50", "--dry-run"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "resnet50/paddle/" in dry.stdout
