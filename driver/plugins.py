"""Import the plug-in modules of one kind (or of every kind) once, so its registry is complete.

Plug-ins live in the packages below, one module (or one package of modules) each, and
register themselves on import; a new workload, framework, launcher, runtime, parser or
upstream source is one new module and nothing else. A caller loads only the kinds it asks about
(``load("parsers")`` to measure a log): the import a caller cannot write as a statement reaches
no further than the registries it reads. Plug-in modules import heavy dependencies (fabric,
docker, numpy) inside functions, so loading them stays cheap.
"""

from __future__ import annotations

import importlib
import pkgutil

KINDS = ("workloads", "parsers", "launchers", "frameworks", "sources", "runtimes")

_loaded: set[str] = set()


def load(*kinds: str) -> None:
    """Import every plug-in module of each of ``kinds`` (``driver/<kind>/``), once."""
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"{kind!r} is not a plug-in kind ({', '.join(KINDS)})")
        if kind in _loaded:
            continue
        package = importlib.import_module(f"driver.{kind}")
        for info in pkgutil.iter_modules(package.__path__):
            if info.name != "base" and not info.name.startswith("_"):
                module = importlib.import_module(f"{package.__name__}.{info.name}")
                if info.ispkg:  # a plug-in of several modules (driver/runtimes/slurm/)
                    for inner in pkgutil.iter_modules(module.__path__):
                        if not inner.name.startswith("_"):
                            importlib.import_module(f"{module.__name__}.{inner.name}")
        _loaded.add(kind)


def load_all() -> None:
    """Every kind: for the front door and tests, which may ask any registry."""
    load(*KINDS)
