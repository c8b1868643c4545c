"""docs/dlperf-compare.md is what tests/dlperf_compare.py makes of the published DLPerf files
and the kit's sources today: a new figure, source, image or matrix case changes it."""

from __future__ import annotations

from tests import dlperf_compare


def test_the_compare_table_is_generated_from_the_published_files_and_the_sources() -> None:
    expected = dlperf_compare.render()
    assert dlperf_compare.OUT.read_text() == expected, "run: python -m tests.dlperf_compare"
    rows = [line for line in expected.splitlines() if line.startswith("| ") and "---" not in line]
    figures = sum(int(line.split("|")[8]) for line in rows[1:])
    assert figures == 374  # every DLPerf v1.0 figure of published/dlperf-v1.0/ is in a row
    hopper_pairs = [r for r in rows[1:] if r.split("|")[9].strip() == "yes" and "| yes |" in r]
    assert hopper_pairs  # rows that pair and whose image runs on an H100 exist


def test_the_gpu_generations_follow_the_image_s_cuda() -> None:
    assert dlperf_compare.generations((10, 2)) == ("yes", "no (CUDA < 11.0)", "no (CUDA < 11.8)")
    assert dlperf_compare.generations((11, 6)) == ("yes", "yes", "no (CUDA < 11.8)")
    assert dlperf_compare.generations((12, 1)) == ("yes", "yes", "yes")
    assert dlperf_compare.generations((13, 0))[0] == "no"
