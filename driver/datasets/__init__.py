"""Data sets a benchmark reads, made by ``dlperf data <format>``: one module per format, each
writing its files and a ``dlperf-dataset.json`` manifest (``manifest.py``)."""
