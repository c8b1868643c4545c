"""Diagnosing a cluster, above the mission's path (nothing below imports this package).

``nodescan.py`` is ``dlperf nodes``: one 1n1g case on every node at once, then the all-reduce
probe on pairs of nodes in a ring, naming the slow node and the slow link. ``probes.py`` runs the
all-reduce probe (``allreduce.py``, under torchrun) through any runtime into a session
(``dlperf probe``, ``dlperf run --probe``); the release reads the probe's raw log back with
``driver.release.scaling``.
"""
