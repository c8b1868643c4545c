"""dlperf: measure deep-learning training throughput the DLPerf way.

Importing the package must stay cheap and dependency-free: benchmark scripts import
``driver.bench`` inside framework environments that lack the
driver's own dependencies.
"""

__version__ = "0.1.0"
