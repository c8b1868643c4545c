"""Shards written by a framework's own writer (``_writers.py``) in its environment."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from driver.datasets._writers import ERROR_TAG
from driver.datasets.imagenet import SPLITS, Image, prepare
from driver.schema import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]


MAX_SHARDS = 65536  # ImageNet's 1.28 M train images at 20 an image shard; BERT's 256 many times


def check_shards(option: str, count: int) -> None:
    """A shard count given on the command line: 1 to MAX_SHARDS, named before any framework
    environment is looked for."""
    if not 1 <= count <= MAX_SHARDS:
        raise ConfigError("command line", option, f"is {count}: give 1 to {MAX_SHARDS}")


def shard_plan(images: list[Image], shards: int, seed: int = 0) -> list[list[Image]]:
    """``images`` in ``shards`` parts of near-equal size; train shuffled once with a fixed seed
    (as build_imagenet_data.py does, so no shard holds one class), val in order."""
    ordered = list(images)
    if any(i.split == "train" for i in images):
        random.Random(seed).shuffle(ordered)
    count = max(1, min(shards, len(ordered)))
    return [ordered[i::count] for i in range(count)]


# Where a split's n-th image shard of ``total`` goes in the folder ``out``: (out, split, n, total).
ShardPath = Callable[[Path, str, int, int], Path]


def write_splits(
    writer: tuple[str, str], out: Path, images: list[Image], counts: dict[str, int], at: ShardPath
) -> list[Path]:
    """Each split's images in ``counts[split]`` shards at ``at``, every one not yet there
    written by ``writer`` (a framework and its writer's kind); the shards' paths."""
    shards: list[tuple[Path, list[Image]]] = []
    for split in SPLITS:
        part = [i for i in images if i.split == split]
        if part:
            plan = shard_plan(part, counts[split])
            shards += [(at(out, split, n, len(plan)), group) for n, group in enumerate(plan)]
    job = {
        "shards": [
            {"path": str(path), "images": [[str(i.path), i.label, i.wnid] for i in images]}
            for path, images in shards
        ]
    }
    run_job(*writer, job, shards[0][0].parent)
    return [path for path, _ in shards]


def shards_command(
    parser: argparse.ArgumentParser, fmt: str, writer: tuple[str, str], at: ShardPath
) -> None:
    """Make ``parser`` (its arguments given, ``--train-shards`` and ``--val-shards`` among them)
    the command writing ImageNet as ``fmt`` with :func:`write_splits`."""

    def run(args: argparse.Namespace) -> int:
        counts = {"train": args.train_shards, "val": args.val_shards}
        for split, count in counts.items():
            check_shards(f"--{split}-shards", count)
        return prepare(
            args,
            fmt,
            lambda out, _c, im: write_splits(writer, out, im, counts, at),
            {"shards": counts},
        )

    parser.set_defaults(func=run)


def run_job(framework: str, kind: str, job: dict, folder: Path) -> None:
    """Run ``_writers.py``'s ``kind`` on ``job`` (its shards) in ``framework``'s environment
    (its venv's python), raising a ConfigError on ``folder`` with the writer's output when it
    fails."""
    from driver.frameworks.base import FRAMEWORKS
    from driver.frameworks.envs import venv_environment, venv_python
    from driver.plugins import load

    load("frameworks")
    plugin = FRAMEWORKS.get(framework)
    python = venv_python(plugin)
    if not python.exists():
        raise ConfigError(
            python, "(file)", f"is missing: make {framework}'s environment (`dlperf envs`) first"
        )
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as stream:
        json.dump({**job, "cwd": os.getcwd()}, stream)  # the writer runs from the repository
    try:
        done = subprocess.run(
            [str(python), "-m", "driver.datasets._writers", kind, stream.name],
            cwd=REPO_ROOT,
            env={
                **os.environ,
                **venv_environment(plugin),
                "PYTHONPATH": str(REPO_ROOT),
            },
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        Path(stream.name).unlink(missing_ok=True)
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.startswith(ERROR_TAG)]
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        cause = f" {said[-1][len(ERROR_TAG) :].strip()}" if said else f"\n{tail}"
        raise ConfigError(folder, "(folder)", f"{framework}'s {kind} writer failed:{cause}")
