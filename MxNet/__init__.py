"""MXNet benchmark scripts of the dlperf kit (a package: the scripts import their models)."""
