"""The workloads: one module per model, each registering its :class:`~driver.workloads.base.
Workload` in ``WORKLOADS`` (``driver/workloads/base.py``); stdlib only."""
