"""TF32 set one way (PyTorch/benchmark/train.py and PyTorch/bare_loop.py): torch >= 2.9's
fp32_precision flags only, with the float32 matmul precision made to agree, so that the legacy
getters code reads (inductor's max-autotune reads torch.get_float32_matmul_precision()) answer
instead of raising "mix of the legacy and new APIs". Run in the PyTorch environment."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from driver.frameworks.base import FRAMEWORKS

REPO_ROOT = Path(__file__).resolve().parents[1]

READ_EVERY_GETTER = """
import json, sys, torch
sys.path.insert(0, ".")
from PyTorch.benchmark.train import set_tf32
from PyTorch import bare_loop
setters = {"train": set_tf32, "bare_loop": lambda on: bare_loop._set_tf32(torch, on)}
getters = {
    "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "_get_cublas_allow_tf32": torch._C._get_cublas_allow_tf32,
    "get_float32_matmul_precision": torch.get_float32_matmul_precision,
    "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "bare_loop._tf32": lambda: bare_loop._tf32(torch),
}
seen = []
for name, setter in setters.items():
    for on in (True, False, True, False):
        setter(on)
        for getter, read in getters.items():
            try:
                seen.append([name, on, getter, read(), None])
            except Exception as error:
                seen.append([name, on, getter, None, str(error)[:600]])
print(json.dumps(seen))
"""


def framework_python() -> str:
    from driver.frameworks.envs import ensure_env
    from driver.plugins import load_all

    load_all()
    return str(ensure_env(FRAMEWORKS.get("pytorch"), log=lambda _line: None))


@pytest.fixture(scope="module")
def readings() -> list[list]:
    done = subprocess.run([framework_python(), "-c", READ_EVERY_GETTER], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_matmul_getters_answer_and_agree_after_every_setting(readings: list[list]) -> None:
    expected = {
        True: {"cuda.matmul.allow_tf32": True, "_get_cublas_allow_tf32": True,
               "get_float32_matmul_precision": "high", "bare_loop._tf32": True},
        False: {"cuda.matmul.allow_tf32": False, "_get_cublas_allow_tf32": False,
                "get_float32_matmul_precision": "highest", "bare_loop._tf32": False},
    }  # fmt: skip
    for setter, on, getter, value, error in readings:
        if getter in expected[on]:
            assert error is None, (setter, on, getter, error)
            assert value == expected[on][getter], (setter, on, getter)


def test_the_cudnn_legacy_getter_answers_for_tf32(readings: list[list]) -> None:
    """With TF32 on it answers True. With IEEE fp32 set through the new API, torch (2.11-2.13)
    raises for the legacy cuDNN getter whatever else is set (conv and RNN both "ieee" included):
    the kit never reads it, and nothing may set the legacy flag beside the new ones."""
    cudnn = [(on, value, error) for _s, on, getter, value, error in readings
             if getter == "cudnn.allow_tf32"]  # fmt: skip
    assert all(value is True and error is None for on, value, error in cudnn if on)
    assert all(
        value is False or "legacy and new APIs" in (error or "")
        for on, value, error in cudnn
        if not on
    )
