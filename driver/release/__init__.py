"""Released report versions: release, audit, compare, factor comparisons (see docs/reports.md).

- ``release``: result sessions -> an immutable ``reports/vX.Y/`` (``release.py``)
- ``audit``: recompute a version from its raw logs and name any difference (``audit.py``)
- ``compare``: two versions or sessions, case by case, with a noise-aware verdict
- ``factor``: the ratio of one factor's two values over every otherwise-equal case
"""
