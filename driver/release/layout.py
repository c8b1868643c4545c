"""A released version's folder as both the release and the audit read it: its config copies
(peaks, references, published figures).

Kept apart from ``release.py`` so that the audit, which the release runs on every new version,
reads these without importing the release (no import circle).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from driver.model.figures import load_peaks, load_references
from driver.release.compute import Config
from driver.release.imported import figure_summaries

PUBLISHED_DIR = "config/published"  # import files of published figures, as released


def load_config(
    version_dir: Path, model_costs: dict[str, dict[str, Any]], split_by_machine: bool = False
) -> Config:
    """The version's config copies; an import file that does not load raises ConfigError.
    ``split_by_machine``: the version's results split cases by machine
    (``results.results_by_machine``)."""
    published = []
    for path in sorted((version_dir / PUBLISHED_DIR).glob("*")):
        published += figure_summaries(path)
    return Config(
        peaks=load_peaks(version_dir / "config" / "reports" / "peaks.yaml"),
        references=load_references(version_dir / "config" / "reports" / "references.yaml"),
        model_costs=model_costs,
        published=published,
        split_by_machine=split_by_machine,
    )
