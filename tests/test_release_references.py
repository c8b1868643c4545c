"""The published-results data file and the nearest reference beside a measured case."""

from __future__ import annotations

import pytest

from driver.frameworks.base import REPO_ROOT
from driver.model.figures import load_references
from driver.release.references import Ours, nearest, per_device

REFERENCES = load_references(REPO_ROOT / "reports" / "references.yaml")
BY_ID = {r["id"]: r for r in REFERENCES}


def test_every_reference_names_its_source_and_setting() -> None:
    assert len(BY_ID) == len(REFERENCES) > 50  # ids are unique
    for ref in REFERENCES:
        for key in ("source", "link", "framework", "model", "hardware", "devices", "precision"):
            assert ref.get(key) not in (None, ""), (ref["id"], key)
        assert ref["link"].startswith("https://")
        assert ref["precision"] in ("fp32", "amp")
        assert ref.get("throughput") or ref.get("per_device") or ref.get("speedup"), ref["id"]


@pytest.mark.parametrize(
    ("ref_id", "field", "value"),
    [  # spot checks against /work/shared/notes/published-results.md
        ("dlperf-v1-rn50-oneflow-fp32-bs128-4n32g", "throughput", 12411.97),
        ("dlperf-v1-rn50-oneflow-fp32-bs128-4n32g", "speedup", 31.21),
        ("dlperf-v1-rn50-ngc-tf1-amp-bs224-xla-4n32g", "throughput", 29171.69),
        ("dlperf-v1-rn50-paddle-amp-bs196-dali-4n32g", "throughput", 11617.57),
        ("dlperf-v1-bert-oneflow-amp-bsmax-4n32g", "batch_per_device", 160),
        ("dlperf-v1-bert-ngc-pytorch-amp-bs64-1n1g", "throughput", 444.5),
        ("dle-pytorch-rn50-a100-amp-1n8g", "throughput", 16621),
        ("lambda-rn50-h200-fp32-1n1g", "throughput", 2259),
    ],
)
def test_reference_values_match_the_notes(ref_id: str, field: str, value: float) -> None:
    assert BY_ID[ref_id][field] == value


def test_per_device_values() -> None:
    assert per_device(BY_ID["dlperf-v1-rn50-oneflow-fp32-bs128-4n32g"]) == 12411.97 / 32
    assert per_device(BY_ID["mlperf-v3-rn50-h100-1n8g"]) == (7009 + 7161) / 2  # a range
    assert per_device(BY_ID["lambda-rn50-h100-amp-1n8g-speedup"]) is None  # speedup only


def ours(**changes: object) -> Ours:
    base = dict(
        model="resnet50",
        framework="pytorch",
        precision="amp",
        devices=1,
        batch_per_device=256,
        xla=False,
        dataset="synthetic",
        device_names=("NVIDIA H100 80GB HBM3",),
        throughput=2500.0,
    )
    return Ours(**{**base, **changes})  # type: ignore[arg-type]


def test_the_nearest_reference_prefers_the_same_gpu_precision_and_size() -> None:
    found = nearest(ours(), REFERENCES)
    assert found["reference_id"] == "lambda-rn50-h100-amp-1n1g"
    assert found["ratio_per_device"] == pytest.approx(2500 / 2791)
    v100 = nearest(ours(device_names=("Tesla V100-SXM2-16GB",), devices=32), REFERENCES)
    assert v100["reference_id"] == "dlperf-v1-rn50-ngc-pytorch-amp-bs256-4n32g"
    tf = nearest(
        ours(framework="tensorflow", device_names=("cpu",), batch_per_device=8), REFERENCES
    )
    assert tf["reference_id"].startswith("dle-tf-rn50-")  # same framework, 1 device
    assert nearest(ours(model="calibration"), REFERENCES) is None
    squad = [r for r in REFERENCES if r["model"] == "bert-squad384"]
    assert squad and nearest(ours(model="bert"), REFERENCES)["reference_id"] not in {
        r["id"] for r in squad
    }


def test_like_with_like_sets_a_gpu_beside_a_gpu_only() -> None:
    from driver.release.references import comparable

    assert comparable(["NVIDIA H100 80GB HBM3"], "8x V100-SXM2-16GB")
    assert not comparable(["AMD EPYC"], "8x V100-SXM2-16GB")
    assert not comparable(["Intel(R) Xeon(R) CPU @ 2.20GHz"], "A100-SXM4-80GB")
    assert not comparable([], "A100")
