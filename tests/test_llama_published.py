"""published/llama3/: torchtitan's and NVIDIA NeMo's Llama figures, imported in tokens/s per
device through the same door and plausibility bounds as every published figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.core.report import tokens_per_second
from driver.release.imported import imported_summaries
from driver.schema import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TORCHTITAN = ROOT / "published" / "llama3" / "torchtitan.yaml"
NEMO = ROOT / "published" / "llama3" / "nemo.yaml"


def test_torchtitan_figures_import_as_published_tokens_per_device() -> None:
    summaries = imported_summaries(TORCHTITAN)
    per_device = {
        (s.case.variant, s.case.topology.world_size): tokens_per_second(s, per_device=True)
        for s in summaries
    }
    # Table 1 and Table 3 of the cited page, as printed.
    assert per_device[("8b", 8)] == pytest.approx(5762)
    assert per_device[("8b-compile", 8)] == pytest.approx(6667)
    assert per_device[("8b-compile", 128)] == pytest.approx(6514)
    assert all(s.published_by == "torchtitan (PyTorch)" for s in summaries)
    # samples/s over all devices = tokens/s per device x devices / 8192 tokens per sample
    base = next(s for s in summaries if s.case.variant == "8b" and s.case.topology.world_size == 8)
    assert base.stats.median == pytest.approx(5762 * 8 / 8192)


def test_nemo_figures_import_as_published_tokens_per_device() -> None:
    summaries = imported_summaries(NEMO)
    by_size = {s.case.options["llama_size"]: s for s in summaries}
    # The Llama 3 rows of NeMo 24.07's DGX-H100 FP8 table at the cited commit, as printed.
    eight, seventy = by_size["llama3-8b"], by_size["llama3-70b"]
    assert tokens_per_second(eight, per_device=True) == pytest.approx(12273)
    assert tokens_per_second(seventy, per_device=True) == pytest.approx(1524)
    assert (eight.case.topology.nodes, eight.case.topology.world_size) == (1, 8)
    assert (seventy.case.topology.nodes, seventy.case.topology.world_size) == (8, 64)
    assert eight.stats.median == pytest.approx(12273 * 8 / 8192)
    # FP8 is marked in the variant: never paired with a bf16 case of the kit's own variants.
    assert {s.case.variant for s in summaries} == {"8b-fp8", "70b-fp8"}
    assert all(s.published_by == "NVIDIA NeMo" for s in summaries)
    commit = "8e3d65dcfe3504689bfc5b6e67d502780aacad41"  # the cited page's NeMo commit
    assert all(commit in str(s.published_url) for s in summaries)
    assert not any(s.unknown_device for s in summaries)


FIGURE = (
    "{framework: pytorch, model: llama, llama_size: llama3-8b, hardware: H100, nodes: 1, "
    "devices: 8, batch: 2, precision: amp, publisher: x, url: 'https://example.org/', %s}"
)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ("seq_len: 8192, tokens_per_device: 1.0e+12", "plausible"),  # far past any device
        ("seq_len: 8192, tokens_per_device: 5762, throughput: 5.6", "not both"),
        ("tokens_per_device: 5762", "needs seq_len"),
        ("seq_len: 8192, tokens_per_device: 5762, llama_size: llama3-9b", "llama_size"),
    ],
)
def test_bad_token_figures_are_refused_naming_the_field(
    tmp_path: Path, fields: str, words: str
) -> None:
    path = tmp_path / "figures.yaml"
    if "llama_size: llama3-9b" in fields:
        fields = fields.replace(", llama_size: llama3-9b", "")
        text = "schema: 1\nfigures:\n  - " + FIGURE.replace("llama3-8b", "llama3-9b") % fields
    else:
        text = "schema: 1\nfigures:\n  - " + FIGURE % fields
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as caught:
        imported_summaries(path)
    message = str(caught.value)
    assert str(path) in message and "figures[0]" in message
    assert words in message, message
