"""driver/bench/archs.py: a framework build's compiled architectures against a GPU's compute
capability (the lists as torch.cuda.get_arch_list() and TensorFlow's build info give them)."""

from __future__ import annotations

import pytest

from driver.bench.archs import NATIVE, PTX, REFUSED, UNKNOWN, decide, parse_arch

TORCH_211_CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
TORCH_17_CU102 = ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75"]
TF_23_CU101 = "sm_35,sm_50,sm_60,sm_70,sm_75,compute_75"
PADDLE_18_CU102 = "3.5 5.0 6.0 7.0 7.5"


@pytest.mark.parametrize(
    ("capability", "listing", "verdict"),
    [
        ((9, 0), TORCH_211_CU130, NATIVE),  # H100 / H200
        ((8, 9), TORCH_211_CU130, NATIVE),  # sm_86 machine code runs on 8.9 (same major)
        ((9, 0), TORCH_17_CU102, REFUSED),
        ((9, 0), TF_23_CU101, PTX),  # compute_75 PTX compiles for 9.0
        ((8, 0), PADDLE_18_CU102, REFUSED),
        ((9, 0), ["sm_90a"], NATIVE),
        ((9, 1), ["sm_90a"], REFUSED),  # arch-specific: 9.0 only
        ((8, 6), "8.0+PTX", NATIVE),
        ((9, 0), "8.0+PTX", PTX),
        ((7, 0), "8.0+PTX", REFUSED),  # PTX runs only on its capability and newer
        ((9, 0), [], UNKNOWN),
    ],
)
def test_a_build_runs_natively_through_ptx_or_not(capability, listing, verdict) -> None:  # noqa: ANN001
    assert decide(capability, listing, "pytorch", "x").verdict == verdict


def test_a_refusal_names_the_gpu_and_the_newer_pin() -> None:
    reason = decide((9, 0), TORCH_17_CU102, "pytorch", "torch 1.7.1").reason
    assert "torch 1.7.1 was built for sm_37" in reason
    assert "compute capability 9.0 (sm_90)" in reason and "CUDA >= 11.8" in reason
    ptx = decide((9, 0), TF_23_CU101, "tensorflow", "2.3.0").reason
    assert "only PTX" in ptx and "out of the measured window" in ptx


@pytest.mark.parametrize("text", ["sm_9", "gfx90a", "", "compute_x", "9"])
def test_what_is_not_an_architecture_is_ignored(text: str) -> None:
    assert parse_arch(text) is None
