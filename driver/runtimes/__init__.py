"""Runtimes: where a node's command runs (this host, a container over SSH, a process over SSH)."""
