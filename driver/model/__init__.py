"""What a benchmark is and what it produced, below everything that runs or publishes it.

- ``case.py``: one matrix point and its id;
- ``measure.py``: raw logs -> a repeat's measurement (the window throughput) and case statistics;
- ``plausible.py``: what a measurement must look like to be true, and ``measure_checked``;
- ``results.py``: the one on-disk repeat record and the session store that writes it;
- ``hardware.py``: the machine a header says a repeat ran on.

Imports only the base (``driver.schema``, ``driver.files``, ``driver.bench``) and the plug-in
kinds (``driver.parsers``, ``driver.frameworks``).
"""
