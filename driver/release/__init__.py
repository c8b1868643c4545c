"""Released report versions: release and audit (see docs/reports.md).

- ``release``: result sessions -> an immutable ``reports/vX.Y/`` (``release.py``)
- ``audit``: recompute a version from its raw logs and name any difference (``audit.py``)

Comparing versions (``compare``, ``factor``) reads them from ``driver.analysis``.
"""
