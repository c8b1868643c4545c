"""Data sets prepared by ``dlperf data``: each source's format made from the user's downloads,
with a manifest (``dlperf-dataset.json``) whose SHA-256 is the set's identity in every case's
provenance."""
