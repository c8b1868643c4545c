"""Check the Dockerfile's pip pins against the base image's pip constraints, at build time.

NGC PyTorch images from 25.03 on enforce a constraints file (``/etc/pip/constraint.txt``,
through ``PIP_CONSTRAINT``): a pin that needs a package version the file excludes makes the
image fail to build, or, worse, resolve to something else. Run in the image, before the pins
are installed::

    python check_pins.py h5py==3.10.0 boto3==1.35.99

It resolves the pins with the constraints (``pip install --dry-run``); where that fails, it
resolves them without and names every constraint line that excludes a version the pins need,
then exits 1. Stdlib and pip's own vendored ``packaging`` only: it runs in the base image.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

CONSTRAINTS = "/etc/pip/constraint.txt"


def _key(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def conflicts(constraints: str, resolved: dict[str, str]) -> list[tuple[int, str, str, str]]:
    """(line number, line, package, version) for every constraint line that excludes the
    version ``resolved`` (package -> version, as pip's install report gives them) holds."""
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement

    wanted = {_key(name): version for name, version in resolved.items()}
    found = []
    for number, line in enumerate(constraints.splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text or text.startswith("-"):
            continue  # comments and pip options (-r, --hash) hold no version bound
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        version = wanted.get(_key(requirement.name))
        if version is not None and not requirement.specifier.contains(version, prereleases=True):
            found.append((number, line.strip(), requirement.name, version))
    return found


def _dry_run(pins: list[str], constrained: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PIP_CONSTRAINT", None)
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--no-cache-dir"]
    command += ["--ignore-installed", "--report", "-"]
    if constrained:
        command += ["-c", CONSTRAINTS]
    return subprocess.run(command + pins, capture_output=True, text=True, env=env, check=False)


def main(pins: list[str]) -> int:
    if not os.path.isfile(CONSTRAINTS):
        print(f"dlperf: no {CONSTRAINTS} in this image; the pins are not constrained")
        return 0
    if _dry_run(pins, constrained=True).returncode == 0:
        print(f"dlperf: the pins {' '.join(pins)} agree with {CONSTRAINTS}")
        return 0
    free = _dry_run(pins, constrained=False)
    if free.returncode != 0:
        print(free.stderr[-3000:], file=sys.stderr)
        print(f"dlperf: the pins {' '.join(pins)} do not resolve at all", file=sys.stderr)
        return 1
    resolved = {
        item["metadata"]["name"]: item["metadata"]["version"]
        for item in json.loads(free.stdout)["install"]
    }
    with open(CONSTRAINTS, encoding="utf-8") as stream:
        found = conflicts(stream.read(), resolved)
    for number, line, name, version in found:
        print(
            f"dlperf: the pins {' '.join(pins)} need {name} {version}; "
            f"{CONSTRAINTS}:{number} says {line!r}: change the pin in "
            "NVIDIADeepLearningExamples/PyTorch/Dockerfile to a release that agrees",
            file=sys.stderr,
        )
    if not found:
        print(
            f"dlperf: the pins {' '.join(pins)} do not resolve with {CONSTRAINTS}; pip says:\n"
            + _dry_run(pins, constrained=True).stderr[-3000:],
            file=sys.stderr,
        )
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
