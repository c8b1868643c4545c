"""Upstream source plug-ins: pinned official benchmark code run by its own launcher."""
