"""driver.core.session: the cases a run selects, with the CPU smoke profile's AMP rule."""

from __future__ import annotations

import pytest

from driver.core.matrix import overrides_from
from driver.core.session import CPU_PROFILE, select_cases
from driver.frameworks.base import FRAMEWORKS
from driver.plugins import load_all

load_all()


def _select(native_bf16: bool | None, amp: tuple[str, ...] = (), profile: str = CPU_PROFILE):
    overrides = overrides_from({"models": ("resnet50",), "precisions": amp})
    matrix = FRAMEWORKS.get("pytorch").matrix_file
    return select_cases([matrix], profile, "test", overrides, native_bf16)


@pytest.mark.parametrize(
    ("native_bf16", "amp", "precisions", "note"),
    [
        (False, (), {"fp32"}, "2 case(s) left out"),  # emulated bf16: AMP out, said once
        (False, ("amp",), {"amp"}, "kept as --amp asks"),  # asked for: run, with the warning
        (True, (), {"fp32", "amp"}, ""),  # avx512_bf16 / AMX: everything, nothing to say
        (None, (), {"fp32", "amp"}, ""),  # the nodes are not this host: nothing known
    ],
)
def test_cpu_smoke_amp_on_a_cpu_without_bf16(native_bf16, amp, precisions, note) -> None:
    selection = _select(native_bf16, amp)
    assert {case.precision for case in selection.cases} == precisions
    assert (note in selection.note) if note else selection.note == ""
    assert "\n" not in selection.note  # one line


def test_the_dlperf_protocol_keeps_its_amp_cases() -> None:
    selection = _select(False, profile="dlperf")
    assert "amp" in {case.precision for case in selection.cases} and selection.note == ""
