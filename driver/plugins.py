"""Import every plug-in module once, so each registry is complete.

Plug-ins live in the packages below, one module (or one package of modules) each, and
register themselves on import; a new framework, launcher, runtime, parser or upstream source is
one new module and nothing else.
Plug-in modules import heavy dependencies (fabric, docker, numpy) inside functions, so loading
them all stays cheap.
"""

from __future__ import annotations

import importlib
import pkgutil

PLUGIN_PACKAGES = (
    "driver.parsers",
    "driver.launchers",
    "driver.runtimes",
    "driver.frameworks",
    "driver.sources",
)

_loaded = False


def load_all() -> None:
    global _loaded
    if _loaded:
        return
    for package_name in PLUGIN_PACKAGES:
        try:
            package = importlib.import_module(package_name)
        except ModuleNotFoundError:
            continue  # a package not written yet
        for info in pkgutil.iter_modules(package.__path__):
            if info.name != "base" and not info.name.startswith("_"):
                module = importlib.import_module(f"{package_name}.{info.name}")
                if info.ispkg:  # a plug-in of several modules (driver/runtimes/slurm/)
                    for inner in pkgutil.iter_modules(module.__path__):
                        if not inner.name.startswith("_"):
                            importlib.import_module(f"{module.__name__}.{inner.name}")
    _loaded = True
