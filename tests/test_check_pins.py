"""NVIDIADeepLearningExamples/PyTorch/check_pins.py: the Dockerfile's pins against the base
image's pip constraints. The comparison runs here on constraint files the test writes; the
Dockerfile checks exactly the pins it installs, before it installs them."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

FOLDER = Path(__file__).parents[1] / "NVIDIADeepLearningExamples" / "PyTorch"
spec = importlib.util.spec_from_file_location("check_pins", FOLDER / "check_pins.py")
assert spec is not None and spec.loader is not None
check_pins = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_pins)


def test_a_constraint_that_excludes_a_needed_version_is_named_with_its_line() -> None:
    constraints = "# NGC constraints\nnumpy==1.26.4\nurllib3==2.3.0 ; python_version >= '3'\n"
    resolved = {"boto3": "1.34.0", "botocore": "1.34.0", "urllib3": "2.0.7", "numpy": "1.26.4"}
    assert check_pins.conflicts(constraints, resolved) == [
        (3, "urllib3==2.3.0 ; python_version >= '3'", "urllib3", "2.0.7")
    ]


def test_agreeing_pins_and_lines_pip_options_or_other_packages_pass() -> None:
    constraints = "-r other.txt\nurllib3<3\nH5PY>=3\ntorch @ file:///opt/torch.whl\n"
    resolved = {"urllib3": "2.3.0", "h5py": "3.10.0", "boto3": "1.35.99"}
    assert check_pins.conflicts(constraints, resolved) == []


def test_the_dockerfile_checks_the_pins_it_installs_before_installing_them() -> None:
    text = (FOLDER / "Dockerfile").read_text()
    assert "# dlperf-context check_pins.py" in text
    run = re.search(
        r"RUN python /tmp/dlperf/check_pins.py (.+?) \\\n && pip install ((?:[^\n]*\\\n)*[^\n]*)",
        text,
    )
    assert run is not None
    checked = run[1].split()
    installed = [w for w in run[2].replace("\\", " ").split() if "==" in w]
    assert checked == installed and "boto3==1.35.99" in checked
