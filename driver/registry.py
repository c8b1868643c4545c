"""One tiny registry type for every plug-in kind: frameworks, launchers, runtimes, log parsers.

Plug-ins register themselves by name with a decorator (``@LAUNCHERS.register("torchrun")``);
``driver.plugins.load_all`` imports every plug-in module once so the registries are complete.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownPlugin(KeyError):
    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        self.kind, self.name, self.known = kind, name, known
        super().__init__(f"unknown {kind} {name!r}; known {kind}s: {', '.join(known) or '(none)'}")

    def __str__(self) -> str:  # KeyError would print the repr with quotes
        return self.args[0]


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorate(entry: T) -> T:
            self.add(name, entry)
            return entry

        return decorate

    def add(self, name: str, entry: T) -> T:
        if name in self._entries and self._entries[name] is not entry:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownPlugin(self.kind, name, self.names()) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


FRAMEWORKS: Registry = Registry("framework")
LAUNCHERS: Registry = Registry("launcher")
RUNTIMES: Registry = Registry("runtime")
PARSERS: Registry = Registry("log parser")
SOURCES: Registry = Registry("source")
