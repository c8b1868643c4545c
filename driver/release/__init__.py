"""Released report versions: release and audit (see docs/reports.md).

- ``release``: result sessions -> an immutable ``reports/vX.Y/`` (``release.py``)
- ``audit``: recompute a version from its raw logs and name any difference (``audit.py``)
- the released versions of a reports folder and their index ``reports/README.md``
  (``versions.py``); who vouches for a new version (``vouching.py``)

Comparing versions (``compare``, ``factor``) reads them from ``driver.analysis``.
"""
