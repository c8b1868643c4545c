"""The one door every finished repeat goes through before any number of it is shown.

``repeat.py``: a repeat's files -> a verified repeat or a named refusal (record schema, case
identity, log checksums, re-measurement from the logs with the plausibility checks of
``driver.model.plausible``); ``hardware.py``: the machine a verified repeat ran on; ``folder.py``:
session folders read without following symlinks. ``driver.core`` (report, run) and
``driver.release`` (release, audit, compare, factor) and ``dlperf import-logs`` stand on it; it
stands on ``driver.model`` only.
"""
