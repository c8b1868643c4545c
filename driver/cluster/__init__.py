"""Clusters: the inventory of nodes, SSH connections (Fabric), pre-flight checks, provenance.

Used by the ``docker`` and ``process`` runtimes and by ``dlperf preflight`` / ``images push``.
Fabric and paramiko are imported inside functions: loading every plug-in stays cheap.
"""
