"""docs/dlperf-compare.md is what tests/dlperf_compare.py makes of the published DLPerf files
and the kit's sources today: a new figure, source, image or matrix case changes it."""

from __future__ import annotations

import re

from tests import dlperf_compare


def test_the_compare_table_is_generated_from_the_published_files_and_the_sources() -> None:
    expected = dlperf_compare.render()
    assert dlperf_compare.OUT.read_text() == expected, "run: python -m tests.dlperf_compare"
    rows = [line for line in expected.splitlines() if line.startswith("| ") and "---" not in line]
    figures = sum(int(line.split("|")[8]) for line in rows[1:])
    assert figures == 374  # every DLPerf v1.0 figure of published/dlperf-v1.0/ is in a row
    hopper_pairs = [r for r in rows[1:] if r.split("|")[9].strip() == "yes" and "| yes |" in r]
    assert hopper_pairs  # rows that pair and whose image runs on an H100 exist


def test_every_row_names_its_image_on_hopper_and_what_still_differs() -> None:
    """A row whose pinned image predates Hopper names the source's current image (on a base
    whose CUDA runs there) or why there is none; every row names what differs from DLPerf's run
    on an H100 (the software, the AMP dtype of the kit's own scripts, the data)."""
    rows = [r.split("|")[1:-1] for r in dlperf_compare.render().splitlines() if r.startswith("| ")]
    header = [cell.strip() for cell in rows[0]]
    on, differs, hopper = (header.index(n) for n in ("on Hopper", "differs on an H100", "Hopper"))
    seen = set()
    for row in (list(map(str.strip, r)) for r in rows[2:]):
        source, precision, dataset = row[0], row[2], row[4]
        if row[hopper] == "yes":
            assert row[on] == "the pinned image" and "software: the pinned image" in row[differs]
        elif row[hopper].startswith("no"):
            assert row[on].startswith("`src-") or row[on].startswith("no current image: the code")
            assert (row[on].startswith("`src-")) == row[differs].startswith("software: MXNet")
            assert row[on].startswith("`src-") or row[differs] == "no H100 run"
            seen.add((source, row[on].startswith("`src-")))
        else:  # gluon-cv: the kit's own MXNet script, whose AMP on an H100 is bf16 by default
            assert ("AMP: bf16" in row[differs]) == (precision == "amp")
        if row[differs] != "no H100 run":
            assert ("data: your prepared copy" in row[differs]) == (dataset == "real")
    assert seen == {("gluon-nlp", True), ("ngc-mxnet", True), ("oneflow-benchmark", False),
                    ("paddle-models", False), ("tensorflow-models", False)}  # fmt: skip


def test_every_source_whose_image_predates_hopper_has_a_current_image_or_a_cited_refusal() -> None:
    for spec in dlperf_compare.SPECS.values():
        if dlperf_compare.generations(dlperf_compare.IMAGES[spec.base_image][0])[2] == "yes":
            continue
        current = spec.current_image
        assert current is not None, f"{spec.path}: no current_image (a current image or refused)"
        if current.refused:  # a release note or pull request, and the pinned code's path:line
            assert any(at.startswith("https://") for at in current.at), spec.name
            assert any(re.search(r"\.py:\d+", at) for at in current.at), spec.name
        else:
            cuda = dlperf_compare.IMAGES[current.base_image][0]
            assert dlperf_compare.generations(cuda)[2] == "yes", current.base_image


def test_the_gpu_generations_follow_the_image_s_cuda() -> None:
    assert dlperf_compare.generations((10, 2)) == ("yes", "no (CUDA < 11.0)", "no (CUDA < 11.8)")
    assert dlperf_compare.generations((11, 6)) == ("yes", "yes", "no (CUDA < 11.8)")
    assert dlperf_compare.generations((12, 1)) == ("yes", "yes", "yes")
    assert dlperf_compare.generations((13, 0))[0] == "no"
