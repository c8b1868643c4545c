"""dlperf: measure deep-learning training throughput the DLPerf way.

Importing the package must stay cheap and dependency-free: benchmark scripts import
``driver.steplog`` and ``driver.benchargs`` inside framework environments that lack the
driver's own dependencies.
"""

__version__ = "0.1.0"
